/*
 * test-notify.c - gpubrokerd's messages to the service manager, received on
 * a NOTIFY_SOCKET this test owns (an AF_UNIX datagram socket, as systemd's).
 *
 *   ready     READY=1 arrives from the daemon's pid, with a STATUS= line, and
 *             only once its socket accepts connections; no WATCHDOG=1 without
 *             WATCHDOG_USEC; SIGHUP gives RELOADING=1 then READY=1; SIGTERM
 *             gives STOPPING=1 and exit status 0.
 *   watchdog  with WATCHDOG_USEC=200000 and WATCHDOG_PID=the daemon, WATCHDOG=1
 *             every ~100 ms from the event loop, and none after STOPPING=1.
 *   other-pid with WATCHDOG_PID naming another process, no pings at all.
 *
 * Skips (77) when the daemon is built without libsystemd: it then sends
 * nothing, by design.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"

#define NOTIFY_TIMEOUT_MS 10000

static int failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
	va_list ap;
	fputs("FAIL: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	failures++;
}

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond))                                                                       \
			fail(__VA_ARGS__);                                                         \
	} while (0)

struct env {
	char dir[64];
	char notify[128];
	char socket[128];
	char conf[128];
	char log[128];
	int nfd;
};

struct daemon {
	pid_t pid;
};

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void env_setup(struct env *e)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int one = 1;

	snprintf(e->dir, sizeof(e->dir), "/tmp/gpb-notify-XXXXXX");
	if (!mkdtemp(e->dir)) {
		perror("mkdtemp");
		exit(1);
	}
	snprintf(e->notify, sizeof(e->notify), "%s/notify", e->dir);
	snprintf(e->socket, sizeof(e->socket), "%s/gpubroker.sock", e->dir);
	snprintf(e->conf, sizeof(e->conf), "%s/empty.conf", e->dir);
	snprintf(e->log, sizeof(e->log), "%s/daemon.log", e->dir);
	int fd = open(e->conf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		perror(e->conf);
		exit(1);
	}
	close(fd);
	e->nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	memcpy(sa.sun_path, e->notify, strlen(e->notify) + 1);
	if (e->nfd < 0 || bind(e->nfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    setsockopt(e->nfd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0) {
		perror("notify socket");
		exit(1);
	}
}

static void env_teardown(struct env *e)
{
	close(e->nfd);
	unlink(e->notify);
	unlink(e->socket);
	unlink(e->conf);
	unlink(e->log);
	rmdir(e->dir);
}

/* Starts the daemon. watchdog_usec: NULL for no watchdog; watchdog_pid:
 * NULL for the daemon's own pid. */
static void daemon_start(struct env *e, struct daemon *d, const char *watchdog_usec,
                         const char *watchdog_pid)
{
	const char *daemon = getenv("GPB_DAEMON");
	if (!daemon) {
		fprintf(stderr, "GPB_DAEMON is not set (run through meson test)\n");
		exit(1);
	}
	unlink(e->socket);
	d->pid = fork();
	if (d->pid < 0) {
		perror("fork");
		exit(1);
	}
	if (d->pid == 0) {
		char pid[32];
		int log = open(e->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (log >= 0)
			dup2(log, STDERR_FILENO);
		unsetenv("GPUBROKER_SOCKET");
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		unsetenv("WATCHDOG_USEC");
		unsetenv("WATCHDOG_PID");
		setenv("NOTIFY_SOCKET", e->notify, 1);
		if (watchdog_usec) {
			snprintf(pid, sizeof(pid), "%d", (int)getpid());
			setenv("WATCHDOG_USEC", watchdog_usec, 1);
			setenv("WATCHDOG_PID", watchdog_pid ? watchdog_pid : pid, 1);
		}
		execl(daemon, daemon, "--config", e->conf, "--socket", e->socket, "--backend",
		      "sim", "--sim-memory", "64MiB", "--slab-size", "2MiB", (char *)NULL);
		perror(daemon);
		_exit(127);
	}
}

/* SIGTERM (already sent or sent here) and the exit status, or -1. */
static int daemon_wait(struct daemon *d, bool term)
{
	int status;
	if (term)
		kill(d->pid, SIGTERM);
	for (int i = 0; i < 1000; i++) {
		pid_t got = waitpid(d->pid, &status, WNOHANG);
		if (got == d->pid) {
			d->pid = 0;
			return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		}
		usleep(10000);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &status, 0);
	d->pid = 0;
	return -1;
}

/*
 * Receives one datagram within timeout_ms. Returns its length (buf is
 * NUL-terminated), 0 on timeout. *sender is the pid the kernel vouches for.
 */
static int notify_recv(struct env *e, int timeout_ms, char *buf, size_t size, pid_t *sender)
{
	struct pollfd p = {.fd = e->nfd, .events = POLLIN};
	union {
		char buf[CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} control;
	struct iovec iov = {.iov_base = buf, .iov_len = size - 1};
	struct msghdr msg = {
	    .msg_iov = &iov,
	    .msg_iovlen = 1,
	    .msg_control = control.buf,
	    .msg_controllen = sizeof(control.buf),
	};

	*sender = 0;
	int rc = poll(&p, 1, timeout_ms);
	if (rc <= 0)
		return 0;
	ssize_t n = recvmsg(e->nfd, &msg, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return 0;
	buf[n] = '\0';
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
			struct ucred cred;
			memcpy(&cred, CMSG_DATA(c), sizeof(cred));
			*sender = cred.pid;
		}
	}
	return (int)n;
}

/* The value of a "NAME=value" line of a message, or NULL. */
static const char *notify_field(const char *msg, const char *name, char *out, size_t size)
{
	size_t len = strlen(name);
	for (const char *line = msg; line && *line;) {
		const char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);
		if (n > len && strncmp(line, name, len) == 0 && line[len] == '=') {
			snprintf(out, size, "%.*s", (int)(n - len - 1), line + len + 1);
			return out;
		}
		line = nl ? nl + 1 : NULL;
	}
	return NULL;
}

static bool notify_has(const char *msg, const char *line)
{
	char value[256], name[64];
	const char *eq = strchr(line, '=');
	snprintf(name, sizeof(name), "%.*s", (int)(eq - line), line);
	return notify_field(msg, name, value, sizeof(value)) && strcmp(value, eq + 1) == 0;
}

static bool socket_connectable(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

static void show_log(const struct env *e)
{
	char line[512];
	FILE *f = fopen(e->log, "r");
	if (!f)
		return;
	printf("--- daemon log ---\n");
	while (fgets(line, sizeof(line), f))
		fputs(line, stdout);
	printf("------------------\n");
	fclose(f);
}

/*
 * Reads messages until one has `want` (a NAME=value line), within
 * timeout_ms. Counts WATCHDOG=1 pings seen on the way in *pings (may be
 * NULL). Returns true and leaves that message in buf.
 */
static bool wait_for(struct env *e, const struct daemon *d, const char *want, int timeout_ms,
                     char *buf, size_t size, int *pings)
{
	long long end = now_ms() + timeout_ms;
	for (;;) {
		long long left = end - now_ms();
		pid_t sender;
		if (left <= 0 || notify_recv(e, (int)left, buf, size, &sender) == 0)
			return false;
		CHECK(sender == d->pid, "message from pid %d, not the daemon (%d): %s", (int)sender,
		      (int)d->pid, buf);
		if (pings && notify_has(buf, "WATCHDOG=1"))
			(*pings)++;
		if (notify_has(buf, want))
			return true;
	}
}

static void test_ready(struct env *e)
{
	struct daemon d;
	char msg[1024], status[256];
	int pings = 0;

	printf("# ready, reload, stop\n");
	long long start = now_ms();
	daemon_start(e, &d, NULL, NULL);
	if (!wait_for(e, &d, "READY=1", NOTIFY_TIMEOUT_MS, msg, sizeof(msg), &pings)) {
		fail("no READY=1 within %d ms", NOTIFY_TIMEOUT_MS);
		daemon_wait(&d, true);
		show_log(e);
		return;
	}
	/* The socket must already accept connections when READY=1 is sent:
	 * check before anything else can happen. */
	CHECK(socket_connectable(e->socket), "READY=1 before %s accepts connections", e->socket);
	CHECK(notify_field(msg, "STATUS", status, sizeof(status)) && status[0],
	      "READY=1 without a STATUS= line: '%s'", msg);
	CHECK(strstr(status, "serving") != NULL, "unexpected STATUS= '%s'", status);
	printf("READY=1 after %lld ms, STATUS=%s\n", now_ms() - start, status);

	/* Without WATCHDOG_USEC there is nothing to ping. */
	pid_t sender;
	while (notify_recv(e, 300, msg, sizeof(msg), &sender) > 0)
		CHECK(!notify_has(msg, "WATCHDOG=1"), "WATCHDOG=1 without WATCHDOG_USEC");
	CHECK(pings == 0, "WATCHDOG=1 without WATCHDOG_USEC");

	kill(d.pid, SIGHUP);
	CHECK(wait_for(e, &d, "RELOADING=1", NOTIFY_TIMEOUT_MS, msg, sizeof(msg), NULL),
	      "no RELOADING=1 after SIGHUP");
	CHECK(wait_for(e, &d, "READY=1", NOTIFY_TIMEOUT_MS, msg, sizeof(msg), NULL),
	      "no READY=1 after the reload");
	CHECK(socket_connectable(e->socket), "the socket stopped answering after a reload");

	kill(d.pid, SIGTERM);
	bool stopping = wait_for(e, &d, "STOPPING=1", NOTIFY_TIMEOUT_MS, msg, sizeof(msg), NULL);
	CHECK(stopping, "no STOPPING=1 after SIGTERM");
	if (stopping) {
		CHECK(notify_field(msg, "STATUS", status, sizeof(status)) &&
		          strstr(status, "stopping"),
		      "STOPPING=1 without a STATUS=stopping line: '%s'", msg);
		printf("STOPPING=1, STATUS=%s\n", status);
	}
	int rc = daemon_wait(&d, false);
	CHECK(rc == 0, "the daemon exited with %d after SIGTERM", rc);
	if (failures)
		show_log(e);
}

static void test_watchdog(struct env *e)
{
	struct daemon d;
	char msg[1024];
	int pings = 0, after = 0;
	pid_t sender;

	printf("# watchdog\n");
	daemon_start(e, &d, "200000", NULL);
	if (!wait_for(e, &d, "READY=1", NOTIFY_TIMEOUT_MS, msg, sizeof(msg), NULL)) {
		fail("no READY=1 within %d ms", NOTIFY_TIMEOUT_MS);
		daemon_wait(&d, true);
		show_log(e);
		return;
	}
	/* 200 ms watchdog: pings every 100 ms, so about 10 in a second. */
	long long end = now_ms() + 1000;
	while (now_ms() < end) {
		if (notify_recv(e, (int)(end - now_ms()), msg, sizeof(msg), &sender) == 0)
			continue;
		CHECK(sender == d.pid, "ping from pid %d, not the daemon", (int)sender);
		pings += notify_has(msg, "WATCHDOG=1");
	}
	printf("%d WATCHDOG=1 pings in 1 s (WATCHDOG_USEC=200000)\n", pings);
	CHECK(pings >= 4, "only %d WATCHDOG=1 pings in a second with a 200 ms watchdog", pings);

	kill(d.pid, SIGTERM);
	CHECK(wait_for(e, &d, "STOPPING=1", NOTIFY_TIMEOUT_MS, msg, sizeof(msg), NULL),
	      "no STOPPING=1 after SIGTERM");
	int rc = daemon_wait(&d, false);
	while (notify_recv(e, 100, msg, sizeof(msg), &sender) > 0)
		after += notify_has(msg, "WATCHDOG=1");
	CHECK(after == 0, "%d WATCHDOG=1 pings after STOPPING=1", after);
	CHECK(rc == 0, "the daemon exited with %d after SIGTERM", rc);
	if (failures)
		show_log(e);
}

static void test_other_pid(struct env *e)
{
	struct daemon d;
	char msg[1024];
	int pings = 0;
	pid_t sender;

	printf("# watchdog for another pid\n");
	/* pid 1 is never the daemon: sd_watchdog_enabled() says no. */
	daemon_start(e, &d, "200000", "1");
	if (!wait_for(e, &d, "READY=1", NOTIFY_TIMEOUT_MS, msg, sizeof(msg), &pings)) {
		fail("no READY=1 within %d ms", NOTIFY_TIMEOUT_MS);
		daemon_wait(&d, true);
		show_log(e);
		return;
	}
	long long end = now_ms() + 600;
	while (now_ms() < end) {
		if (notify_recv(e, (int)(end - now_ms()), msg, sizeof(msg), &sender) > 0)
			pings += notify_has(msg, "WATCHDOG=1");
	}
	CHECK(pings == 0, "%d WATCHDOG=1 pings although WATCHDOG_PID is another process", pings);
	int rc = daemon_wait(&d, true);
	CHECK(rc == 0, "the daemon exited with %d after SIGTERM", rc);
}

int main(void)
{
	struct env e;

	setvbuf(stdout, NULL, _IOLBF, 0);
#if !GPB_HAVE_SYSTEMD
	printf("gpubrokerd is built without libsystemd: it sends no notifications; skipped\n");
	return 77;
#endif
	signal(SIGPIPE, SIG_IGN);
	env_setup(&e);
	test_ready(&e);
	test_watchdog(&e);
	test_other_pid(&e);
	env_teardown(&e);
	if (failures) {
		printf("%d check(s) failed\n", failures);
		return 1;
	}
	printf("all notification checks passed\n");
	return 0;
}
