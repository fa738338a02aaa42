/*
 * gpu-common.c - helpers of the gpu suite.
 */
#include "gpu-common.h"

#include <dirent.h>
#include <grp.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

struct cuda_api cu;
static bool gt_is_fake;
static char gt_fake_dir[128]; /* made by this process: removed at exit */

#define GT_MAX_DAEMONS 8
static struct gt_daemon *gt_daemons[GT_MAX_DAEMONS];

static void gt_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

double gt_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void gt_print_log(const struct gt_daemon *d)
{
	char line[1024];
	FILE *f = fopen(d->log, "r");
	if (!f)
		return;
	fprintf(stderr, "---- daemon log (%s) ----\n", d->log);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fprintf(stderr, "---- end of daemon log ----\n");
	fclose(f);
}

void gt_fail_exit(void)
{
	for (int i = 0; i < GT_MAX_DAEMONS; i++) {
		struct gt_daemon *d = gt_daemons[i];
		if (!d)
			continue;
		gt_print_log(d);
		if (d->pid > 0 && kill(d->pid, SIGKILL) == 0)
			waitpid(d->pid, NULL, 0);
		gt_daemons[i] = NULL;
	}
	exit(1);
}

/* Removes folder and the files in it (the fake's state, a stage). */
static void gt_remove_dir(const char *folder)
{
	DIR *dir = opendir(folder);
	if (!dir)
		return;
	for (struct dirent *e; (e = readdir(dir));) {
		char path[PATH_MAX];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", folder, e->d_name);
		unlink(path);
	}
	closedir(dir);
	rmdir(folder);
}

static void gt_remove_fake_dir(void)
{
	gt_remove_dir(gt_fake_dir);
}

bool gt_xuid(void)
{
	const char *v = getenv("GPB_DAEMON_UID");
	return v && *v;
}

uid_t gt_daemon_uid(void)
{
	const char *v = getenv("GPB_DAEMON_UID");
	char *end = NULL;
	if (!v || !*v)
		return geteuid();
	unsigned long uid = strtoul(v, &end, 10);
	if (*end || uid == 0 || uid >= 0xffffffffUL)
		GT_FAIL("GPB_DAEMON_UID=%s: not a uid other than root's", v);
	return (uid_t)uid;
}

bool gt_fake(void)
{
	return gt_is_fake;
}

#define GT_XUID_PROBE "gt-xuid-probe"

/* The probe's child: a daemon of the other uid, one allocation of this
 * (root) process through legacy IPC; "ok" or "refused: <error>". */
static int gt_xuid_probe_run(void)
{
	struct gt_daemon d;
	struct gpb_allocation a;
	gt_daemon_start(&d, "cuda", NULL, NULL);
	gpb_client *c = gt_connect(&d, "gpu-xuid-probe");
	int rc = gpb_alloc(c, gt_register(c, 0), 1u << 20, 0, &a);
	if (rc < 0) {
		printf("refused: %s\n", gpb_last_error());
		CHECK(gt_status_used(c) == 0);
	} else {
		GPB(gpb_free(c, a.id));
		printf("ok\n");
	}
	gpb_disconnect(c);
	/* Refused or not, the daemon keeps nothing of that client. */
	c = gt_connect(&d, "gpu-xuid-probe-check");
	gt_wait_slabs(c, 0, 0);
	gpb_disconnect(c);
	gt_daemon_stop(&d);
	return 0;
}

/*
 * Transport ipc on the uid axis: whether the driver opens a daemon's legacy
 * handles in a process of another uid is its share policy, the one thing
 * this axis cannot assume. A child asks once; where the driver refuses
 * (the library's error names the daemon's user), the test is skipped with
 * that answer, which is what the gpu suite's run of this axis settles; where
 * it opens, the test runs across uids. The fake under
 * FAKECUDA_IPC_POLICY=all (cuda-fake-ipc-xuid-X) opens by definition.
 * GPB_XUID_EXPECT=refused (cuda-fake-ipc-xuid-refused: the fake's default
 * policy) makes the refusal the test's pass and an open its failure.
 */
static void gt_xuid_ipc_policy(void)
{
	const char *p = getenv("FAKECUDA_IPC_POLICY");
	char line[1024];
	int out;
	const char *expect = getenv("GPB_XUID_EXPECT");
	bool want_refusal = expect && strcmp(expect, "refused") == 0;
	if (!gt_xuid() || gt_vmm() || (gt_is_fake && p && strcmp(p, "all") == 0 && !want_refusal))
		return;
	char *args[] = {GT_XUID_PROBE, NULL};
	pid_t pid = gt_spawn_self(args, &out);
	bool got = gt_read_line(out, line, sizeof(line));
	close(out);
	if (gt_wait(pid) != 0 || !got)
		GT_FAIL("the probe of legacy IPC across uids failed (%s)",
		        got ? line : "no answer");
	bool refused = strncmp(line, "refused: ", 9) == 0 && strstr(line, "daemon's user");
	if (want_refusal) {
		if (!refused)
			GT_FAIL("legacy IPC across uids: want a refusal naming the daemon's user, "
			        "got: %s",
			        line);
		printf("ok: a client of uid %u is refused the legacy handles of a daemon of uid "
		       "%u, cleanly: %s\n",
		       (unsigned)geteuid(), (unsigned)gt_daemon_uid(), line + 9);
		exit(0);
	}
	if (refused) {
		printf("SKIP: transport ipc, daemon of uid %u: the driver's share policy refuses "
		       "legacy IPC handles to a client of uid %u: %s\n",
		       (unsigned)gt_daemon_uid(), (unsigned)geteuid(), line + 9);
		exit(GT_SKIP);
	}
	if (strcmp(line, "ok") != 0)
		GT_FAIL("the probe of legacy IPC across uids: %s", line);
	printf("transport ipc: a client of uid %u opens the legacy handles of a daemon of uid "
	       "%u (the driver's share policy lets it)\n",
	       (unsigned)geteuid(), (unsigned)gt_daemon_uid());
}

/*
 * What a process of another uid execs or loads (the daemon, this program,
 * the fake libcuda.so.1, libgpubroker, valgrind's suppressions) may lie in a
 * tree that uid cannot reach: a clone under /root (mode 0700). Such files
 * are copied into one folder under /tmp that every user may read, made by
 * the first gt_stage() of this process and removed at its exit; the
 * libraries go there first, and gt_stage_use() puts the folder first on
 * the search path of the process that switched uid.
 */
static char gt_stage_dir[64];
static pid_t gt_stage_owner;

static void gt_stage_remove(void)
{
	if (getpid() != gt_stage_owner)
		return; /* a forked child: the folder is its parent's */
	gt_remove_dir(gt_stage_dir);
}

static void gt_stage_file(const char *from, const char *to, mode_t mode)
{
	char buf[65536];
	ssize_t n;
	int in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		GT_FAIL("staging %s: %s", from, strerror(errno));
	int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (out < 0)
		GT_FAIL("staging %s as %s: %s", from, to, strerror(errno));
	while ((n = read(in, buf, sizeof(buf))) > 0)
		CHECK(write(out, buf, (size_t)n) == n);
	CHECK(n == 0);
	CHECK(fchmod(out, mode) == 0); /* whatever the umask */
	close(in);
	CHECK(close(out) == 0);
}

/* Copies path into the stage under its own name (once), the copy's path in
 * out; mode 0755 for programs, 0644 for the rest. */
static void gt_stage_copy(const char *path, mode_t mode, char *out, size_t len)
{
	const char *name = strrchr(path, '/');
	CHECK(name != NULL);
	CHECK((size_t)snprintf(out, len, "%s%s", gt_stage_dir, name) < len);
	if (access(out, F_OK) != 0)
		gt_stage_file(path, out, mode);
}

void gt_stage(const char *path, char *out, size_t len)
{
	if (!gt_stage_dir[0] || gt_stage_owner != getpid()) {
		char lib[PATH_MAX];
		Dl_info info;
		snprintf(gt_stage_dir, sizeof(gt_stage_dir), "/tmp/gpb-stage-XXXXXX");
		CHECK(mkdtemp(gt_stage_dir) != NULL);
		gt_stage_owner = getpid();
		atexit(gt_stage_remove);
		CHECK(chmod(gt_stage_dir, 0755) == 0);
		/* The file as loaded: its name there is the soname asked for. */
		CHECK(dladdr((const void *)gpb_connect, &info) != 0 && info.dli_fname);
		gt_stage_copy(info.dli_fname, 0644, lib, sizeof(lib));
		if (gt_is_fake) {
			void *sym = dlsym(cu.lib, "fakecuda_violations");
			CHECK(sym && dladdr(sym, &info) != 0 && info.dli_fname);
			gt_stage_copy(info.dli_fname, 0644, lib, sizeof(lib));
		}
	}
	gt_stage_copy(path, 0755, out, len);
}

void gt_stage_self(char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	CHECK(n > 0);
	self[n] = '\0';
	gt_stage(self, out, len);
}

void gt_stage_use(void)
{
	/* First, not alone: the libraries the program itself needs (libcjson,
	 * libuv) may be found only through the caller's path, as in the GPU
	 * machine's bundle, where they are not installed. */
	if (gt_stage_dir[0]) {
		const char *was = getenv("LD_LIBRARY_PATH");
		char path[PATH_MAX * 2];
		snprintf(path, sizeof(path), "%s%s%s", gt_stage_dir, was && *was ? ":" : "",
		         was && *was ? was : "");
		setenv("LD_LIBRARY_PATH", path, 1);
	}
}

void gt_require_gpu(int argc, char **argv)
{
	const char *f = getenv("GPB_FAKE_CUDA");
	bool top = !getenv("GPB_XUID_DECIDED");
	char why[256];
	CUresult init_rc;
	int n = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	gt_is_fake = f && strcmp(f, "1") == 0;
	/* The test's own process decides; its children (roles re-run as
	 * another user, say) inherit the decision. */
	if (gt_xuid() && top && geteuid() != 0) {
		printf("SKIP: GPB_DAEMON_UID=%s: starting the daemon as another uid than its "
		       "clients needs root (this test runs as uid %u)\n",
		       getenv("GPB_DAEMON_UID"), (unsigned)geteuid());
		exit(GT_SKIP);
	}
	if (gt_xuid()) {
		(void)gt_daemon_uid(); /* a bad value fails here, not in a child */
		setenv("GPB_XUID_DECIDED", "1", 1);
	}
	if (!gt_is_fake && access("/dev/nvidiactl", F_OK) != 0) {
		printf("SKIP: no /dev/nvidiactl: no NVIDIA driver on this machine\n");
		exit(GT_SKIP);
	}
	if (gt_is_fake && !getenv("FAKECUDA_DIR")) {
		/* One state directory for every process of this test. */
		snprintf(gt_fake_dir, sizeof(gt_fake_dir), "%s/gpb-fakecuda-XXXXXX",
		         access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
		CHECK(mkdtemp(gt_fake_dir) != NULL);
		/* The daemon of another uid shares the fake's state: one
		 * driver serves every process of a machine. */
		if (gt_xuid())
			CHECK(chmod(gt_fake_dir, 0777) == 0);
		setenv("FAKECUDA_DIR", gt_fake_dir, 1);
		atexit(gt_remove_fake_dir);
	}
	if (cuda_api_load(&cu, why, sizeof(why), &init_rc) < 0) {
		if (gt_is_fake)
			GT_FAIL("the fake driver did not load: %s", why);
		printf("SKIP: %s\n", why);
		exit(init_rc == CUDA_ERROR_NO_DEVICE || init_rc == CUDA_SUCCESS ? GT_SKIP : 1);
	}
	bool is_fake_lib = dlsym(cu.lib, "fakecuda_violations") != NULL;
	if (is_fake_lib != gt_is_fake)
		GT_FAIL(is_fake_lib
		            ? "the fake libcuda.so.1 was loaded outside the cuda-fake suite "
		              "(LD_LIBRARY_PATH?)"
		            : "GPB_FAKE_CUDA=1 but the real driver was loaded");
	CU(cu.DeviceGetCount(&n));
	if (n == 0) {
		printf("SKIP: the CUDA driver reports no device\n");
		exit(GT_SKIP);
	}
	if (argc == 2 && strcmp(argv[1], GT_XUID_PROBE) == 0)
		exit(gt_xuid_probe_run());
	if (top)
		gt_xuid_ipc_policy();
}

uint64_t gt_fake_violations(void)
{
	uint64_t (*fn)(void);
	void *sym = cu.lib ? dlsym(cu.lib, "fakecuda_violations") : NULL;
	if (!sym)
		return 0;
	memcpy(&fn, &sym, sizeof(fn));
	return fn();
}

const char *gt_transport(void)
{
	const char *t = getenv("GPB_CUDA_TRANSPORT");
	return t && *t ? t : "auto";
}

bool gt_vmm(void)
{
	const char *t = gt_transport();
	int vmm = 0, fd = 0;
	CUdevice dev;
	if (strcmp(t, "auto") != 0)
		return strcmp(t, "vmm") == 0;
	return cu.has_vmm && cu.DeviceGet(&dev, 0) == CUDA_SUCCESS &&
	       cu.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
	                             dev) == CUDA_SUCCESS &&
	       cu.DeviceGetAttribute(
	           &fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) ==
	           CUDA_SUCCESS &&
	       vmm == 1 && fd == 1;
}

const char *gt_slab_call(void)
{
	return gt_vmm() ? "cuMemCreate" : "cuMemAlloc";
}

const char *gt_open_call(void)
{
	return gt_vmm() ? "cuMemImportFromShareableHandle" : "cuIpcOpenMemHandle";
}

uint64_t gt_fake_calls(const char *name)
{
	uint64_t (*fn)(const char *);
	void *sym = cu.lib ? dlsym(cu.lib, "fakecuda_calls") : NULL;
	if (!sym)
		return 0;
	memcpy(&fn, &sym, sizeof(fn));
	return fn(name);
}

void gt_cuda_context(int ordinal)
{
	CUdevice dev;
	CUcontext ctx;
	CU(cu.DeviceGet(&dev, ordinal));
	CU(cu.DevicePrimaryCtxRetain(&ctx, dev));
	CU(cu.CtxPushCurrent(ctx));
}

void gt_mem_info(size_t *free_bytes, size_t *total)
{
	CU(cu.MemGetInfo(free_bytes, total));
}

/* The daemon: $GPB_DAEMON when it exists, else next to this program in the
 * build tree (tests/gpu/X -> daemon/gpubrokerd). */
static void gt_daemon_path(char *out, size_t len)
{
	const char *env = getenv("GPB_DAEMON");
	char self[PATH_MAX];
	if (env && *env && access(env, X_OK) == 0) {
		snprintf(out, len, "%s", env);
		return;
	}
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	CHECK(n > 0);
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	CHECK(slash != NULL);
	*slash = '\0';
	if ((size_t)snprintf(out, len, "%.*s/../../daemon/gpubrokerd", PATH_MAX - 64, self) >=
	        len ||
	    access(out, X_OK) != 0)
		GT_FAIL("gpubrokerd not found: set GPB_DAEMON, or run from the build tree (%s)",
		        out);
}

static pid_t gt_daemon_spawn(struct gt_daemon *d, const char *backend, const char *const *extra,
                             const char *const *env)
{
	char daemon[PATH_MAX], staged[PATH_MAX], supp[PATH_MAX + 16];
	gt_daemon_path(daemon, sizeof(daemon));
	if (gt_xuid()) {
		gt_stage(daemon, staged, sizeof(staged));
		snprintf(daemon, sizeof(daemon), "%s", staged);
	}
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/gpb-gpu-XXXXXX");
	CHECK(mkdtemp(d->dir) != NULL);
	snprintf(d->socket, sizeof(d->socket), "%s/gpubroker.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/daemon.log", d->dir);
	uid_t uid = gt_daemon_uid();
	/* The daemon of another uid makes its socket here. */
	if (gt_xuid())
		CHECK(chown(d->dir, uid, (gid_t)uid) == 0);
	const char *argv[72];
	int n = 0;
	/* `meson test --setup=valgrind` runs the daemon under valgrind too:
	 * GPB_DAEMON_WRAPPER is the command to put in front of it (words
	 * split at blanks), as in the e2e harness. */
	char wrapper[1024];
	snprintf(wrapper, sizeof(wrapper), "%s", getenv("GPB_DAEMON_WRAPPER") ?: "");
	char *save = NULL;
	for (char *w = strtok_r(wrapper, " \t", &save); w && n < 24;
	     w = strtok_r(NULL, " \t", &save)) {
		static const char opt[] = "--suppressions=";
		if (gt_xuid() && strncmp(w, opt, sizeof(opt) - 1) == 0) {
			gt_stage(w + sizeof(opt) - 1, staged, sizeof(staged));
			snprintf(supp, sizeof(supp), "%s%s", opt, staged);
			w = supp;
		}
		argv[n++] = w;
	}
	const char *base[] = {daemon,  "--socket",    d->socket, "--backend",
	                      backend, "--log-level", "info"};
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		argv[n++] = base[i];
	if (strcmp(gt_transport(), "auto") != 0) {
		argv[n++] = "--cuda-transport";
		argv[n++] = gt_transport();
	}
	for (int i = 0; extra && extra[i] && n < 70; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* Before env: a test's own LD_LIBRARY_PATH there wins. */
		if (gt_xuid())
			gt_stage_use();
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		/* Opened before the uid switch: readable by the test whoever
		 * the daemon runs as. */
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, STDERR_FILENO);
			dup2(fd, STDOUT_FILENO);
		}
		if (gt_xuid()) {
			gid_t gid = (gid_t)uid;
			if (setgroups(1, &gid) < 0 || setgid(gid) < 0 || setuid(uid) < 0 ||
			    geteuid() != uid) {
				perror("gpu-common: the daemon's uid switch");
				_exit(126);
			}
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	d->pid = pid;
	for (int i = 0; i < GT_MAX_DAEMONS; i++) {
		if (!gt_daemons[i]) {
			gt_daemons[i] = d;
			break;
		}
	}
	return pid;
}

static void gt_daemon_forget(struct gt_daemon *d)
{
	for (int i = 0; i < GT_MAX_DAEMONS; i++) {
		if (gt_daemons[i] == d)
			gt_daemons[i] = NULL;
	}
}

static void gt_daemon_cleanup(struct gt_daemon *d)
{
	unlink(d->socket);
	unlink(d->log);
	rmdir(d->dir);
}

/* The axis is real: the daemon (or its wrapper) runs as gt_daemon_uid(). */
static void gt_daemon_check_uid(const struct gt_daemon *d)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d", (int)d->pid);
	CHECK(stat(path, &st) == 0);
	if (st.st_uid != gt_daemon_uid())
		GT_FAIL("gpubrokerd runs as uid %u, want %u", (unsigned)st.st_uid,
		        (unsigned)gt_daemon_uid());
}

void gt_daemon_start(struct gt_daemon *d, const char *backend, const char *const *extra,
                     const char *const *env)
{
	gt_daemon_spawn(d, backend, extra, env);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	CHECK(strlen(d->socket) < sizeof(sa.sun_path));
	strcpy(sa.sun_path, d->socket);
	for (int i = 0; i < 1500; i++) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (fd >= 0)
			close(fd);
		if (ok) {
			gt_daemon_check_uid(d);
			return;
		}
		int st;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			GT_FAIL("gpubrokerd --backend %s exited during start (status %d)", backend,
			        WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		}
		gt_sleep_ms(10);
	}
	GT_FAIL("gpubrokerd did not accept connections within 15 s");
}

int gt_daemon_run_to_exit(struct gt_daemon *d, const char *backend, const char *const *extra,
                          const char *const *env)
{
	gt_daemon_spawn(d, backend, extra, env);
	for (int i = 0; i < 1500; i++) {
		int st;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			gt_daemon_forget(d);
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		gt_sleep_ms(10);
	}
	GT_FAIL("gpubrokerd kept running; it was expected to fail at start");
}

void gt_daemon_stop(struct gt_daemon *d)
{
	int st = 0;
	CHECK(d->pid > 0);
	kill(d->pid, SIGTERM);
	for (int i = 0; i < 1000; i++) {
		pid_t r = waitpid(d->pid, &st, WNOHANG);
		if (r == d->pid) {
			d->pid = 0;
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
				GT_FAIL("gpubrokerd did not exit cleanly (status %d)",
				        WIFEXITED(st) ? WEXITSTATUS(st) : -1);
			gt_daemon_forget(d);
			gt_daemon_cleanup(d);
			return;
		}
		gt_sleep_ms(10);
	}
	GT_FAIL("gpubrokerd did not stop within 10 s of SIGTERM");
}

bool gt_log_contains(const struct gt_daemon *d, const char *text)
{
	char line[2048];
	bool found = false;
	FILE *f = fopen(d->log, "r");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, text) != NULL;
	fclose(f);
	return found;
}

gpb_client *gt_connect(const struct gt_daemon *d, const char *name)
{
	gpb_client *c = NULL;
	GPB(gpb_connect(d->socket, name, &c));
	return c;
}

uint64_t gt_register(gpb_client *c, int device)
{
	struct gpb_register_opts opts = {.name = "gpu-test", .device = device};
	uint64_t instance = 0;
	GPB(gpb_register(c, &opts, &instance));
	return instance;
}

static cJSON *gt_status(gpb_client *c)
{
	char *json = NULL;
	GPB(gpb_request(c, "status", NULL, &json));
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	CHECK(r != NULL);
	return r;
}

/* A figure of status's totals (a decimal string). */
static uint64_t gt_status_total(gpb_client *c, const char *name)
{
	cJSON *r = gt_status(c);
	const cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "totals"), name);
	CHECK(cJSON_IsString(f));
	uint64_t v = strtoull(f->valuestring, NULL, 10);
	cJSON_Delete(r);
	return v;
}

uint64_t gt_status_used(gpb_client *c)
{
	return gt_status_total(c, "used");
}

uint64_t gt_status_fenced(gpb_client *c)
{
	return gt_status_total(c, "fenced");
}

void gt_status_backend(gpb_client *c, char *out, size_t len)
{
	cJSON *r = gt_status(c);
	const cJSON *b = cJSON_GetObjectItem(r, "backend");
	CHECK(cJSON_IsString(b));
	snprintf(out, len, "%s", b->valuestring);
	cJSON_Delete(r);
}

void gt_device_transport(gpb_client *c, int device, char *out, size_t len)
{
	char *json = NULL;
	GPB(gpb_request(c, "devices", NULL, &json));
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	CHECK(r != NULL);
	const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "devices"), device);
	const cJSON *t = cJSON_GetObjectItem(d, "transport");
	CHECK(cJSON_IsString(t));
	snprintf(out, len, "%s", t->valuestring);
	cJSON_Delete(r);
}

pid_t gt_spawn_self(char *const args[], int *out_fd)
{
	char *argv[16] = {"gpu-test-child"};
	char self[PATH_MAX];
	int n = 1, pipefd[2] = {-1, -1};
	/* The path, not /proc/self/exe itself: under valgrind the link reads
	 * as this program while exec of it would start valgrind's tool. */
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	CHECK(len > 0);
	self[len] = '\0';
	for (int i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	if (out_fd)
		CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (out_fd)
			dup2(pipefd[1], STDOUT_FILENO);
		execv(self, argv);
		_exit(127);
	}
	if (out_fd) {
		close(pipefd[1]);
		*out_fd = pipefd[0];
	}
	return pid;
}

int gt_wait(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR)
			return -1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

bool gt_read_line(int fd, char *buf, size_t len)
{
	size_t n = 0;
	while (n + 1 < len) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 30000) <= 0)
			return false;
		char ch;
		ssize_t r = read(fd, &ch, 1);
		if (r <= 0)
			return false;
		if (ch == '\n')
			break;
		buf[n++] = ch;
	}
	buf[n] = '\0';
	return true;
}

void gt_wait_slabs(gpb_client *c, int device, uint64_t want)
{
	struct gpb_pool_stats ps = {0};
	for (int i = 0; i < 300; i++) {
		GPB(gpb_stats(c, device, &ps));
		if (ps.slabs == want)
			return;
		poll(NULL, 0, 10);
	}
	GT_FAIL("%llu slabs on device %d, want %llu", (unsigned long long)ps.slabs, device,
	        (unsigned long long)want);
}

void gt_fill(unsigned char *buf, size_t n, unsigned seed)
{
	uint32_t x = seed * 2246822519u + 7;
	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		buf[i] = (unsigned char)(x >> 24);
	}
}

void gt_expect_and_write(void *ptr, size_t n, unsigned expect, unsigned next)
{
	unsigned char *buf = malloc(n), *want = malloc(n);
	CHECK(buf && want);
	CU(cu.MemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)ptr, n));
	gt_fill(want, n, expect);
	CHECK(memcmp(buf, want, n) == 0);
	gt_fill(buf, n, next);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)ptr, buf, n));
	CU(cu.CtxSynchronize());
	free(buf);
	free(want);
}

void CUDA_CB gt_wait_for_gate(void *gate)
{
	while (!atomic_load((atomic_int *)gate)) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}
