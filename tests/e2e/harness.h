/*
 * harness.h - end-to-end test helpers: start the real gpubrokerd on a
 * temporary socket, talk to it over raw sockets, run the CLI.
 *
 * Programs are found through the environment Meson sets for each test
 * (GPB_DAEMON, GPB_CTL, GPB_EXAMPLE), never through absolute paths baked in
 * at configure time, so the build tree can be moved (the GPU bundle does).
 */
#ifndef GPB_TEST_HARNESS_H
#define GPB_TEST_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>

#include "gpubroker.h"

struct th_daemon {
	pid_t pid;
	char dir[64];
	char socket[128];
};

/* Starts gpubrokerd (sim backend, 2 devices of 1 GiB, 2 MiB slabs unless
 * extra arguments say otherwise) and waits until it accepts connections.
 * extra: NULL-terminated, may be NULL. Fails the test on error. */
void th_daemon_start(struct th_daemon *d, const char *const *extra);

/* How th_daemon_start_opts starts it. Zero-initialise. */
struct th_daemon_opts {
	const char *const *extra;   /* more arguments, NULL-terminated (may be NULL) */
	unsigned nofile;            /* RLIMIT_NOFILE of the daemon; 0 = inherited */
	const char *log_path;       /* the daemon's stderr goes here (appended); NULL = ours */
	bool restart;               /* reuse d's directory and socket path (after a kill) */
	bool exact_heap;            /* glibc's per-thread cache off: selfcheck's heap_bytes then
	                               counts exactly the bytes in use, no freed chunks kept */
	const char *const *wrapper; /* a command to start it under (argv[0] a path, NULL-
	                               terminated; "unshare --pid --fork"), or NULL; d->pid
	                               is then the wrapper's */
};
void th_daemon_start_opts(struct th_daemon *d, const struct th_daemon_opts *o);
/* SIGKILL and reap; the directory and the (now stale) socket stay. */
void th_daemon_kill(struct th_daemon *d);
/* A line "Key: value kB" of /proc/PID/status (VmRSS, VmHWM...), or -1. */
long th_daemon_status_kib(const struct th_daemon *d, const char *key);
/* SIGTERM, wait (10 s at most); returns the exit status, or -1 if it had to
 * be killed or died of a signal. Removes the temporary directory. */
int th_daemon_stop(struct th_daemon *d);
bool th_daemon_alive(const struct th_daemon *d);
/* Descriptors the daemon holds open (from /proc). */
int th_daemon_fds(const struct th_daemon *d);
/* Resident memory of the daemon in KiB (from /proc). */
long th_daemon_rss_kib(const struct th_daemon *d);

/* A raw connection (no library). Fails the test on error. */
/* The socket address of path (false: too long). */
struct sockaddr_un;
bool th_sockaddr(const char *path, struct sockaddr_un *sa);
/* A bare connection that has said hello: its descriptor; -1 when the
 * daemon refused it (its reply in refused, at most size bytes with the
 * NUL), -2 when it could not connect or nothing came back. */
int th_connect_hello(const char *path, char *refused, size_t size);
int th_connect(const char *path);
/* Sends all bytes; returns 0 or -errno. */
int th_send(int fd, const void *buf, size_t len);
/* Reads one line (without '\n') into buf; returns its length, 0 on EOF, or
 * -ETIMEDOUT / -errno. Keeps bytes after the line in a per-fd buffer. */
int th_read_line(int fd, char *buf, size_t cap, int timeout_ms);
/* Sends line + '\n' and reads the reply line; returns th_read_line's value. */
int th_call(int fd, const char *line, char *reply, size_t cap);
/* Raw hello; fails the test unless it succeeds. */
void th_hello(int fd);
/* Reads and discards until EOF (or a reset); false if the connection is
 * still open after timeout_ms. */
bool th_drained_to_eof(int fd, int timeout_ms);
/* Forgets buffered bytes of fd and closes it. */
void th_close(int fd);

/*
 * Writes `status` requests on each of n raw connections (past their hello)
 * without reading a byte, until the daemon has stopped reading every one:
 * no socket took a byte for idle_ms (the daemon paused them, or closed
 * them). Returns the requests written; fails the test after 60 s.
 */
long th_stall(const int *fds, int n, int idle_ms);

/* Connects through the library, failing the test on error. */
gpb_client *th_client(const struct th_daemon *d, const char *name);
/*
 * One request on c that waits for the daemon's reply (`stats`, which the
 * library never answers itself). gpb_free of device memory, the `release`
 * of kept slabs (gpb_release_kept, or a free past GPUBROKER_KEEP_SLABS)
 * and gpb_free_async's frees go without waiting for a reply, and so does
 * the library's answer to an `invalidate` event (invalidate_done, sent as
 * it reads the event: until the daemon has it, the ranges the event
 * released stay fenced, counted in `used`): the daemon reads them before
 * c's next request, but another connection's (another client,
 * gpubrokerctl, a metrics scrape, an allocation that needs the room) may
 * be served first. Call it on the client that freed or read the event
 * before looking at the effect through anything else. Fails the test on
 * error (a free the daemon refused included).
 */
void th_settle(gpb_client *c);
/* totals.used from `status`. */
uint64_t th_status_used(gpb_client *c);
/* A numeric or u64-string member of a `status` result's top level or totals. */
uint64_t th_status_field(gpb_client *c, const char *key);

/* Ends a forked child with status code; never returns. Under valgrind,
 * which follows fork and leak-checks every process as it exits (charging the
 * child with what the test had allocated before forking), the status leaves
 * through an exec of /bin/sh instead: a process that execs is not checked. */
void th_child_exit(int code) __attribute__((noreturn));
/* Forks with two pipes between parent and child: in each process, *rd and
 * *wr are its own ends (what the other writes, where it reads), the other
 * ends closed. Returns fork()'s value; fails the test on error. */
pid_t th_fork_linked(int *rd, int *wr);
/* Waits for the forked child pid, which must exit 0 (else its status names
 * the step that failed). */
void th_child_reap_ok(pid_t pid);

/* Runs argv (argv[0] a path), captures stdout into out (NUL-terminated) and
 * returns the exit status (or -1 when killed). env: extra NAME=VALUE pairs,
 * NULL-terminated, may be NULL. */
int th_run(char *const argv[], char *const env[], char *out, size_t cap);

/* What the admin `selfcheck` request reports. */
struct th_selfcheck {
	uint64_t sessions, instances, allocations, waits;
	uint64_t parting, ghosts, retired; /* kept for clients that may have it mapped */
	long long heap_bytes;              /* the daemon's malloc'd bytes in use; -1: unknown */
};
/* Runs `selfcheck` (every pool, session, allocation and policy structure of
 * the daemon) and fails the test unless it passes. out may be NULL.
 * Returns its "allocations" count. */
uint64_t th_selfcheck(gpb_client *c, struct th_selfcheck *out);

/* The value of one series of the `metrics` request's text (the whole series
 * name, labels included: "gpubroker_connections_refused_total{reason=\"x\"}"),
 * or -1 when there is no such series. */
double th_metric(gpb_client *c, const char *series);

/* Polls cond(arg) every 10 ms for up to timeout_ms; returns its last value. */
bool th_wait_for(bool (*cond)(void *arg), void *arg, int timeout_ms);
/* A th_wait_for condition: whether `status` through client (a gpb_client *)
 * counts one client, itself: every other has gone. */
bool th_only_one_client(void *client);

/*
 * A daemon with a bystander, for bad-client tests (test-bad-connections.c,
 * test-bad-fields.c): a library client connected for the whole group, holding
 * 4096 bytes of 0x5a, that each case uses to check that the daemon still
 * serves and that nothing leaked.
 */
struct th_bystander {
	struct th_daemon daemon;
	gpb_client *client;
	uint64_t inst;
	struct gpb_allocation alloc;
	int baseline_fds; /* the daemon's descriptors once the bystander is set up */
};
/* Starts the daemon (extra as for th_daemon_start) and the bystander. */
void th_bystander_start(struct th_bystander *b, const char *const *extra);
/* The same, the daemon started as th_daemon_start_opts does. */
void th_bystander_start_opts(struct th_bystander *b, const struct th_daemon_opts *o);
/* Disconnects the bystander and stops the daemon; th_daemon_stop's value. */
int th_bystander_stop(struct th_bystander *b);
/* The daemon serves, the bystander's allocation and connection are intact:
 * th_assert_serves, and its instance's used bytes its allocation's. */
void th_assert_unaffected(struct th_bystander *b);
/* The daemon d serves and a bystander (client c, its instance inst, holding
 * alloc: 4096 bytes of 0x5a) is intact: its bytes unchanged, and it can
 * allocate and free again. */
void th_assert_serves(const struct th_daemon *d, gpb_client *c, uint64_t inst,
                      const struct gpb_allocation *alloc);
/* Nothing leaked: the daemon's descriptors back to the baseline, the
 * bystander its only client, the used bytes its own, selfcheck passing. */
void th_assert_no_leak(struct th_bystander *b);

/* The "code" of a raw reply's error; 0 when it has none. */
int th_error_code(const char *reply);
/* Registers an instance on a raw connection; its id into inst (17 bytes). */
void th_raw_register(int fd, const char *name, char *inst);
/* Sends one frame and checks the reply's error code (0: a result) and,
 * when field is set, that data names it. */
void th_expect_reply(int fd, const char *frame, int code, const char *field);

void th_sleep_ms(int ms);
/* CLOCK_MONOTONIC in milliseconds. */
long long th_now_ms(void);

/* A small pseudo-random generator (xorshift64), one state per process.
 * th_rnd_seed seeds it and returns the state it starts from (printed by a
 * test as its seed); th_rnd_below(n) draws from [0, n). */
uint64_t th_rnd_seed(uint64_t seed);
uint64_t th_rnd(void);
unsigned th_rnd_below(unsigned n);

const char *th_env(const char *name);

/*
 * A copy of a program for a child that runs it as another user. The build
 * tree may sit where only root can reach it (a clone under /root, which is
 * mode 0700), so the child cannot exec the program there, nor load the
 * library beside it: th_copy_make copies the program that environment
 * variable prog_env names (GPB_CTL...) and the libgpubroker this test
 * loaded into a new folder under /tmp that every user may read (program
 * in bin/, library above it, as in the build tree); th_copy_exec runs the
 * copy with that library; th_copy_remove deletes the folder. Failures fail
 * the test.
 */
struct th_copy {
	char dir[64];
	char program[192];
	char library[192];
};
void th_copy_make(struct th_copy *c, const char *prog_env);
/* In a child: execs the copy with argv (argv[0] its name), the copied
 * library first on the search path; returns only on failure. */
void th_copy_exec(const struct th_copy *c, char *const argv[]);
void th_copy_remove(struct th_copy *c);

/* Writes text to path (replacing it); fails the test on error. */
void th_write_file(const char *path, const char *text);
/* Whether the first 64 KiB of path hold text at least times times. */
bool th_file_has(const char *path, const char *text, int times);

/*
 * True under `meson test --setup=valgrind` (GPB_VALGRIND set), where the
 * daemons run under valgrind too (GPB_DAEMON_WRAPPER): their RSS then says
 * nothing (valgrind queues freed blocks, and checks for leaks itself), and
 * everything is tens of times slower.
 */
bool th_valgrind(void);

/*
 * True when the tests (and so the daemons, built with the same flags) are
 * built with AddressSanitizer: its allocator keeps freed memory in
 * quarantine and ignores malloc_trim, and glibc's mallinfo2 no longer sees
 * the heap, so RSS and heap figures say nothing there either.
 */
bool th_asan(void);

/*
 * cmocka 1.1.5 prints a failing group setup or teardown but leaves it out of
 * its exit status, and these tests check in their group teardown that the
 * daemon exits 0 when stopped: how a crash at shutdown, a leaked JSON node
 * (daemon/main.c) and, under `meson test --setup=valgrind`, any valgrind
 * error show. th_run_group_tests runs a group so that a failing group
 * fixture fails the program too; cmocka_run_group_tests is redefined to it.
 */
int th_run_group_tests(const char *name, const struct CMUnitTest *tests, size_t count,
                       CMFixtureFunction setup, CMFixtureFunction teardown);
#undef cmocka_run_group_tests
#define cmocka_run_group_tests(tests, setup, teardown)                                             \
	th_run_group_tests(#tests, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)

#endif
