/*
 * test-privacy.c - what one user may learn of, and do to, another user's
 * things: export names live in their exporter's namespace (no user can plant
 * a name among another's), another user's instances, allocations, groups
 * and export names are answered exactly as unknown ones, and listings show
 * other users only as totals; an administrator still sees everything.
 *
 * The two users (UID_A, UID_B: ordinary users, not administrators) are
 * forked children that set their uid; the test itself runs as root, an
 * administrator. That needs root: run as anyone else, the program exits 77
 * and Meson reports it skipped.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <grp.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"

/* Two users without an account: the daemon needs none. */
#define UID_A 61001
#define UID_B 61002

#define BIG (4u << 20) /* fills slabs of its own (2 MiB slabs): may go to another user */

/* What the children tell the test and each other (shared mapping). */
struct shared {
	char inst[17];  /* A's instance */
	char alloc[17]; /* A's allocation */
	char names[2][17];
};
static struct shared *sh;

/* A child running as another user, stopped at its pauses by the test. */
struct user {
	pid_t pid;
	int up, down; /* the child's end: write up, read down; the test's: the reverse */
};

typedef int (*user_fn)(struct user *u, const char *socket);

static void user_start(struct user *u, uid_t uid, user_fn fn, const char *socket)
{
	int up[2], down[2];
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		u->up = up[1];
		u->down = down[0];
		if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
			th_child_exit(99);
		th_child_exit(fn(u, socket));
	}
	close(up[1]);
	close(down[0]);
	u->pid = pid;
	u->up = up[0];
	u->down = down[1];
}

/* In the child: tells the test it got here, and waits until it is let go
 * on (user_end). */
static void user_pause(struct user *u)
{
	char c = 1;
	if (write(u->up, &c, 1) != 1 || read(u->down, &c, 1) < 0)
		th_child_exit(98);
}

/* Lets the child go on and returns its exit status. */
static int user_end(struct user *u)
{
	int st;
	close(u->down);
	close(u->up);
	assert_int_equal(waitpid(u->pid, &st, 0), u->pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* In the test: waits for the child's next pause; fails with its exit
 * status if it ended instead. */
static void user_wait(struct user *u)
{
	char c;
	if (read(u->up, &c, 1) != 1)
		fail_msg("the child ended early with status %d", user_end(u));
}

/* A child's failure: says why on stderr, returns code. */
static int child_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int child_fail(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "uid %u: ", (unsigned)getuid());
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return code;
}

/* A raw connection that said hello, or -1 (no test assertion: children). */
static int raw_connect(const char *socket_path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char reply[4096];
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", socket_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    th_call(fd, "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}", reply,
	            sizeof(reply)) <= 0 ||
	    !strstr(reply, "\"result\"")) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static cJSON *raw_result(int fd, const char *frame, char *reply, size_t cap)
{
	cJSON *root;
	if (th_call(fd, frame, reply, cap) <= 0 || !(root = cJSON_Parse(reply)))
		return NULL;
	cJSON *r = cJSON_DetachItemFromObjectCaseSensitive(root, "result");
	cJSON_Delete(root);
	return r;
}

static double jnumber(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *jstring(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : "";
}

/* gpubrokerctl ARGS with stderr joined to stdout, as the user running it:
 * its exit status, its output in out. */
/* The users run a copy every user may reach (th_copy_make), made by setup:
 * the build tree may not be theirs to reach (a clone under /root). */
static struct th_copy ctl_copy;

static int run_ctl(const char *socket, const char *args, char *out, size_t cap)
{
	char cmd[768];
	snprintf(cmd, sizeof(cmd), "LD_LIBRARY_PATH='%s' exec '%s' --socket '%s' %s 2>&1",
	         ctl_copy.dir, ctl_copy.program, socket, args);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	size_t n = fread(out, 1, cap - 1, p);
	out[n] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int setup(void **state)
{
	(void)state;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return -1;
	th_copy_make(&ctl_copy, "GPB_CTL");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	th_copy_remove(&ctl_copy);
	munmap(sh, sizeof(*sh));
	return 0;
}

/* A daemon whose socket every user may open. */
static void start(struct th_daemon *d)
{
	const char *extra[] = {"--socket-mode", "0666", NULL};
	memset(sh, 0, sizeof(*sh));
	th_daemon_start(d, extra);
	assert_int_equal(chmod(d->dir, 0755), 0);
}

static int connect_register(const char *socket, const char *name, const char *group, gpb_client **c,
                            uint64_t *inst)
{
	struct gpb_register_opts opts = {.name = name, .group = group};
	if (gpb_connect(socket, name, c) < 0)
		return -1;
	return gpb_register(*c, &opts, inst);
}

/* ---- a planted name ---------------------------------------------------------- */

/* B: exports its own memory (0xbb) as "weights", granted to A, and as
 * "mine", for itself; holds them until the test lets it go. */
static int b_exports(struct user *u, const char *socket)
{
	gpb_client *c = NULL;
	uint64_t inst;
	struct gpb_allocation a, m;
	if (connect_register(socket, "bob", NULL, &c, &inst) < 0)
		return child_fail(10, "register: %s", gpb_last_error());
	if (gpb_alloc(c, inst, BIG, 0, &a) < 0 || gpb_alloc(c, inst, BIG, 0, &m) < 0)
		return child_fail(11, "alloc: %s", gpb_last_error());
	memset(a.ptr, 0xbb, BIG);
	if (gpb_export(c, a.id, "weights", UID_A) < 0 || gpb_export(c, m.id, "mine", -1) < 0)
		return child_fail(12, "export: %s", gpb_last_error());
	user_pause(u);
	gpb_disconnect(c);
	return 0;
}

/* A: "weights" is a name of its own to give, and its bare name finds its
 * own bytes, whatever B exported to it under that name. */
static int a_exports_its_own(struct user *u, const char *socket)
{
	gpb_client *c = NULL, *c2 = NULL;
	uint64_t inst;
	struct gpb_allocation a, b;
	(void)u;
	if (connect_register(socket, "alice", NULL, &c, &inst) < 0 ||
	    gpb_connect(socket, "alice-2", &c2) < 0)
		return child_fail(20, "connect: %s", gpb_last_error());
	if (gpb_alloc(c, inst, 64 << 10, 0, &a) < 0)
		return child_fail(21, "alloc: %s", gpb_last_error());
	memset(a.ptr, 0xaa, 64 << 10);
	if (gpb_export(c, a.id, "weights", -1) < 0)
		return child_fail(22, "A cannot export its own \"weights\": %s", gpb_last_error());
	/* Another connection of A's: the bare name is A's own. */
	if (gpb_open_shared(c2, "weights", &b) < 0)
		return child_fail(23, "A's bare open: %s", gpb_last_error());
	if (b.id != a.id || ((unsigned char *)b.ptr)[0] != 0xaa)
		return child_fail(24,
		                  "A's bare \"weights\" mapped another allocation (%016" PRIx64
		                  ", first byte %#x)",
		                  b.id, ((unsigned char *)b.ptr)[0]);
	gpb_disconnect(c2);
	gpb_disconnect(c);
	return 0;
}

/* B grants its "weights" to A before A uses the name: A's own export of
 * "weights" still succeeds, and A's bare open maps A's bytes, not B's. */
static void test_planted_name(void **state)
{
	struct th_daemon d;
	struct user a, b;
	(void)state;
	start(&d);
	user_start(&b, UID_B, b_exports, d.socket);
	user_wait(&b);
	user_start(&a, UID_A, a_exports_its_own, d.socket);
	assert_int_equal(user_end(&a), 0);
	assert_int_equal(user_end(&b), 0);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* A: B's export is opened by naming B, and only what B granted to A. */
static int a_opens_from_b(struct user *u, const char *socket)
{
	gpb_client *c = NULL;
	struct gpb_allocation b;
	char unknown[256];
	(void)u;
	if (gpb_connect(socket, "alice", &c) < 0)
		return child_fail(30, "connect: %s", gpb_last_error());
	if (gpb_open_shared(c, "weights", &b) != GPB_E_NOT_FOUND)
		return child_fail(31, "A's bare \"weights\" found B's export");
	if (gpb_open_shared_from(c, UID_B, "nope", &b) != GPB_E_NOT_FOUND)
		return child_fail(32, "an unknown name of B's was found");
	snprintf(unknown, sizeof(unknown), "%s", gpb_last_error());
	/* Not granted to A: exactly as unknown. */
	if (gpb_open_shared_from(c, UID_B, "mine", &b) != GPB_E_NOT_FOUND ||
	    strcmp(gpb_last_error(), unknown) != 0)
		return child_fail(33, "B's own export, to A: %s (unknown: %s)", gpb_last_error(),
		                  unknown);
	if (gpb_open_shared_from(c, UID_B + 1, "weights", &b) != GPB_E_NOT_FOUND)
		return child_fail(34, "\"weights\" found under the wrong owner");
	if (gpb_open_shared_from(c, UID_B, "weights", &b) < 0)
		return child_fail(35, "A naming B: %s", gpb_last_error());
	if (b.size < BIG || ((unsigned char *)b.ptr)[BIG - 1] != 0xbb)
		return child_fail(36, "A naming B mapped the wrong bytes");
	gpb_disconnect(c);
	return 0;
}

static void test_open_names_the_exporter(void **state)
{
	struct th_daemon d;
	struct user a, b;
	struct gpb_allocation m;
	(void)state;
	start(&d);
	user_start(&b, UID_B, b_exports, d.socket);
	user_wait(&b);
	user_start(&a, UID_A, a_opens_from_b, d.socket);
	assert_int_equal(user_end(&a), 0);
	/* An administrator sees everything but maps only what was granted. */
	gpb_client *root = th_client(&d, "root");
	assert_int_equal(gpb_open_shared_from(root, UID_B, "weights", &m), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_open_shared_from(root, UID_B, "mine", &m), GPB_E_NOT_FOUND);
	gpb_disconnect(root);
	assert_int_equal(user_end(&b), 0);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* ---- not yours is unknown ------------------------------------------------------ */

/* A: an instance in group "ga" with an allocation, an export of its own, a
 * queued request; the ids go to the test. */
static int a_holds(struct user *u, const char *socket)
{
	gpb_client *c = NULL;
	uint64_t inst;
	struct gpb_allocation a;
	char *json = NULL;
	if (connect_register(socket, "alice", "ga", &c, &inst) < 0)
		return child_fail(40, "register: %s", gpb_last_error());
	if (gpb_alloc(c, inst, 1 << 20, 0, &a) < 0 || gpb_export(c, a.id, "private", -1) < 0)
		return child_fail(41, "alloc, export: %s", gpb_last_error());
	snprintf(sh->inst, sizeof(sh->inst), "%016" PRIx64, inst);
	snprintf(sh->alloc, sizeof(sh->alloc), "%016" PRIx64, a.id);
	char params[256];
	snprintf(params, sizeof(params),
	         "{\"instance\":\"%s\",\"requests\":[{\"label\":\"l\",\"shape\":[4],"
	         "\"elem_size\":4}]}",
	         sh->inst);
	if (gpb_request(c, "queue_request", params, &json) < 0)
		return child_fail(42, "queue_request: %s", gpb_last_error());
	gpb_string_free(json);
	user_pause(u);
	gpb_disconnect(c);
	return 0;
}

/* @ in template replaced by value. */
static void fill_in(char *out, size_t cap, const char *template, const char *value)
{
	const char *at = strchr(template, '@');
	snprintf(out, cap, "%.*s%s%s", (int)(at - template), template, value, at + 1);
}

/* Requests that name something of A's (@): with what A has (mine: NULL for
 * A's instance or allocation id) and with what does not exist; B must get
 * the same bytes back for both. */
enum probe_kind { PROBE_INSTANCE, PROBE_ALLOCATION, PROBE_NAME };
static const struct {
	const char *method, *params;
	enum probe_kind kind;
	const char *mine, *unknown;
} probes[] = {
    {"set_proportion", "{\"instance\":\"@\",\"proportion\":0.5}", PROBE_INSTANCE, NULL, NULL},
    {"set_auto", "{\"instance\":\"@\"}", PROBE_INSTANCE, NULL, NULL},
    {"set_group", "{\"instance\":\"@\",\"group\":\"g\"}", PROBE_INSTANCE, NULL, NULL},
    {"queue_request",
     "{\"instance\":\"@\",\"requests\":[{\"label\":\"x\",\"shape\":[4],\"elem_size\":4}]}",
     PROBE_INSTANCE, NULL, NULL},
    {"allocate_queue", "{\"instance\":\"@\"}", PROBE_INSTANCE, NULL, NULL},
    {"mem_info", "{\"instance\":\"@\"}", PROBE_INSTANCE, NULL, NULL},
    {"alloc", "{\"instance\":\"@\",\"size\":\"4096\"}", PROBE_INSTANCE, NULL, NULL},
    {"unregister", "{\"instance\":\"@\"}", PROBE_INSTANCE, NULL, NULL},
    {"free_label", "{\"label\":\"l\",\"instance\":\"@\"}", PROBE_INSTANCE, NULL, NULL},
    {"free", "{\"id\":\"@\"}", PROBE_ALLOCATION, NULL, NULL},
    {"attach", "{\"id\":\"@\"}", PROBE_ALLOCATION, NULL, NULL},
    {"detach", "{\"id\":\"@\"}", PROBE_ALLOCATION, NULL, NULL},
    {"claim", "{\"id\":\"@\"}", PROBE_ALLOCATION, NULL, NULL},
    {"export", "{\"id\":\"@\",\"name\":\"n\"}", PROBE_ALLOCATION, NULL, NULL},
    {"group_info", "{\"group\":\"@\"}", PROBE_NAME, "ga", "gz"},
    {"group_info", "{\"group\":\"@\",\"uid\":61001}", PROBE_NAME, "ga", "gz"},
    {"chunk_parameters",
     "{\"requests\":[{\"label\":\"x\",\"shape\":[4],\"elem_size\":4}],\"group\":\"@\","
     "\"uid\":61001}",
     PROBE_NAME, "ga", "gz"},
    {"open", "{\"name\":\"@\",\"owner\":61001}", PROBE_NAME, "private", "nope"},
    {"unexport", "{\"name\":\"@\"}", PROBE_NAME, "private", "nope"},
};

static int b_probes(struct user *u, const char *socket)
{
	char frame[512], params[384], mine[4096], unknown[4096];
	(void)u;
	int fd = raw_connect(socket);
	if (fd < 0)
		return child_fail(50, "cannot connect");
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		const char *values[2] = {probes[i].mine, probes[i].unknown};
		if (probes[i].kind == PROBE_INSTANCE) {
			values[0] = sh->inst;
			values[1] = "7fffffffffffffff";
		} else if (probes[i].kind == PROBE_ALLOCATION) {
			values[0] = sh->alloc;
			values[1] = "0123456789abcdef";
		}
		for (int k = 0; k < 2; k++) {
			fill_in(params, sizeof(params), probes[i].params, values[k]);
			snprintf(frame, sizeof(frame),
			         "{\"id\":\"p\",\"method\":\"%s\",\"params\":%s}", probes[i].method,
			         params);
			if (th_call(fd, frame, k ? unknown : mine, sizeof(mine)) <= 0)
				return child_fail(51, "%s: no reply", probes[i].method);
		}
		if (strcmp(mine, unknown) != 0 || !strstr(mine, "\"code\":-32004"))
			return child_fail(60 + (int)i, "%s: A's gets %s, an unknown one %s",
			                  probes[i].method, mine, unknown);
	}
	close(fd);
	/* gpubrokerctl likewise: the same words, the same exit status. */
	char args[64], out_mine[512], out_unknown[512];
	static const char *const ctl[] = {"set-auto @", "set-proportion @ 0.5"};
	for (size_t i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++) {
		fill_in(args, sizeof(args), ctl[i], sh->inst);
		int rm = run_ctl(socket, args, out_mine, sizeof(out_mine));
		fill_in(args, sizeof(args), ctl[i], "7fffffffffffffff");
		int ru = run_ctl(socket, args, out_unknown, sizeof(out_unknown));
		if (rm != ru || rm != 1 || strcmp(out_mine, out_unknown) != 0)
			return child_fail(90 + (int)i,
			                  "gpubrokerctl %s: %d \"%s\", unknown: %d \"%s\"", ctl[i],
			                  rm, out_mine, ru, out_unknown);
	}
	return 0;
}

/* Every request that takes an instance id, an allocation id, a group or an
 * export name answers B about A's exactly as about one that does not exist:
 * the same reply, byte for byte. */
static void test_not_yours_is_unknown(void **state)
{
	struct th_daemon d;
	struct user a, b;
	(void)state;
	start(&d);
	user_start(&a, UID_A, a_holds, d.socket);
	user_wait(&a);
	user_start(&b, UID_B, b_probes, d.socket);
	assert_int_equal(user_end(&b), 0);
	/* A's things are untouched, and an administrator reaches them. */
	gpb_client *root = th_client(&d, "root");
	char params[64], *json = NULL;
	snprintf(params, sizeof(params), "{\"instance\":\"%s\"}", sh->inst);
	assert_int_equal(gpb_request(root, "set_auto", params, &json), 0);
	assert_non_null(strstr(json, "\"name\":\"alice\""));
	gpb_string_free(json);
	gpb_disconnect(root);
	assert_int_equal(user_end(&a), 0);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* ---- others as totals ------------------------------------------------------------ */

/* A: two instances, one in group "ga", 1 MiB allocated; the ids go to the
 * test (names[0..1]). */
static int a_two_instances(struct user *u, const char *socket)
{
	gpb_client *c = NULL;
	uint64_t one, two;
	struct gpb_allocation a;
	struct gpb_register_opts opts = {.name = "a-two"};
	if (connect_register(socket, "a-one", "ga", &c, &one) < 0 ||
	    gpb_register(c, &opts, &two) < 0 || gpb_alloc(c, one, 1 << 20, 0, &a) < 0)
		return child_fail(70, "set-up: %s", gpb_last_error());
	snprintf(sh->names[0], sizeof(sh->names[0]), "%016" PRIx64, one);
	snprintf(sh->names[1], sizeof(sh->names[1]), "%016" PRIx64, two);
	user_pause(u);
	gpb_disconnect(c);
	return 0;
}

/* Whether a reply (JSON, or metrics text) mentions anything of A's: its
 * names, its uid or its instances' ids as members or labels. (Ids alone are
 * no test: session and instance ids count alike from 1.) */
static bool mentions_a(const char *text)
{
	char key[64];
	if (strstr(text, "a-one") || strstr(text, "a-two") || strstr(text, "\"uid\":61001") ||
	    strstr(text, "uid=\"61001\""))
		return true;
	for (int i = 0; i < 2; i++) {
		snprintf(key, sizeof(key), "\"instance\":\"%s\"", sh->names[i]);
		if (strstr(text, key))
			return true;
		snprintf(key, sizeof(key), "instance_id=\"%s\"", sh->names[i]);
		if (strstr(text, key))
			return true;
	}
	return false;
}

static int b_looks(struct user *u, const char *socket)
{
	static char reply[65536], out[8192];
	gpb_client *c = NULL;
	uint64_t mine;
	struct gpb_allocation a;
	if (connect_register(socket, "b-one", "ga", &c, &mine) < 0 ||
	    gpb_alloc(c, mine, 64 << 10, 0, &a) < 0)
		return child_fail(71, "set-up: %s", gpb_last_error());
	int fd = raw_connect(socket);
	if (fd < 0)
		return child_fail(72, "cannot connect");

	cJSON *r = raw_result(fd, "{\"id\":\"p\",\"method\":\"policy\"}", reply, sizeof(reply));
	const cJSON *insts = cJSON_GetObjectItemCaseSensitive(r, "instances");
	const cJSON *others = cJSON_GetObjectItemCaseSensitive(r, "others");
	const cJSON *one = cJSON_GetArrayItem(insts, 0);
	if (cJSON_GetArraySize(insts) != 1 || jnumber(one, "uid") != UID_B ||
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(one, "grouped")) ||
	    jnumber(others, "instances") != 2 || strcmp(jstring(others, "used"), "1048576") != 0 ||
	    mentions_a(reply))
		return child_fail(73, "policy: %s", reply);
	cJSON_Delete(r);

	r = raw_result(fd, "{\"id\":\"c\",\"method\":\"clients\"}", reply, sizeof(reply));
	others = cJSON_GetObjectItemCaseSensitive(r, "others");
	/* B's two connections, A's one as totals. */
	if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "clients")) != 2 ||
	    jnumber(others, "clients") != 1 || jnumber(others, "instances") != 2 ||
	    jnumber(others, "allocations") != 1 ||
	    strcmp(jstring(others, "used"), "1048576") != 0 || mentions_a(reply))
		return child_fail(74, "clients: %s", reply);
	cJSON_Delete(r);

	/* B's "ga" is B's group: A's member of a group of that name is not in it. */
	r = raw_result(fd, "{\"id\":\"g\",\"method\":\"group_info\",\"params\":{\"group\":\"ga\"}}",
	               reply, sizeof(reply));
	const cJSON *members = cJSON_GetObjectItemCaseSensitive(r, "members");
	char id[17];
	snprintf(id, sizeof(id), "%016" PRIx64, mine);
	if (cJSON_GetArraySize(members) != 1 ||
	    strcmp(cJSON_GetArrayItem(members, 0)->valuestring, id) != 0 ||
	    strcmp(jstring(r, "used"), "65536") != 0 || jnumber(r, "uid") != UID_B)
		return child_fail(75, "group_info: %s", reply);
	cJSON_Delete(r);

	r = raw_result(fd, "{\"id\":\"m\",\"method\":\"metrics\"}", reply, sizeof(reply));
	const char *text = jstring(r, "text");
	if (mentions_a(text) || !strstr(text, "uid=\"61002\"") || !strstr(text, "b-one") ||
	    !strstr(text, "gpubroker_connections 3"))
		return child_fail(76, "metrics: %s", text);
	cJSON_Delete(r);
	close(fd);

	/* gpubrokerctl works for B, and sums A up in one line. */
	if (run_ctl(socket, "instances", out, sizeof(out)) != 0 || strstr(out, "a-one") ||
	    !strstr(out, "b-one") || !strstr(out, "other users: 2 instances, 1.0 MiB used"))
		return child_fail(77, "gpubrokerctl instances: %s", out);
	if (run_ctl(socket, "clients", out, sizeof(out)) != 0 || strstr(out, "a-one") ||
	    !strstr(out, "other users: 1 clients, 2 instances, 1 allocations, 1.0 MiB used"))
		return child_fail(78, "gpubrokerctl clients: %s", out);
	user_pause(u);
	gpb_disconnect(c);
	return 0;
}

/* policy, clients, group_info and metrics show a user its own in full and
 * other users only as totals; an administrator sees everyone. */
static void test_others_as_totals(void **state)
{
	struct th_daemon d;
	struct user a, b;
	char *json = NULL;
	(void)state;
	start(&d);
	user_start(&a, UID_A, a_two_instances, d.socket);
	user_wait(&a);
	user_start(&b, UID_B, b_looks, d.socket);
	user_wait(&b);

	gpb_client *root = th_client(&d, "root");
	assert_int_equal(gpb_request(root, "policy", NULL, &json), 0);
	assert_true(mentions_a(json) && strstr(json, "b-one"));
	assert_non_null(strstr(json, "\"others\":{\"instances\":0,\"used\":\"0\"}"));
	gpb_string_free(json);
	assert_int_equal(gpb_request(root, "clients", NULL, &json), 0);
	assert_true(strstr(json, "\"uid\":61001") && strstr(json, "\"uid\":61002"));
	gpb_string_free(json);
	assert_int_equal(gpb_request(root, "group_info", "{\"group\":\"ga\",\"uid\":61001}", &json),
	                 0);
	assert_non_null(strstr(json, sh->names[0]));
	assert_null(strstr(json, sh->names[1]));
	gpb_string_free(json);
	assert_int_equal(gpb_request(root, "metrics", NULL, &json), 0);
	assert_true(strstr(json, "uid=\\\"61001\\\"") && strstr(json, "uid=\\\"61002\\\""));
	gpb_string_free(json);
	char out[4096];
	char *argv[] = {(char *)th_env("GPB_CTL"), "--socket", d.socket, "instances", NULL};
	assert_int_equal(th_run(argv, NULL, out, sizeof(out)), 0);
	assert_true(strstr(out, "a-one") && strstr(out, "b-one"));
	assert_null(strstr(out, "other users"));
	gpb_disconnect(root);

	assert_int_equal(user_end(&b), 0);
	assert_int_equal(user_end(&a), 0);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("# not root: cannot run clients as other users\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_planted_name),
	    cmocka_unit_test(test_open_names_the_exporter),
	    cmocka_unit_test(test_not_yours_is_unknown),
	    cmocka_unit_test(test_others_as_totals),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
