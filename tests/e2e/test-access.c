/*
 * test-access.c - who the daemon takes a client for: admin operations for
 * root and the admin group only, the socket's mode keeping other users out,
 * per-group rules matching supplementary groups.
 *
 * Every test here becomes another user in a forked child (setgroups, setgid,
 * setuid), which needs root: run as anyone else, the program exits 77 and
 * Meson reports it skipped.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534

static char conf_path[64];
/* Two groups of this machine (neither root's nor nobody's) a child joins. */
static gid_t group_gid[2];
static char group_name[2][64];

static void write_conf(const char *text)
{
	th_write_file(conf_path, text);
}

static int setup(void **state)
{
	snprintf(conf_path, sizeof(conf_path), "/tmp/gpb-test-access-%d", (int)getpid());
	int found = 0;
	struct group *g;
	setgrent();
	while (found < 2 && (g = getgrent())) {
		if (g->gr_gid == 0 || g->gr_gid == NOBODY || strlen(g->gr_name) >= 64)
			continue;
		group_gid[found] = g->gr_gid;
		snprintf(group_name[found], sizeof(group_name[found]), "%s", g->gr_name);
		found++;
	}
	endgrent();
	return found == 2 ? 0 : -1;
}

static int teardown(void **state)
{
	unlink(conf_path);
	return 0;
}

/* Starts a daemon on conf_path whose socket any user may open. */
static void start_open(struct th_daemon *d, const char *conf_text)
{
	char text[512];
	snprintf(text, sizeof(text), "socket_mode = 0666\n%s", conf_text);
	write_conf(text);
	const char *extra[] = {"--config", conf_path, NULL};
	th_daemon_start(d, extra);
	assert_int_equal(chmod(d->dir, 0755), 0);
}

/*
 * Runs fn in a child as user nobody (primary group nobody's) with the given
 * supplementary groups; returns its exit status.
 */
static int as_nobody(const gid_t *groups, size_t ngroups, int (*fn)(const char *socket),
                     const char *socket)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (setgroups(ngroups, groups) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
			th_child_exit(99);
		th_child_exit(fn(socket));
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int try_register(gpb_client *c, uint64_t *inst)
{
	struct gpb_register_opts opts = {.name = "r"};
	return gpb_register(c, &opts, inst);
}

static int nobody_reload(const char *socket)
{
	gpb_client *c = NULL;
	char *json = NULL;
	uint64_t inst;
	if (gpb_connect(socket, "nobody", &c) < 0)
		return 10;
	int rc = gpb_request(c, "reload", NULL, &json);
	int ok = rc == GPB_E_PERMISSION && strstr(gpb_last_error(), "permission denied");
	/* Ordinary requests still work for this user. */
	ok = ok && try_register(c, &inst) == 0;
	gpb_disconnect(c);
	return ok ? 0 : 11;
}

/* Admin operations are for root and the admin group only. */
static void test_admin_only(void **state)
{
	struct th_daemon d;
	start_open(&d, "");
	assert_int_equal(as_nobody(NULL, 0, nobody_reload, d.socket), 0);
	gpb_client *root = th_client(&d, "root");
	char *json = NULL;
	assert_int_equal(gpb_request(root, "reload", NULL, &json), 0);
	gpb_string_free(json);
	gpb_disconnect(root);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* gpubrokerctl copied where nobody can run it, wherever the build tree is. */
static struct th_copy ctl_copy;

/* A user who may not open the socket (0660, another group): gpubrokerctl
 * exits with status 4. */
static int nobody_ctl_status(const char *socket)
{
	int devnull = open("/dev/null", O_WRONLY);
	dup2(devnull, STDOUT_FILENO);
	dup2(devnull, STDERR_FILENO);
	char *argv[] = {"gpubrokerctl", "--socket", (char *)socket, "status", NULL};
	th_copy_exec(&ctl_copy, argv);
	return 127;
}

static void test_permission_denied(void **state)
{
	struct th_daemon d;
	th_daemon_start(&d, NULL);
	assert_int_equal(chmod(d.dir, 0755), 0);
	th_copy_make(&ctl_copy, "GPB_CTL");
	int status = as_nobody(NULL, 0, nobody_ctl_status, d.socket);
	th_copy_remove(&ctl_copy);
	assert_int_equal(status, 4);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* What the child allocates: first (which must succeed), then second, which
 * must end with want, with says in the error when it fails. */
static struct {
	uint64_t first, second;
	int want;
	const char *says;
} plan;

static int nobody_allocs(const char *socket)
{
	gpb_client *c = NULL;
	uint64_t inst;
	struct gpb_allocation a, b;
	if (gpb_connect(socket, "grouped", &c) < 0)
		return 10;
	if (try_register(c, &inst) != 0)
		return 11;
	if (gpb_alloc(c, inst, plan.first, 0, &a) != 0)
		return 12;
	int rc = gpb_alloc(c, inst, plan.second, 0, &b);
	if (rc != plan.want)
		return 13;
	if (rc != 0 && !strstr(gpb_last_error(), plan.says))
		return 14;
	gpb_disconnect(c);
	return 0;
}

/* 768 KiB, then 512 KiB more: refused with this cap's figure in the error,
 * or (cap_says NULL) granted. */
static int alloc_over_1mib(const struct th_daemon *d, const gid_t *groups, size_t n,
                           const char *cap_says)
{
	plan.first = 768 << 10;
	plan.second = 512 << 10;
	plan.want = cap_says ? GPB_E_QUOTA : 0;
	plan.says = cap_says;
	return as_nobody(groups, n, nobody_allocs, d->socket);
}

/* A group rule applies through a supplementary group, not only the primary
 * one; a client outside the group is not held to it. */
static void test_group_rule_supplementary(void **state)
{
	char text[256];
	snprintf(text, sizeof(text), "group.%s.cap = 1MiB\n", group_name[0]);
	struct th_daemon d;
	start_open(&d, text);
	assert_int_equal(alloc_over_1mib(&d, &group_gid[0], 1, "may hold 1048576 bytes"), 0);
	assert_int_equal(alloc_over_1mib(&d, &group_gid[1], 1, NULL), 0);
	assert_int_equal(alloc_over_1mib(&d, NULL, 0, NULL), 0);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* Among a client's groups the rule first in the file wins; the user's own
 * rule beats them all, even one that sets only a proportion. */
static void test_group_rule_order(void **state)
{
	char text[256];
	snprintf(text, sizeof(text), "group.%s.cap = 2MiB\ngroup.%s.cap = 1MiB\n", group_name[1],
	         group_name[0]);
	struct th_daemon d;
	start_open(&d, text);
	/* Both groups: the 2 MiB rule, first in the file, holds. */
	assert_int_equal(alloc_over_1mib(&d, group_gid, 2, NULL), 0);
	plan.first = 1536 << 10;
	plan.second = 1 << 20;
	plan.want = GPB_E_QUOTA;
	plan.says = "may hold 2097152 bytes";
	assert_int_equal(as_nobody(group_gid, 2, nobody_allocs, d.socket), 0);
	assert_int_equal(th_daemon_stop(&d), 0);

	/* A rule for the user itself: no group cap at all. */
	snprintf(text, sizeof(text), "group.%s.cap = 1MiB\nuid.%d.proportion = 0.5\n",
	         group_name[0], NOBODY);
	start_open(&d, text);
	assert_int_equal(alloc_over_1mib(&d, &group_gid[0], 1, NULL), 0);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("# not root: cannot run clients as other users\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_admin_only),
	    cmocka_unit_test(test_permission_denied),
	    cmocka_unit_test(test_group_rule_supplementary),
	    cmocka_unit_test(test_group_rule_order),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
