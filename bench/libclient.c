/*
 * libclient.c - workloads through libgpubroker and the real daemon: one
 * alloc+free pair, many processes at once, and the daemon's memory per
 * live allocation.
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpubroker.h"
#include "proto.h"

void bench_lib_open(struct bench_lib *l, const char *socket, bool anchor)
{
	struct gpb_register_opts opts = {.name = "gpb-bench"};
	struct gpb_allocation a;

	memset(l, 0, sizeof(*l));
	if (gpb_connect(socket, "gpb-bench", &l->c) < 0 ||
	    gpb_register(l->c, &opts, &l->instance) < 0)
		bench_die("library: %s", gpb_last_error());
	if (anchor) {
		if (gpb_alloc(l->c, l->instance, 4096, 0, &a) < 0)
			bench_die("library: anchor allocation: %s", gpb_last_error());
		l->anchor = a.id;
	}
}

void bench_lib_close(struct bench_lib *l)
{
	gpb_disconnect(l->c);
	l->c = NULL;
}

void bench_lib_pair(struct bench_lib *l)
{
	struct gpb_allocation a;

	if (gpb_alloc(l->c, l->instance, BENCH_ALLOC_SIZE, 0, &a) < 0)
		bench_die("gpb_alloc: %s", gpb_last_error());
	if (gpb_free(l->c, a.id) < 0)
		bench_die("gpb_free: %s", gpb_last_error());
}

/* ---- opens per pattern ------------------------------------------------------ */

const char *const bench_pattern_names[BENCH_PATTERNS] = {
    [BENCH_PINGPONG] = "ping-pong with an otherwise empty slab",
    [BENCH_CHURN] = "random churn of 1000 live",
    [BENCH_NUMBA] = "Numba-style loop (alloc, write, read, free)",
};

void bench_pattern_run(struct gpb_client *c, uint64_t instance, enum bench_open_pattern p,
                       struct bench_rng *rng, uint64_t *live, unsigned nlive, unsigned pairs)
{
	struct gpb_allocation a;
	char buf[4096];

	for (unsigned i = 0; i < pairs; i++) {
		uint64_t size = p == BENCH_CHURN ? 256 + bench_rng_below(rng, 65536) : sizeof(buf);
		if (gpb_alloc(c, instance, size, 0, &a) < 0)
			bench_die("gpb_alloc: %s", gpb_last_error());
		if (p == BENCH_NUMBA) {
			memset(buf, (int)i, sizeof(buf));
			if (gpb_copy_to_device(a.ptr, buf, sizeof(buf), NULL) < 0 ||
			    gpb_copy_from_device(buf, a.ptr, sizeof(buf), NULL) < 0)
				bench_die("copy: %s", gpb_last_error());
		}
		uint64_t victim = a.id;
		if (p == BENCH_CHURN) {
			unsigned k = (unsigned)bench_rng_below(rng, nlive);
			victim = live[k];
			live[k] = a.id;
		}
		if (gpb_free(c, victim) < 0)
			bench_die("gpb_free: %s", gpb_last_error());
	}
}

double bench_opens_per_1000(const char *socket, enum bench_open_pattern p, unsigned pairs)
{
	struct bench_lib l;
	struct gpb_mapping_stats s0, s1;
	struct bench_rng rng = {.s = 18};
	uint64_t *live = NULL;
	unsigned nlive = p == BENCH_CHURN ? 1000 : 0;
	struct gpb_allocation a;

	bench_lib_open(&l, socket, false);
	live = bench_xmalloc((nlive + 1) * sizeof(*live));
	for (unsigned i = 0; i < nlive; i++) {
		if (gpb_alloc(l.c, l.instance, 256 + bench_rng_below(&rng, 65536), 0, &a) < 0)
			bench_die("gpb_alloc: %s", gpb_last_error());
		live[i] = a.id;
	}
	/* Counted from here: the first open of the pattern's slab included. */
	if (gpb_mapping_stats(&s0) < 0)
		bench_die("gpb_mapping_stats: %s", gpb_last_error());
	bench_pattern_run(l.c, l.instance, p, &rng, live, nlive, pairs);
	if (gpb_mapping_stats(&s1) < 0)
		bench_die("gpb_mapping_stats: %s", gpb_last_error());
	free(live);
	bench_lib_close(&l);
	return 1000.0 * (double)(s1.opens - s0.opens) / pairs;
}

/* ---- throughput ----------------------------------------------------------- */

#define MAX_PROCS 256

struct shared {
	uint64_t start; /* ns, CLOCK_MONOTONIC; 0 until the parent says go */
	uint64_t end;
	uint64_t pairs[MAX_PROCS];
};

static void __attribute__((noreturn))
worker(struct shared *sh, unsigned i, int ready, enum bench_kind kind, const char *lib_socket,
       const char *bare_socket, const struct bench_sizes *sz)
{
	struct bench_lib lib;
	struct bench_bare bare;
	uint64_t start, end, n = 0;
	char one = 1;

	if (kind == BENCH_LIB)
		bench_lib_open(&lib, lib_socket, true);
	else
		bench_bare_open(&bare, bare_socket, sz);
	if (bench_write_all(ready, &one, 1) < 0)
		_exit(3);
	while (!(start = __atomic_load_n(&sh->start, __ATOMIC_ACQUIRE)))
		bench_sleep_ns(200000);
	end = sh->end;
	while (bench_now_ns() < start)
		;
	while (bench_now_ns() < end) {
		if (kind == BENCH_LIB)
			bench_lib_pair(&lib);
		else
			bench_bare_pair(&bare);
		n++;
	}
	sh->pairs[i] = n;
	if (kind == BENCH_LIB)
		bench_lib_close(&lib);
	else
		bench_bare_close(&bare);
	_exit(0);
}

double bench_throughput(enum bench_kind kind, unsigned nproc, double seconds,
                        const char *lib_socket, const char *bare_socket,
                        const struct bench_sizes *sz)
{
	struct shared *sh =
	    mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[MAX_PROCS];
	int pfd[2];
	uint64_t total = 0;
	char buf[MAX_PROCS];

	if (sh == MAP_FAILED || nproc > MAX_PROCS || pipe(pfd) < 0)
		bench_die("throughput: cannot set up %u processes", nproc);
	memset(sh, 0, sizeof(*sh));
	fflush(NULL);
	for (unsigned i = 0; i < nproc; i++) {
		pids[i] = fork();
		if (pids[i] < 0)
			bench_die("fork: %s", strerror(errno));
		if (pids[i] == 0) {
			close(pfd[0]);
			worker(sh, i, pfd[1], kind, lib_socket, bare_socket, sz);
		}
	}
	close(pfd[1]);
	if (bench_read_all(pfd[0], buf, nproc) < 0)
		bench_die("throughput: a worker failed to start");
	close(pfd[0]);
	/* Everyone runs over the same window, which starts once all are
	 * connected and set up. */
	sh->end = bench_now_ns() + 20000000ull + (uint64_t)(seconds * 1e9);
	__atomic_store_n(&sh->start, sh->end - (uint64_t)(seconds * 1e9), __ATOMIC_RELEASE);
	for (unsigned i = 0; i < nproc; i++) {
		int st;

		if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bench_die("throughput: worker %u failed", i);
		total += sh->pairs[i];
	}
	munmap(sh, sizeof(*sh));
	return (double)total / seconds;
}

/* ---- footprint ------------------------------------------------------------ */

/* Reads replies until @lines newlines have arrived; closes descriptors. */
static void read_lines(int fd, unsigned lines, char *tail, size_t *tail_len)
{
	static char buf[1 << 16];

	while (lines) {
		union {
			struct cmsghdr align;
			char b[CMSG_SPACE(sizeof(int) * 16)];
		} ctl;
		struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
		struct msghdr msg = {.msg_iov = &iov,
		                     .msg_iovlen = 1,
		                     .msg_control = ctl.b,
		                     .msg_controllen = sizeof(ctl.b)};
		ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);

		if (n <= 0)
			bench_die("footprint: daemon closed the connection");
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			size_t nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (size_t i = 0; i < nfds; i++) {
				int got;

				memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				close(got);
			}
		}
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] == '\n')
				lines--;
		}
		/* Keep the last bytes to spot an error reply. */
		*tail_len = (size_t)(n < 256 ? n : 256);
		memcpy(tail, buf + n - (ssize_t)*tail_len, *tail_len);
	}
}

static int raw_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		bench_die("connect %s: %s", path, strerror(errno));
	return fd;
}

static char *frame_of(const char *id, const char *method, cJSON *params, size_t *len)
{
	char *f = proto_encode_request(id, method, params, len);

	if (!f)
		bench_die("cannot encode %s", method);
	return f;
}

double bench_footprint(const struct bench_daemon *d, unsigned n, int *keep)
{
	enum { BATCH = 512 };
	char tail[256], inst[17] = {0};
	size_t tail_len = 0, len, blen = 0;
	int fd = raw_connect(d->socket);
	char *f, *batch, *p;
	long before, after;
	cJSON *params;

	params = cJSON_CreateObject();
	cJSON_AddItemToObject(params, "versions", cJSON_CreateIntArray((const int[]){1}, 1));
	f = frame_of("1", "hello", params, &len);
	bench_write_all(fd, f, len);
	free(f);
	read_lines(fd, 1, tail, &tail_len);
	params = cJSON_CreateObject();
	cJSON_AddStringToObject(params, "name", "footprint");
	f = frame_of("2", "register", params, &len);
	bench_write_all(fd, f, len);
	free(f);
	read_lines(fd, 1, tail, &tail_len);
	p = memmem(tail, tail_len, "\"instance\":\"", 12);
	if (!p)
		bench_die("footprint: register failed");
	memcpy(inst, p + 12, 16);

	params = cJSON_CreateObject();
	cJSON_AddStringToObject(params, "instance", inst);
	proto_add_u64(params, "size", 256);
	f = frame_of("100000", "alloc", params, &len);
	batch = bench_xmalloc(len * BATCH);
	for (unsigned i = 0; i < BATCH; i++) {
		memcpy(batch + blen, f, len);
		blen += len;
	}
	/* One allocation first: the connection, its instance and the first
	 * slab are not per-allocation costs. */
	bench_write_all(fd, f, len);
	read_lines(fd, 1, tail, &tail_len);
	before = bench_rss_bytes(d->pid);
	for (unsigned done = 0; done < n;) {
		unsigned k = n - done < BATCH ? n - done : BATCH;

		if (bench_write_all(fd, batch, k * len) < 0)
			bench_die("footprint: write: %s", strerror(errno));
		read_lines(fd, k, tail, &tail_len);
		if (memmem(tail, tail_len, "\"error\"", 7))
			bench_die("footprint: alloc failed: %.*s", (int)tail_len, tail);
		done += k;
	}
	after = bench_rss_bytes(d->pid);
	free(batch);
	free(f);
	if (keep)
		*keep = fd;
	else
		close(fd);
	if (before < 0 || after < 0)
		bench_die("footprint: cannot read the daemon's RSS");
	return (double)(after - before) / n;
}
