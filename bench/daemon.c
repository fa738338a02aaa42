/*
 * daemon.c - the gpubrokerd under test: start, stop, resident memory.
 */
#include "bench.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* Room for every benchmark: 1M footprint allocations on one connection,
 * 64 throughput clients, and a device that never fills. */
static const char *const daemon_flags[] = {
    "--backend", "sim",           "--sim-memory", "1TiB",        "--max-allocations",
    "4000000",   "--max-clients", "1024",         "--log-level", "warn",
};
#define NFLAGS (sizeof(daemon_flags) / sizeof(daemon_flags[0]))

static bool daemon_ready(const struct bench_daemon *d)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	memcpy(sa.sun_path, d->socket, strlen(d->socket) + 1);
	ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

void bench_daemon_start(struct bench_daemon *d, const char *path, const char *const *extra)
{
	const char *argv[NFLAGS + 20];
	size_t n = 0, off;

	snprintf(d->dir, sizeof(d->dir), "/tmp/gpb-bench-XXXXXX");
	if (!mkdtemp(d->dir))
		bench_die("mkdtemp: %s", strerror(errno));
	snprintf(d->socket, sizeof(d->socket), "%s/gpubroker.sock", d->dir);
	argv[n++] = path;
	argv[n++] = "--socket";
	argv[n++] = d->socket;
	for (size_t i = 0; i < NFLAGS; i++)
		argv[n++] = daemon_flags[i];
	for (size_t i = 0; extra && extra[i] && n < NFLAGS + 19; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	off = 0;
	for (size_t i = 0; i < n && off < sizeof(d->command); i++)
		off += (size_t)snprintf(d->command + off, sizeof(d->command) - off, "%s%s",
		                        i ? " " : "", argv[i]);

	d->pid = fork();
	if (d->pid < 0)
		bench_die("fork: %s", strerror(errno));
	if (d->pid == 0) {
		execv(path, (char *const *)argv);
		fprintf(stderr, "gpb-bench: cannot run %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	for (int i = 0; i < 1000; i++) {
		if (daemon_ready(d))
			return;
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid)
			bench_die("%s exited at start-up", path);
		bench_sleep_ns(10 * 1000000ull);
	}
	bench_die("%s does not accept connections on %s", path, d->socket);
}

void bench_daemon_stop(struct bench_daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		for (int i = 0; i < 500; i++) {
			if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
				d->pid = 0;
				break;
			}
			bench_sleep_ns(10 * 1000000ull);
		}
		if (d->pid > 0) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, NULL, 0);
			d->pid = 0;
		}
	}
	unlink(d->socket);
	rmdir(d->dir);
}

long bench_rss_bytes(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	}
	fclose(f);
	return kib < 0 ? -1 : kib * 1024;
}
