/*
 * test-share-by-name.c - sharing by name end to end: the real daemon, the real
 * library, separate processes and (as root) separate users. Bytes written
 * by one process are read through another's mapping; what was opened
 * outlives its exporter's free and death; names stay within their
 * exporter's uid.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534

static uint64_t reg(gpb_client *c)
{
	struct gpb_register_opts opts = {.name = "share"};
	uint64_t inst;
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	return inst;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 13 + seed);
}

static bool holds(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != (unsigned char)(i * 13 + seed))
			return false;
	}
	return true;
}

static int wait_child(pid_t pid)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Another process of the same user opens a name and sees, and changes,
 * the exporter's bytes; the exporter's free withdraws the name. */
static void test_same_user_processes(void **state)
{
	struct th_daemon d;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "exporter");
	uint64_t inst = reg(c);
	struct gpb_allocation a;
	const size_t size = 96 * 1024;
	assert_int_equal(gpb_alloc(c, inst, size, 0, &a), 0);
	fill(a.ptr, size, 3);
	assert_int_equal(gpb_export(c, a.id, "frame", -1), 0);
	/* The library's own checks and the daemon's refusals. */
	assert_int_equal(gpb_export(c, a.id, "", -1), GPB_E_INVALID);
	assert_int_equal(gpb_export(c, a.id, "again", -1), GPB_E_INVALID);
	assert_non_null(strstr(gpb_last_error(), "already exported"));
	assert_int_equal(gpb_export(c, 0x42, "other", -1), GPB_E_NOT_FOUND);
	/* A name this user exports already: its own code, which the SPANK
	 * plugin's retry reads for partitions; the other allocation stays
	 * unexported. */
	struct gpb_allocation second;
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &second), 0);
	assert_int_equal(gpb_export(c, second.id, "frame", -1), GPB_E_EXISTS);
	assert_non_null(strstr(gpb_last_error(), "-32011 exists"));
	assert_int_equal(gpb_export(c, second.id, "second", -1), 0);
	assert_int_equal(gpb_free(c, second.id), 0);

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpb_client *r = NULL;
		struct gpb_allocation b;
		int rc = 1;
		if (gpb_connect(d.socket, "opener", &r) == 0 &&
		    gpb_open_shared(r, "frame", &b) == 0 && b.id == a.id && b.size == a.size &&
		    holds(b.ptr, size, 3) && gpb_open_shared(r, "nope", &b) == GPB_E_NOT_FOUND) {
			fill(b.ptr, size, 200);
			rc = gpb_detach(r, a.id) == 0 ? 0 : 2;
		}
		gpb_disconnect(r);
		th_child_exit(rc);
	}
	assert_int_equal(wait_child(pid), 0);
	assert_true(holds(a.ptr, size, 200));

	assert_int_equal(gpb_free(c, a.id), 0);
	th_settle(c); /* the free done before another connection looks */
	gpb_client *r = th_client(&d, "late");
	struct gpb_allocation b;
	assert_int_equal(gpb_open_shared(r, "frame", &b), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_unexport(c, "frame"), GPB_E_NOT_FOUND);
	gpb_disconnect(r);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* The exporter is killed after another process opened its memory: the
 * opener keeps the bytes (the daemon counts them as used) until it detaches,
 * and no one else can open them any more. */
static void test_exporter_killed(void **state)
{
	struct th_daemon d;
	int ready[2], go[2];
	(void)state;
	th_daemon_start(&d, NULL);
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(go), 0);
	const size_t size = 256 * 1024;

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpb_client *c = NULL;
		struct gpb_register_opts opts = {.name = "doomed"};
		uint64_t inst;
		struct gpb_allocation a;
		char byte = 1, wait;
		if (gpb_connect(d.socket, "doomed", &c) || gpb_register(c, &opts, &inst) ||
		    gpb_alloc(c, inst, size, 0, &a))
			th_child_exit(1);
		fill(a.ptr, size, 77);
		if (gpb_export(c, a.id, "last-words", -1) || write(ready[1], &byte, 1) != 1)
			th_child_exit(2);
		if (read(go[0], &wait, 1) < 0) /* killed while it waits here */
			th_child_exit(3);
		th_child_exit(4);
	}
	char byte;
	assert_int_equal(read(ready[0], &byte, 1), 1);
	gpb_client *r = th_client(&d, "survivor");
	struct gpb_allocation b;
	assert_int_equal(gpb_open_shared(r, "last-words", &b), 0);
	uint64_t used = th_status_used(r);
	assert_true(used >= size);
	kill(pid, SIGKILL);
	assert_int_equal(wait_child(pid), -1);

	/* The daemon notices the death; poll for the name to go. */
	gpb_client *other = th_client(&d, "other");
	struct gpb_allocation o;
	int rc = 0;
	for (int i = 0; i < 200; i++) {
		rc = gpb_open_shared(other, "last-words", &o);
		if (rc != 0)
			break;
		assert_int_equal(gpb_detach(other, o.id), 0);
		usleep(10000);
	}
	assert_int_equal(rc, GPB_E_NOT_FOUND);
	assert_true(holds(b.ptr, size, 77));
	assert_int_equal(th_status_used(r), used);
	assert_int_equal(gpb_detach(r, b.id), 0);
	assert_int_equal(th_status_used(r), 0);
	struct th_selfcheck sc;
	th_selfcheck(r, &sc);
	assert_int_equal(sc.allocations, 0);
	gpb_disconnect(other);
	gpb_disconnect(r);
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	close(go[1]);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* As user nobody: open what root exported to nobody, by naming root; not
 * by the bare name, which is nobody's own (and free for nobody to use); not
 * what root exported to itself. */
static int nobody_opens(const char *socket)
{
	gpb_client *c = NULL;
	struct gpb_allocation b, own;
	uint64_t inst;
	int rc = 0;
	if (gpb_connect(socket, "nobody", &c) < 0)
		return 10;
	if (gpb_open_shared_from(c, 0, "for-nobody", &b) != 0)
		rc = 11;
	else if (b.size < 3 * 1024 * 1024 || !holds(b.ptr, 3 * 1024 * 1024, 9))
		rc = 12;
	else if (gpb_open_shared_from(c, 0, "for-root", &b) != GPB_E_NOT_FOUND)
		rc = 13;
	else if (gpb_unexport(c, "for-nobody") != GPB_E_NOT_FOUND)
		rc = 14;
	else if (gpb_open_shared(c, "for-nobody", &b) != GPB_E_NOT_FOUND)
		rc = 15;
	else if (gpb_register(c, &(struct gpb_register_opts){.name = "n"}, &inst) != 0 ||
	         gpb_alloc(c, inst, 4096, 0, &own) != 0 ||
	         gpb_export(c, own.id, "for-nobody", -1) != 0)
		rc = 16;
	gpb_disconnect(c);
	return rc;
}

/* Root exports to nobody: only an allocation with a slab of its own. */
static void test_other_user(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	const char *extra[] = {"--socket-mode", "0666", NULL};
	struct th_daemon d;
	th_daemon_start(&d, extra);
	assert_int_equal(chmod(d.dir, 0755), 0);
	gpb_client *c = th_client(&d, "root");
	uint64_t inst = reg(c);
	struct gpb_allocation big, small;
	assert_int_equal(gpb_alloc(c, inst, 4 * 1024 * 1024, 0, &big), 0);
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &small), 0);
	fill(big.ptr, 3 * 1024 * 1024, 9);
	/* Pooled: its slab holds other allocations of root's. */
	assert_int_equal(gpb_export(c, small.id, "for-nobody", NOBODY), GPB_E_INVALID);
	assert_non_null(strstr(gpb_last_error(), "fills a slab of its own"));
	assert_int_equal(gpb_export(c, big.id, "for-nobody", NOBODY), 0);
	if (gpb_export(c, small.id, "for-root", -1) != 0)
		fail_msg("%s", gpb_last_error());

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
			th_child_exit(99);
		th_child_exit(nobody_opens(d.socket));
	}
	assert_int_equal(wait_child(pid), 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_same_user_processes),
	    cmocka_unit_test(test_exporter_killed),
	    cmocka_unit_test(test_other_user),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
