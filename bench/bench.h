/*
 * bench.h - gpb-bench: the benchmark harness of issue 7.
 *
 * Every figure is a ratio against a baseline measured in the same run:
 * library round trips against a bare Unix-socket ping-pong of the same
 * message sizes, the daemon's pool against a direct allocator, the pool at
 * many live allocations against the pool at few. See bench/README.md.
 */
#ifndef GPB_BENCH_H
#define GPB_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- time, randomness, statistics (util.c) ---- */

uint64_t bench_now_ns(void);
void bench_sleep_ns(uint64_t ns);

/* splitmix64: deterministic, seedable, good enough for traces. */
struct bench_rng {
	uint64_t s;
};
uint64_t bench_rng_next(struct bench_rng *r);
/* Uniform in [0, n). */
uint64_t bench_rng_below(struct bench_rng *r, uint64_t n);
/* Uniform in [0, 1). */
double bench_rng_unit(struct bench_rng *r);
/* Log-uniform in [lo, hi]. */
uint64_t bench_rng_loguniform(struct bench_rng *r, uint64_t lo, uint64_t hi);

/* Sorts v in place and returns the q-quantile (0 <= q <= 1), nearest rank. */
double bench_quantile(double *v, size_t n, double q);
/* Median of a few values (sorted in place). */
double bench_median(double *v, size_t n);

void *bench_xmalloc(size_t n);
void *bench_xcalloc(size_t n, size_t size);
__attribute__((noreturn, format(printf, 1, 2))) void bench_die(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void bench_log(const char *fmt, ...);
extern bool bench_verbose;

/* Full write / read; 0 or -errno (-EPIPE at EOF for reads). */
int bench_write_all(int fd, const void *buf, size_t len);
int bench_read_all(int fd, void *buf, size_t len);

/* ---- the daemon under test (daemon.c) ---- */

struct bench_daemon {
	pid_t pid;
	char dir[64];
	char socket[128];
	char command[1024]; /* the command line, for the results file */
};

/* Starts @path (gpubrokerd) on a socket in a fresh temporary directory with
 * the flags the benchmark needs and @extra (NULL-terminated, may be NULL:
 * later flags beat earlier ones), and waits until it accepts connections. */
void bench_daemon_start(struct bench_daemon *d, const char *path, const char *const *extra);
void bench_daemon_stop(struct bench_daemon *d);
/* Resident set of a process, in bytes (VmRSS), or -1. */
long bench_rss_bytes(pid_t pid);

/* ---- the bare baseline (pingpong.c) ---- */

/* Sizes of the real frames, newline included, measured against the daemon:
 * alloc request/reply (slab already held) and free request/reply. */
struct bench_sizes {
	size_t alloc_req, alloc_rep, free_req, free_rep;
};

/* Measures the sizes with raw frames built by proto.c, as the library
 * builds them. */
void bench_measure_sizes(const char *socket, struct bench_sizes *out);

struct bench_echo {
	pid_t pid;
	char socket[128];
};

/* Forks a single-threaded epoll server (like the daemon: one thread, one
 * loop) that answers each request line of alloc_req bytes with an alloc_rep
 * line and every other line with a free_rep line. */
void bench_echo_start(struct bench_echo *e, const char *dir, const struct bench_sizes *sz);
void bench_echo_stop(struct bench_echo *e);

/* A bare client: a connected socket and the two request frames. */
struct bench_bare {
	int fd;
	const struct bench_sizes *sz;
	char *req_alloc, *req_free;
	char buf[4096];
	size_t have;
};

void bench_bare_open(struct bench_bare *b, const char *socket, const struct bench_sizes *sz);
void bench_bare_close(struct bench_bare *b);
/* One alloc-sized and one free-sized round trip. */
void bench_bare_pair(struct bench_bare *b);

/* ---- library workloads (libclient.c) ---- */

struct gpb_client;
struct bench_lib {
	struct gpb_client *c;
	uint64_t instance;
	uint64_t anchor; /* a live allocation that keeps the slab held, or 0 */
};

/* Connects, registers and, with @anchor, allocates one allocation that stays
 * live so that the slab stays held (the steady state of an application). */
void bench_lib_open(struct bench_lib *l, const char *socket, bool anchor);
void bench_lib_close(struct bench_lib *l);
/* gpb_alloc + gpb_free of BENCH_ALLOC_SIZE bytes. */
void bench_lib_pair(struct bench_lib *l);

#define BENCH_ALLOC_SIZE (1u << 20)

/* P5: the slab opens (gpb_mapping_stats) per 1000 alloc+free of the three
 * patterns of issue 18, each on a fresh connection that holds nothing
 * else: ping-pong, random churn of 1000 live, and a Numba-style loop
 * (alloc, write, read back, free). */
enum bench_open_pattern { BENCH_PINGPONG, BENCH_CHURN, BENCH_NUMBA, BENCH_PATTERNS };
extern const char *const bench_pattern_names[BENCH_PATTERNS];
double bench_opens_per_1000(const char *socket, enum bench_open_pattern p, unsigned pairs);
/* Runs @pairs alloc+free of pattern @p on @c (churn: over @live, @nlive
 * blocks, replaced at random; Numba: each block written and read). */
struct bench_rng;
void bench_pattern_run(struct gpb_client *c, uint64_t instance, enum bench_open_pattern p,
                       struct bench_rng *rng, uint64_t *live, unsigned nlive, unsigned pairs);

/* Allocates @n allocations of 256 bytes over a raw pipelined connection
 * and returns the daemon's RSS growth per allocation (bytes). With @keep
 * the connection (and so the allocations) stays open: *keep is its fd. */
double bench_footprint(const struct bench_daemon *d, unsigned n, int *keep);

/* ---- multi-process throughput (libclient.c) ---- */

enum bench_kind { BENCH_LIB, BENCH_BARE };

/* @nproc processes each running pairs of @kind for @seconds; returns the
 * aggregate pairs per second. */
double bench_throughput(enum bench_kind kind, unsigned nproc, double seconds,
                        const char *lib_socket, const char *bare_socket,
                        const struct bench_sizes *sz);

/* ---- the pool (poolbench.c) ---- */

struct bench_frag {
	double pool_live;   /* requested bytes live at the first OOM / capacity */
	double pool_used;   /* the pool's rounded bytes in use / capacity */
	double direct_live; /* the same trace through the direct allocator */
	double direct2m_live;
	double half_live; /* the pool with the old rule: large_threshold = half a slab */
	uint64_t steps, live_count, failed_size;
	uint64_t direct_steps;
};

void bench_fragmentation(uint64_t capacity, uint64_t seed, struct bench_frag *out);

/* Mean ns per pool operation (half an alloc+free pair) in a random churn at
 * @live live allocations; @lifo biases frees to the newest allocations. */
double bench_pool_op_ns(unsigned live, unsigned ops, bool lifo);

/* The bytes of host memory the pool holds with @live live allocations of
 * the churn's sizes (resident memory before and after filling): its
 * working set. */
uint64_t bench_pool_bytes(unsigned live);

/* P4's floor: mean ns per load of a pointer chase through @bytes of memory
 * in one random cycle of 64-byte nodes (every load a dependent, cold one
 * once @bytes exceeds the caches): the memory latency of this machine for
 * that working set. */
double bench_chase_ns(uint64_t bytes, unsigned loads);

/* ---- leases (leasebench.c, issue 27) ---- */

struct bench_p8 {
	double lease_p50, lease_p99, plain_p50, plain_p99, pool_p50; /* P8a, ns per pair */
	double msgs[BENCH_PATTERNS]; /* P8c: daemon messages per 1000 alloc+free */
	double msgs_threads;
	unsigned threads;
	double step_msgs, step_opens;  /* per training step, after a 1.5 s pause */
	double idle_held, idle_in_use; /* P8d: bytes leased + kept; bytes in use */
	double adv_held, adv_in_use;   /* one live block pinning each lease */
	/* P8b-torch (issue 29): gpb_torch_alloc/free p50 (ns per pair, the
	 * P8a pattern), and @threads threads' pairs per second over one's. */
	double torch_p50, torch_scale;
	double lease_scale; /* the lease allocator alone: threads' pairs over one thread's */
};

/* Every lease figure against the daemon at socket (quick: fewer pairs;
 * slow: under valgrind, P8d waits longer for the service thread). */
void bench_p8(const char *socket, bool quick, bool slow, struct bench_p8 *out);

/* P9 (issue 28): recall latency. A process holds idle leases and sleeps (no
 * library call); another connection shrinks its cap; the time until the
 * daemon charges it no more than its new cap. */
struct bench_p9 {
	unsigned iterations;
	double p50, p99, max; /* ns */
	char daemon_cmd[1024];
};

/* Starts a daemon of its own (active mode, 1 GiB, 64 MiB slabs) from @path. */
void bench_p9(const char *path, bool quick, struct bench_p9 *out);

#endif
