/*
 * exitwatch.c - tells the broker when the process of an evicted session has
 * exited (a pidfd polled by the loop), so that the slabs it may still have
 * mapped go back to the backend only then. Where pidfd_open() is missing
 * (kernels before 5.3, valgrind before 3.20) a timer asks kill(pid, 0). A
 * client in a PID namespace the daemon cannot see has pid 0 here: it is
 * watched through the pidfd the server took from its socket (SO_PEERPIDFD).
 */
#include "exitwatch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

#define EXITWATCH_POLL_MS 200 /* the fallback's period */

struct exitwatch_entry {
	union {
		uv_poll_t poll;   /* on the pidfd */
		uv_timer_t timer; /* the fallback */
		uv_handle_t handle;
	} h;
	int fd; /* the pidfd, or -1 */
	pid_t pid;
	struct list link; /* exitwatch->entries */
	struct exitwatch *w;
	struct broker_ghost *ghost;
};

static void exitwatch_on_closed(uv_handle_t *h)
{
	struct exitwatch_entry *e = h->data;
	if (e->fd >= 0)
		close(e->fd);
	free(e);
}

static void exitwatch_entry_close(struct exitwatch_entry *e)
{
	list_remove(&e->link);
	uv_close(&e->h.handle, exitwatch_on_closed);
}

static void exitwatch_gone(struct exitwatch_entry *e)
{
	broker_ghost_release(e->w->broker, e->ghost);
	exitwatch_entry_close(e);
}

static void exitwatch_on_exit(uv_poll_t *p, int status, int events)
{
	(void)events;
	/* An error polling a pidfd cannot be waited out: let go now rather
	 * than hold the memory for ever. */
	if (status < 0)
		log_warn("exit watch: %s; slabs let go", uv_strerror(status));
	exitwatch_gone(p->data);
}

static void exitwatch_on_timer(uv_timer_t *t)
{
	struct exitwatch_entry *e = t->data;
	/* EPERM: alive, under another user. */
	if (kill(e->pid, 0) < 0 && errno == ESRCH)
		exitwatch_gone(e);
}

/* The entry's handle, started: on the pidfd, or the fallback timer. */
static int exitwatch_start(struct exitwatch *w, struct exitwatch_entry *e)
{
	int rc;
	if (e->fd >= 0) {
		rc = uv_poll_init(w->loop, &e->h.poll, e->fd);
		if (rc < 0)
			return rc;
		e->h.handle.data = e;
		list_insert_tail(&w->entries, &e->link);
		rc = uv_poll_start(&e->h.poll, UV_READABLE, exitwatch_on_exit);
	} else {
		uv_timer_init(w->loop, &e->h.timer);
		e->h.handle.data = e;
		list_insert_tail(&w->entries, &e->link);
		rc = uv_timer_start(&e->h.timer, exitwatch_on_timer, EXITWATCH_POLL_MS,
		                    EXITWATCH_POLL_MS);
	}
	if (rc < 0)
		exitwatch_entry_close(e);
	return rc;
}

/* broker_exit_fn */
static int exitwatch_add(void *ctx, pid_t pid, int pidfd, struct broker_ghost *ghost)
{
	struct exitwatch *w = ctx;
	int fd;
	if (pidfd >= 0) {
		/* The peer's own pidfd (SO_PEERPIDFD): its pid is unknown here
		 * (another PID namespace), and pid 0 is no sign that it exited. */
		fd = fcntl(pidfd, F_DUPFD_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
	} else {
		/* The broker never asks for a process it cannot name. */
		if (pid <= 0)
			return -EINVAL;
		/* glibc 2.36 has pidfd_open(), older ones only the system call. */
		fd = (int)syscall(SYS_pidfd_open, pid, 0);
		/* Gone already; any other failure (no pidfds, out of
		 * descriptors) falls back to polling the pid, never to letting
		 * go early. */
		if (fd < 0 && (errno == ESRCH || (kill(pid, 0) < 0 && errno == ESRCH)))
			return -ESRCH;
	}
	struct exitwatch_entry *e = calloc(1, sizeof(*e));
	if (!e) {
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	e->fd = fd;
	e->pid = pid;
	e->w = w;
	e->ghost = ghost;
	int rc = exitwatch_start(w, e);
	if (rc < 0 && e->h.handle.data != e) {
		/* Not initialised, so not to be closed: freed here. */
		if (fd >= 0)
			close(fd);
		free(e);
	}
	return rc;
}

void exitwatch_init(struct exitwatch *w, uv_loop_t *loop, struct broker *b)
{
	w->loop = loop;
	w->broker = b;
	list_init(&w->entries);
	broker_set_exit_watch(b, exitwatch_add, w);
}

void exitwatch_finish(struct exitwatch *w)
{
	broker_set_exit_watch(w->broker, NULL, NULL);
	/* The ghosts stay with the broker, which lets them go when it is
	 * destroyed: the daemon is stopping. */
	while (!list_empty(&w->entries))
		exitwatch_entry_close(list_entry(w->entries.next, struct exitwatch_entry, link));
}
