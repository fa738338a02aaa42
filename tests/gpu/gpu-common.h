/*
 * gpu-common.h - helpers of the gpu suite: programs that need a CUDA driver
 * and a device, and exit 77 (skipped) without them.
 *
 * The same programs run in two suites:
 *   gpu        the real driver: skipped unless /dev/nvidiactl exists and
 *              libcuda.so.1 loads, cuInit succeeds and a device answers.
 *   cuda-fake  tests/fakecuda's stand-in (GPB_FAKE_CUDA=1, LD_LIBRARY_PATH):
 *              the same code paths on host memory, in every CI run. Proves
 *              nothing about a GPU.
 *
 * Programs are found through the environment Meson sets (GPB_DAEMON), or
 * relative to this executable (../../daemon/gpubrokerd), never through a
 * path baked in at configure time: on the GPU machine the suite runs from a
 * bundle (tools/gpu-bundle.sh), as `bash .gpu/run.sh build/tests/gpu/X`.
 *
 * Failures print file:line and exit 1; nothing here returns an error.
 */
#ifndef GPB_GPU_COMMON_H
#define GPB_GPU_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "cudaapi.h"
#include "gpubroker.h"

#define GT_SKIP 77

extern struct cuda_api cu;

#define GT_FAIL(...)                                                                               \
	do {                                                                                       \
		fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                              \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fputc('\n', stderr);                                                               \
		gt_fail_exit();                                                                    \
	} while (0)

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			GT_FAIL("%s", #cond);                                                      \
	} while (0)

/* A gpb_* call that must succeed. */
#define GPB(call)                                                                                  \
	do {                                                                                       \
		int rc_ = (call);                                                                  \
		if (rc_ < 0)                                                                       \
			GT_FAIL("%s = %s: %s", #call, gpb_strerror(rc_), gpb_last_error());        \
	} while (0)

/* A driver call that must succeed. */
#define CU(call)                                                                                   \
	do {                                                                                       \
		CUresult rc_ = (call);                                                             \
		if (rc_ != CUDA_SUCCESS) {                                                         \
			char name_[64];                                                            \
			GT_FAIL("%s = %s", #call,                                                  \
			        cuda_api_error_name(&cu, rc_, name_, sizeof(name_)));              \
		}                                                                                  \
	} while (0)

/* Prints the daemon logs of the running daemons, stops them, exits 1. */
void gt_fail_exit(void) __attribute__((noreturn));

/*
 * Exits 77 unless a driver and a device are present (see above), after
 * saying why on stdout. Loads the driver into `cu`. In the cuda-fake suite
 * it also gives the fake a fresh state directory (FAKECUDA_DIR) that every
 * process of the test (daemon, children) shares.
 */
void gt_require_gpu(int argc, char **argv);
bool gt_fake(void);
/* The fake's count of memory freed under a live importer (0 for a real driver). */
uint64_t gt_fake_violations(void);

/*
 * The transport axis: $GPB_CUDA_TRANSPORT (vmm or ipc; unset: auto) is
 * passed to every daemon as --cuda-transport, so that each test runs on
 * either (Meson: cuda-fake-X and cuda-fake-ipc-X, gpu-X and gpu-ipc-X).
 * gt_vmm() says whether this run's cuda slabs are VMM (auto: where device
 * 0 reports VMM with POSIX descriptors, as the daemon decides); the other
 * two name the driver call that makes a slab in the daemon and the one
 * that maps it in a client, for the failure injections of the fake.
 */
const char *gt_transport(void);
bool gt_vmm(void);
const char *gt_slab_call(void);
const char *gt_open_call(void);
/*
 * The uid axis: with $GPB_DAEMON_UID set (Meson: cuda-fake-xuid-X,
 * cuda-fake-ipc-xuid-X, gpu-xuid-X, gpu-ipc-xuid-X) every daemon runs as
 * that uid (and gid), as the service runs as user gpubroker, while this
 * test stays root (an administrator's client; tests that need an ordinary
 * client fork one). gt_require_gpu skips (77) when this process is not
 * root. The daemon's socket directory is given to that uid, its log is
 * opened by the test before the switch (readable here), and the fake's
 * state directory is opened to every user, as one driver serves every
 * process of a machine. gt_daemon_uid() is the uid the daemons run as
 * (this process's euid off the axis).
 */
bool gt_xuid(void);
uid_t gt_daemon_uid(void);
/*
 * For what a process of another uid runs: the tree of this test may be
 * out of its reach (a clone under /root). gt_stage copies the file at path
 * (a program) into a folder under /tmp that every user may read, with
 * libgpubroker and the fake libcuda.so.1 beside it, and puts the copy's
 * path in out; gt_stage_self does so for this program. The folder goes at
 * this process's exit. gt_stage_use, in the child after its uid switch,
 * puts the folder first on the library search path. Failures fail the test.
 */
void gt_stage(const char *path, char *out, size_t len);
void gt_stage_self(char *out, size_t len);
void gt_stage_use(void);

/* The "transport" that `devices` reports for @device. */
void gt_device_transport(gpb_client *c, int device, char *out, size_t len);

/* The fake's count of calls of entry point @name in this process (0 for a
 * real driver). */
uint64_t gt_fake_calls(const char *name);

/* Retains the primary context of CUDA device @ordinal and makes it current
 * on this thread. */
void gt_cuda_context(int ordinal);
/* cuMemGetInfo of the current context. */
void gt_mem_info(size_t *free_bytes, size_t *total);

struct gt_daemon {
	pid_t pid;
	char dir[128];
	char socket[192];
	char log[192];
};

/* Starts gpubrokerd --backend cuda (or @backend) on a temporary socket with
 * @extra arguments (NULL-terminated, may be NULL) and @env (NAME=VALUE pairs,
 * NULL-terminated, may be NULL: added to this process's environment) and
 * waits until it accepts connections. Its stderr goes to d->log. */
void gt_daemon_start(struct gt_daemon *d, const char *backend, const char *const *extra,
                     const char *const *env);
/* Like gt_daemon_start, but the daemon must exit by itself (a start that
 * fails): returns its exit status; its log stays in d->log. */
int gt_daemon_run_to_exit(struct gt_daemon *d, const char *backend, const char *const *extra,
                          const char *const *env);
/* SIGTERM and wait; fails the test unless it exits 0. */
void gt_daemon_stop(struct gt_daemon *d);
/* Whether the daemon's log contains @text. */
bool gt_log_contains(const struct gt_daemon *d, const char *text);

gpb_client *gt_connect(const struct gt_daemon *d, const char *name);
/* Registers an instance on device index @device. */
uint64_t gt_register(gpb_client *c, int device);
/* Waits (up to 3 s) until `stats` of @device counts @want slabs: another
 * connection's close, or a process's exit, reaches the daemon in its own
 * time. Fails the test otherwise. */
void gt_wait_slabs(gpb_client *c, int device, uint64_t want);
/* totals.used and the backend name from `status`. */
uint64_t gt_status_used(gpb_client *c);
/* status totals' fenced: bytes kept for a process that may still write there. */
uint64_t gt_status_fenced(gpb_client *c);
void gt_status_backend(gpb_client *c, char *out, size_t len);

/* Runs this program again as a child with @args (NULL-terminated, argv[1..]):
 * the roles of a multi-process test. stdout of the child goes to a pipe
 * whose read end is returned in *out_fd when out_fd is not NULL. */
pid_t gt_spawn_self(char *const args[], int *out_fd);
/* Waits for a child: its exit status, or 128 + signal. */
int gt_wait(pid_t pid);
/* Reads one line from fd (blocking, 30 s at most). */
bool gt_read_line(int fd, char *buf, size_t len);

/* A pseudo-random byte pattern of @seed. */
void gt_fill(unsigned char *buf, size_t n, unsigned seed);
/* Checks that the @n device bytes at @ptr hold pattern @expect, then writes
 * pattern @next there and synchronises (a context of the device current). */
void gt_expect_and_write(void *ptr, size_t n, unsigned expect, unsigned next);

/* A host function (cuLaunchHostFunc) that holds its stream shut until the
 * atomic_int @gate (its userdata) is set: work queued behind it is
 * certainly still queued, on a GPU too. */
void CUDA_CB gt_wait_for_gate(void *gate);

/* Milliseconds of CLOCK_MONOTONIC. */
double gt_now_ms(void);

#endif
