/*
 * exitwatch.c - tells the broker when the process of an evicted session has
 * exited (a pidfd polled by the loop), so that the slabs it may still have
 * mapped go back to the backend only then.
 */
#include "exitwatch.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

struct exitwatch_entry {
	uv_poll_t poll;
	int fd;
	struct list link; /* exitwatch->entries */
	struct exitwatch *w;
	struct broker_ghost *ghost;
};

static void exitwatch_on_closed(uv_handle_t *h)
{
	struct exitwatch_entry *e = h->data;
	close(e->fd);
	free(e);
}

static void exitwatch_entry_close(struct exitwatch_entry *e)
{
	list_remove(&e->link);
	uv_close((uv_handle_t *)&e->poll, exitwatch_on_closed);
}

static void exitwatch_on_exit(uv_poll_t *p, int status, int events)
{
	struct exitwatch_entry *e = p->data;
	(void)events;
	/* An error polling a pidfd cannot be waited out: let go now rather
	 * than hold the memory for ever. */
	if (status < 0)
		log_warn("exit watch: %s; slabs let go", uv_strerror(status));
	broker_ghost_release(e->w->broker, e->ghost);
	exitwatch_entry_close(e);
}

/* broker_exit_fn */
static int exitwatch_add(void *ctx, pid_t pid, struct broker_ghost *ghost)
{
	struct exitwatch *w = ctx;
	if (pid <= 0)
		return -ESRCH;
	/* glibc 2.36 has pidfd_open(), older ones only the system call. */
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return -errno;
	struct exitwatch_entry *e = calloc(1, sizeof(*e));
	if (!e) {
		close(fd);
		return -ENOMEM;
	}
	e->fd = fd;
	e->w = w;
	e->ghost = ghost;
	int rc = uv_poll_init(w->loop, &e->poll, fd);
	if (rc < 0) {
		close(fd);
		free(e);
		return rc;
	}
	e->poll.data = e;
	list_insert_tail(&w->entries, &e->link);
	rc = uv_poll_start(&e->poll, UV_READABLE, exitwatch_on_exit);
	if (rc < 0) {
		exitwatch_entry_close(e);
		return rc;
	}
	return 0;
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
