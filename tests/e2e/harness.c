/*
 * harness.c - end-to-end test helpers.
 */
#include "harness.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

const char *th_env(const char *name)
{
	const char *v = getenv(name);
	if (!v || !*v)
		fail_msg("environment variable %s is not set (run through meson test)", name);
	return v;
}

void th_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
}

/* Copies the file at from to to with mode; fails the test on error. */
static void th_copy_file(const char *from, const char *to, mode_t mode)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	assert_true(in >= 0);
	int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(out >= 0);
	char buf[1 << 16];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	/* fchmod, not open's mode: the umask would take bits off. */
	assert_int_equal(fchmod(out, mode), 0);
	assert_int_equal(close(out), 0);
	close(in);
}

void th_copy_make(struct th_copy *c, const char *prog_env)
{
	const char *program = th_env(prog_env);
	/* The library as this test loaded it: its name there is the soname
	 * the program asks for (DT_NEEDED), its folder the build tree's. */
	Dl_info info;
	assert_true(dladdr((const void *)gpb_connect, &info) != 0 && info.dli_fname);
	const char *lib_name = strrchr(info.dli_fname, '/');
	const char *prog_name = strrchr(program, '/');
	assert_non_null(lib_name);
	assert_non_null(prog_name);
	snprintf(c->dir, sizeof(c->dir), "/tmp/gpb-copy-XXXXXX");
	assert_non_null(mkdtemp(c->dir));
	char bin[96];
	snprintf(bin, sizeof(bin), "%s/bin", c->dir);
	snprintf(c->library, sizeof(c->library), "%s%s", c->dir, lib_name);
	snprintf(c->program, sizeof(c->program), "%s%s", bin, prog_name);
	assert_int_equal(chmod(c->dir, 0755), 0);
	assert_int_equal(mkdir(bin, 0755), 0);
	assert_int_equal(chmod(bin, 0755), 0);
	th_copy_file(info.dli_fname, c->library, 0644);
	th_copy_file(program, c->program, 0755);
}

void th_copy_exec(const struct th_copy *c, char *const argv[])
{
	/* The program's RUNPATH ($ORIGIN/.. for gpubrokerctl) finds the copy
	 * too; the search path makes it so whatever the program's folder. */
	setenv("LD_LIBRARY_PATH", c->dir, 1);
	execv(c->program, argv);
}

void th_copy_remove(struct th_copy *c)
{
	char bin[96];
	snprintf(bin, sizeof(bin), "%s/bin", c->dir);
	assert_int_equal(unlink(c->program), 0);
	assert_int_equal(unlink(c->library), 0);
	assert_int_equal(rmdir(bin), 0);
	assert_int_equal(rmdir(c->dir), 0);
}

bool th_file_has(const char *path, const char *text, int times)
{
	static char buf[1 << 16];
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = buf;
	for (int i = 0; i < times; i++, p++) {
		if (!(p = strstr(p, text)))
			return false;
	}
	return true;
}

/* The group fixtures th_run_group_tests wraps, and whether each returned 0
 * (a failed assertion leaves by longjmp and never sets its flag). */
static CMFixtureFunction th_group_setup_fn, th_group_teardown_fn;
static bool th_group_setup_ok, th_group_teardown_ok;

static int th_group_setup(void **state)
{
	int rc = th_group_setup_fn ? th_group_setup_fn(state) : 0;
	th_group_setup_ok = rc == 0;
	return rc;
}

static int th_group_teardown(void **state)
{
	int rc = th_group_teardown_fn ? th_group_teardown_fn(state) : 0;
	th_group_teardown_ok = rc == 0;
	return rc;
}

int th_run_group_tests(const char *name, const struct CMUnitTest *tests, size_t count,
                       CMFixtureFunction setup, CMFixtureFunction teardown)
{
	th_group_setup_fn = setup;
	th_group_teardown_fn = teardown;
	th_group_setup_ok = th_group_teardown_ok = false;
	int failed = _cmocka_run_group_tests(name, tests, count, th_group_setup, th_group_teardown);
	if (!th_group_setup_ok || !th_group_teardown_ok) {
		fprintf(stderr, "harness: the group %s of %s failed\n",
		        th_group_setup_ok ? "teardown" : "setup", name);
		failed++;
	}
	return failed;
}

bool th_valgrind(void)
{
	return getenv("GPB_VALGRIND") != NULL;
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TH_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TH_ASAN 1
#endif

bool th_asan(void)
{
#ifdef TH_ASAN
	return true;
#else
	return false;
#endif
}

void th_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

long long th_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* xorshift64: the state is per process, so a forked worker seeded on its
 * own draws its own sequence. */
static uint64_t th_rng_state;

uint64_t th_rnd(void)
{
	uint64_t x = th_rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return th_rng_state = x;
}

unsigned th_rnd_below(unsigned n)
{
	return (unsigned)(th_rnd() % n);
}

uint64_t th_rnd_seed(uint64_t seed)
{
	th_rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
	for (int i = 0; i < 4; i++)
		th_rnd();
	return th_rng_state;
}

/* Fills a socket address; false when the path does not fit. */
bool th_sockaddr(const char *path, struct sockaddr_un *sa)
{
	size_t n = strlen(path);
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (n >= sizeof(sa->sun_path))
		return false;
	memcpy(sa->sun_path, path, n + 1);
	return true;
}

static bool th_socket_ready(void *arg)
{
	const struct th_daemon *d = arg;
	struct sockaddr_un sa;
	assert_true(th_sockaddr(d->socket, &sa));
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok || !th_daemon_alive(d);
}

/* Daemons still running when the test program exits (a failed assertion
 * skips th_daemon_stop): killed so they do not hold the test's output pipe
 * open and turn a failure into a timeout. */
#define TH_MAX_DAEMONS 16
static pid_t th_daemons[TH_MAX_DAEMONS];

static void th_kill_leftovers(void)
{
	for (int i = 0; i < TH_MAX_DAEMONS; i++) {
		/* Only children not reaped yet: a reaped pid may be reused. */
		if (th_daemons[i] > 0 && waitpid(th_daemons[i], NULL, WNOHANG) == 0 &&
		    kill(th_daemons[i], SIGKILL) == 0)
			waitpid(th_daemons[i], NULL, 0);
	}
}

static void th_track(pid_t pid, pid_t old)
{
	static bool registered;
	if (!registered)
		registered = atexit(th_kill_leftovers) == 0;
	for (int i = 0; i < TH_MAX_DAEMONS; i++) {
		if (th_daemons[i] == old) {
			th_daemons[i] = pid;
			return;
		}
	}
}

void th_daemon_start(struct th_daemon *d, const char *const *extra)
{
	struct th_daemon_opts o = {.extra = extra};
	th_daemon_start_opts(d, &o);
}

void th_daemon_start_opts(struct th_daemon *d, const struct th_daemon_opts *o)
{
	const char *daemon = th_env("GPB_DAEMON");
	const char *const *extra = o->extra;
	if (!o->restart) {
		snprintf(d->dir, sizeof(d->dir), "/tmp/gpb-test-XXXXXX");
		assert_non_null(mkdtemp(d->dir));
		snprintf(d->socket, sizeof(d->socket), "%s/gpubroker.sock", d->dir);
	}
	static const char *const base[] = {"--socket",      NULL,   "--backend",    "sim",
	                                   "--sim-devices", "2",    "--sim-memory", "1GiB",
	                                   "--slab-size",   "2MiB", "--log-level",  "warn"};
	const char *argv[96];
	int n = 0;
	/* The test's own wrapper outermost. `meson test --setup=valgrind`
	 * runs the daemon under valgrind as well: GPB_DAEMON_WRAPPER is the
	 * command to put in front of it (words split at blanks). */
	for (int i = 0; o->wrapper && o->wrapper[i] && n < 16; i++)
		argv[n++] = o->wrapper[i];
	char wrapper[1024];
	snprintf(wrapper, sizeof(wrapper), "%s", getenv("GPB_DAEMON_WRAPPER") ?: "");
	char *save = NULL;
	for (char *w = strtok_r(wrapper, " \t", &save); w && n < 40;
	     w = strtok_r(NULL, " \t", &save))
		argv[n++] = w;
	argv[n++] = daemon;
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		argv[n++] = base[i] ? base[i] : d->socket;
	for (int i = 0; extra && extra[i] && n < 94; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	d->pid = fork();
	assert_true(d->pid >= 0);
	if (d->pid == 0) {
		if (o->log_path) {
			int fd = open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
			if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
				_exit(126);
		}
		if (o->exact_heap)
			setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	th_track(d->pid, 0);
	assert_true(th_wait_for(th_socket_ready, d, 10000));
	assert_true(th_daemon_alive(d));
	if (o->nofile) {
		/* Set from here, once the daemon runs: under valgrind a
		 * process's own setrlimit(RLIMIT_NOFILE) is emulated and never
		 * reaches the kernel (and valgrind itself needs descriptors to
		 * exec), but a limit set on another process is real. The limit
		 * bounds the descriptors the daemon opens from now on. */
		struct rlimit rl = {o->nofile, o->nofile};
		assert_int_equal(prlimit(d->pid, RLIMIT_NOFILE, &rl, NULL), 0);
	}
}

bool th_daemon_alive(const struct th_daemon *d)
{
	return d->pid > 0 && waitpid(d->pid, NULL, WNOHANG) == 0;
}

int th_daemon_stop(struct th_daemon *d)
{
	int status = -1, st;
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		for (int i = 0; i < 1000; i++) {
			pid_t r = waitpid(d->pid, &st, WNOHANG);
			if (r == d->pid) {
				status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
				break;
			}
			if (r < 0)
				break;
			th_sleep_ms(10);
		}
		if (status == -1 && kill(d->pid, SIGKILL) == 0)
			waitpid(d->pid, NULL, 0);
		th_track(0, d->pid);
		d->pid = 0;
	}
	unlink(d->socket);
	rmdir(d->dir);
	return status;
}

void th_daemon_kill(struct th_daemon *d)
{
	assert_true(d->pid > 0);
	assert_int_equal(kill(d->pid, SIGKILL), 0);
	assert_int_equal(waitpid(d->pid, NULL, 0), d->pid);
	th_track(0, d->pid);
	d->pid = 0;
}

int th_daemon_fds(const struct th_daemon *d)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
	DIR *dir = opendir(path);
	int n = 0;
	if (!dir)
		return -1;
	for (struct dirent *e; (e = readdir(dir));)
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

long th_daemon_status_kib(const struct th_daemon *d, const char *key)
{
	char path[64], line[256];
	size_t n = strlen(key);
	long kib = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, n) == 0 && line[n] == ':' &&
		    sscanf(line + n + 1, "%ld kB", &kib) == 1)
			break;
	}
	fclose(f);
	return kib;
}

long th_daemon_rss_kib(const struct th_daemon *d)
{
	return th_daemon_status_kib(d, "VmRSS");
}

gpb_client *th_client(const struct th_daemon *d, const char *name)
{
	gpb_client *c = NULL;
	int rc = gpb_connect(d->socket, name, &c);
	if (rc < 0)
		fail_msg("gpb_connect: %s: %s", gpb_strerror(rc), gpb_last_error());
	return c;
}

static uint64_t th_json_u64(const cJSON *v)
{
	if (cJSON_IsString(v))
		return strtoull(v->valuestring, NULL, 10);
	if (cJSON_IsNumber(v))
		return (uint64_t)v->valuedouble;
	fail_msg("not a number");
	return 0;
}

/* The result of a request without parameters, parsed; fails the test on
 * an error. */
static cJSON *th_request_json(gpb_client *c, const char *method)
{
	char *json = NULL;
	int rc = gpb_request(c, method, NULL, &json);
	if (rc < 0)
		fail_msg("%s: %s: %s", method, gpb_strerror(rc), gpb_last_error());
	cJSON *root = cJSON_Parse(json);
	assert_non_null(root);
	gpb_string_free(json);
	return root;
}

void th_settle(gpb_client *c)
{
	cJSON_Delete(th_request_json(c, "stats"));
}

uint64_t th_status_field(gpb_client *c, const char *key)
{
	cJSON *root = th_request_json(c, "status");
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
	if (!v)
		v = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(root, "totals"), key);
	assert_non_null(v);
	uint64_t x = th_json_u64(v);
	cJSON_Delete(root);
	return x;
}

uint64_t th_status_used(gpb_client *c)
{
	return th_status_field(c, "used");
}

pid_t th_fork_linked(int *rd, int *wr)
{
	int up[2], down[2]; /* child to parent, parent to child */
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	bool child = pid == 0;
	close(child ? up[0] : up[1]);
	close(child ? down[1] : down[0]);
	*rd = child ? down[0] : up[0];
	*wr = child ? up[1] : down[1];
	return pid;
}

void th_child_reap_ok(pid_t pid)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

void th_child_exit(int code)
{
	const char *preload = getenv("LD_PRELOAD");
	if (preload && strstr(preload, "vgpreload")) {
		char arg[16];
		snprintf(arg, sizeof(arg), "exit %d", code & 255);
		execl("/bin/sh", "sh", "-c", arg, (char *)NULL);
	}
	_exit(code);
}

int th_run(char *const argv[], char *const env[], char *out, size_t cap)
{
	int pipefd[2];
	assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pipefd[1], STDOUT_FILENO);
		for (int i = 0; env && env[i]; i++)
			putenv(env[i]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pipefd[1]);
	size_t len = 0;
	for (;;) {
		ssize_t n = read(pipefd[0], out + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == cap - 1)
			break;
	}
	out[len] = '\0';
	close(pipefd[0]);
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

uint64_t th_selfcheck(gpb_client *c, struct th_selfcheck *out)
{
	cJSON *root = th_request_json(c, "selfcheck");
	assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "ok")));
	uint64_t n = th_json_u64(cJSON_GetObjectItemCaseSensitive(root, "allocations"));
	if (out) {
		out->allocations = n;
		out->sessions = th_json_u64(cJSON_GetObjectItemCaseSensitive(root, "sessions"));
		out->instances = th_json_u64(cJSON_GetObjectItemCaseSensitive(root, "instances"));
		out->waits = th_json_u64(cJSON_GetObjectItemCaseSensitive(root, "waits"));
		out->parting = th_json_u64(cJSON_GetObjectItemCaseSensitive(root, "parting"));
		out->ghosts = th_json_u64(cJSON_GetObjectItemCaseSensitive(root, "ghosts"));
		out->retired = th_json_u64(cJSON_GetObjectItemCaseSensitive(root, "retired"));
		const cJSON *heap = cJSON_GetObjectItemCaseSensitive(root, "heap_bytes");
		out->heap_bytes = cJSON_IsNumber(heap) ? (long long)heap->valuedouble : -1;
	}
	cJSON_Delete(root);
	return n;
}

double th_metric(gpb_client *c, const char *series)
{
	cJSON *root = th_request_json(c, "metrics");
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
	assert_true(cJSON_IsString(text));
	double v = -1;
	size_t n = strlen(series);
	for (const char *p = text->valuestring; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
		if (strncmp(p, series, n) == 0 && p[n] == ' ') {
			v = strtod(p + n + 1, NULL);
			break;
		}
	}
	cJSON_Delete(root);
	return v;
}

bool th_only_one_client(void *client)
{
	return th_status_field(client, "clients") == 1;
}

bool th_wait_for(bool (*cond)(void *arg), void *arg, int timeout_ms)
{
	for (int waited = 0;; waited += 10) {
		if (cond(arg))
			return true;
		if (waited >= timeout_ms)
			return false;
		th_sleep_ms(10);
	}
}

void th_bystander_start(struct th_bystander *b, const char *const *extra)
{
	struct th_daemon_opts o = {.extra = extra};
	th_bystander_start_opts(b, &o);
}

void th_bystander_start_opts(struct th_bystander *b, const struct th_daemon_opts *o)
{
	th_daemon_start_opts(&b->daemon, o);
	b->client = th_client(&b->daemon, "bystander");
	struct gpb_register_opts opts = {.name = "bystander"};
	assert_int_equal(gpb_register(b->client, &opts, &b->inst), 0);
	assert_int_equal(gpb_alloc(b->client, b->inst, 4096, 0, &b->alloc), 0);
	memset(b->alloc.ptr, 0x5a, 4096);
	b->baseline_fds = th_daemon_fds(&b->daemon);
}

int th_bystander_stop(struct th_bystander *b)
{
	gpb_disconnect(b->client);
	return th_daemon_stop(&b->daemon);
}

void th_assert_serves(const struct th_daemon *d, gpb_client *c, uint64_t inst,
                      const struct gpb_allocation *alloc)
{
	assert_true(th_daemon_alive(d));
	const unsigned char *p = alloc->ptr;
	for (int i = 0; i < 4096; i++)
		assert_int_equal(p[i], 0x5a);
	struct gpb_allocation a;
	assert_int_equal(gpb_alloc(c, inst, 1024, 0, &a), 0);
	assert_int_equal(gpb_free(c, a.id), 0);
}

void th_assert_unaffected(struct th_bystander *b)
{
	th_assert_serves(&b->daemon, b->client, b->inst, &b->alloc);
	struct gpb_mem_info mi;
	assert_int_equal(gpb_mem_info(b->client, b->inst, &mi), 0);
	assert_int_equal(mi.used, b->alloc.size);
}

/* The pool keeps one empty slab per uid as a cache (pool.h), and every
 * client of these tests runs as the bystander's uid (a test that brings in
 * another raises baseline_fds meanwhile): that one slab descriptor may stay;
 * anything more is a leak. */
static bool th_fds_back(void *arg)
{
	const struct th_bystander *b = arg;
	return th_daemon_fds(&b->daemon) <= b->baseline_fds + 1;
}

void th_assert_no_leak(struct th_bystander *b)
{
	if (!th_wait_for(th_fds_back, b, 10000))
		fail_msg("daemon holds %d descriptors, %d at the start", th_daemon_fds(&b->daemon),
		         b->baseline_fds);
	assert_true(th_wait_for(th_only_one_client, b->client, 10000));
	assert_int_equal(th_status_used(b->client), b->alloc.size);
	assert_int_equal(th_selfcheck(b->client, NULL), 1);
}
