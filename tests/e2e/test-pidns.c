/*
 * test-pidns.c (e2e-pidns) - a daemon in a PID namespace of its own
 * (issue 25, item 8).
 *
 * Started under `unshare --pid --fork`, the daemon sees every client's pid
 * as 0 (SO_PEERCRED gives the peer's pid in the reader's namespace, and the
 * clients' are not in it). pid 0 says nothing about whether the client
 * exited: before the fix the exit watch took it for "exited" and let an
 * evicted client's slabs go at once, while its process could still write
 * there. Now the daemon watches such a client through the pidfd of its
 * socket (SO_PEERPIDFD, Linux 6.5), and where the kernel has none keeps
 * the slabs until it stops.
 *
 * Needs root (a PID namespace); exits 77 otherwise.
 */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

static const char *unshare_path(void)
{
	static const char *const paths[] = {"/usr/bin/unshare", "/bin/unshare"};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	}
	return NULL;
}

/* Whether this kernel gives a socket's peer as a pidfd. */
static bool kernel_has_peer_pidfd(void)
{
	int sv[2], pidfd = -1;
	socklen_t len = sizeof(pidfd);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return false;
	bool ok = getsockopt(sv[0], SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0;
	if (ok)
		close(pidfd);
	close(sv[0]);
	close(sv[1]);
	return ok;
}

/* The pid (in our namespace) of the only child of process parent: the
 * daemon under unshare. */
static pid_t child_of(pid_t parent)
{
	for (int tries = 0; tries < 500; tries++) {
		DIR *dir = opendir("/proc");
		assert_non_null(dir);
		struct dirent *e;
		pid_t found = 0;
		while ((e = readdir(dir))) {
			char path[300], buf[512];
			if (e->d_name[0] < '0' || e->d_name[0] > '9')
				continue;
			snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
			FILE *f = fopen(path, "r");
			if (!f)
				continue;
			size_t n = fread(buf, 1, sizeof(buf) - 1, f);
			fclose(f);
			buf[n] = '\0';
			/* "pid (comm) state ppid": comm may hold blanks. */
			const char *p = strrchr(buf, ')');
			int ppid = 0;
			if (p && sscanf(p + 1, " %*c %d", &ppid) == 1 && ppid == parent)
				found = (pid_t)atoi(e->d_name);
		}
		closedir(dir);
		if (found)
			return found;
		th_sleep_ms(10);
	}
	fail_msg("no child of %d", (int)parent);
	return 0;
}

/* The child's session id, and its pid as the daemon sees it. */
static bool find_client(gpb_client *admin, const char *name, char *session, long *pid)
{
	char *json = NULL;
	assert_int_equal(gpb_request(admin, "clients", NULL, &json), 0);
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	assert_non_null(r);
	bool found = false;
	const cJSON *c;
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(r, "clients"))
	{
		const cJSON *n = cJSON_GetObjectItem(c, "name");
		if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) {
			snprintf(session, 17, "%s", cJSON_GetObjectItem(c, "session")->valuestring);
			*pid = (long)cJSON_GetObjectItem(c, "pid")->valuedouble;
			found = true;
		}
	}
	cJSON_Delete(r);
	return found;
}

static uint64_t ghosts(gpb_client *admin)
{
	struct th_selfcheck sc;
	th_selfcheck(admin, &sc);
	return sc.ghosts;
}

struct ghost_wait {
	gpb_client *admin;
	uint64_t want;
};

static bool ghosts_are(void *arg)
{
	struct ghost_wait *w = arg;
	return ghosts(w->admin) == w->want;
}

/* An evicted client's slabs stay while its process lives, though the
 * daemon sees its pid as 0, and go once it has exited. */
static void test_evicted_kept(void **state)
{
	(void)state;
	const char *unshare = unshare_path();
	const char *const wrapper[] = {unshare, "--pid", "--fork", "--kill-child", NULL};
	struct th_daemon d;
	th_daemon_start_opts(&d, &(struct th_daemon_opts){.wrapper = wrapper});
	pid_t daemon_pid = child_of(d.pid);
	gpb_client *admin = th_client(&d, "admin");

	int rd, wr;
	pid_t pid = th_fork_linked(&rd, &wr);
	if (pid == 0) {
		gpb_client *c = NULL;
		uint64_t inst;
		struct gpb_allocation a;
		char go;
		if (gpb_connect(d.socket, "pidns-child", &c) != 0 ||
		    gpb_register(c, &(struct gpb_register_opts){.name = "pidns-child"}, &inst) !=
		        0 ||
		    gpb_alloc(c, inst, 4096, 0, &a) != 0)
			th_child_exit(81);
		memset(a.ptr, 0x5a, 4096);
		if (write(wr, "r", 1) != 1 || read(rd, &go, 1) != 1)
			th_child_exit(82);
		/* Evicted meanwhile: it still has the slab mapped, and writes. */
		memset(a.ptr, 0x6b, 4096);
		th_child_exit(0);
	}
	char got;
	assert_int_equal(read(rd, &got, 1), 1);

	char session[17];
	long seen_pid = -1;
	assert_true(find_client(admin, "pidns-child", session, &seen_pid));
	/* The namespace works: the daemon cannot name its clients. */
	assert_int_equal(seen_pid, 0);
	char params[64], *json = NULL;
	snprintf(params, sizeof(params), "{\"session\":\"%s\"}", session);
	assert_int_equal(gpb_request(admin, "evict", params, &json), 0);
	gpb_string_free(json);
	assert_true(th_wait_for(th_only_one_client, admin, 10000));
	/* Its session is gone; its process lives on with the mapping. Before
	 * the fix: 0 ghosts, the slab back in the pool at once. */
	assert_int_equal(ghosts(admin), 1);

	assert_int_equal(write(wr, "g", 1), 1);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(rd);
	close(wr);
	struct ghost_wait w = {admin, 0};
	if (kernel_has_peer_pidfd()) {
		/* Watched through its socket's pidfd: let go once it exited. */
		assert_true(th_wait_for(ghosts_are, &w, 10000));
	} else {
		/* Nothing to watch it by: kept until the daemon stops. */
		printf("# this kernel has no SO_PEERPIDFD: the slab stays until the daemon "
		       "stops\n");
		assert_int_equal(ghosts(admin), 1);
	}
	gpb_disconnect(admin);
	/* unshare does not pass SIGTERM on: the daemon (pid 1 of its
	 * namespace, a handler installed) gets it directly, and unshare
	 * exits with its status. */
	assert_int_equal(kill(daemon_pid, SIGTERM), 0);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("# not root: cannot make a PID namespace\n");
		return 77;
	}
	const char *unshare = unshare_path();
	char out[256];
	char *const probe[] = {(char *)unshare, "--pid", "--fork", "true", NULL};
	if (!unshare || th_run(probe, NULL, out, sizeof(out)) != 0) {
		printf("# unshare --pid --fork does not work here\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_evicted_kept),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
