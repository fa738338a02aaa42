/*
 * test-gpbs-util.c - the SPANK plugin's pure parts: plugstack arguments,
 * --gpu-mem sizes, Slurm's device lists and GRES detail strings, token files.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpbs_util.h"

static void test_conf(void **state)
{
	struct gpbs_conf c;
	char err[256];
	char *good[] = {"socket=/tmp/x.sock", "statedir=/tmp/st", "gres=vram", "fail_open"};
	char *nogres[] = {"gres="};
	char *bad[][1] = {{"socket=relative"}, {"fail-open"}, {"statedir="}, {"socket="}};

	assert_int_equal(gpbs_conf_parse(&c, 0, NULL, err, sizeof(err)), 0);
	assert_string_equal(c.socket, "");
	assert_string_equal(c.statedir, GPBS_DEFAULT_STATEDIR);
	assert_string_equal(c.gres, "gpumem");
	assert_int_equal(c.fail_open, 0);
	assert_int_equal(gpbs_conf_parse(&c, 4, good, err, sizeof(err)), 0);
	assert_string_equal(c.socket, "/tmp/x.sock");
	assert_string_equal(c.statedir, "/tmp/st");
	assert_string_equal(c.gres, "vram");
	assert_int_equal(c.fail_open, 1);
	assert_int_equal(gpbs_conf_parse(&c, 1, nogres, err, sizeof(err)), 0);
	assert_string_equal(c.gres, "");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(gpbs_conf_parse(&c, 1, bad[i], err, sizeof(err)), -1);
		assert_non_null(strstr(err, bad[i][0]));
	}
}

static void test_size(void **state)
{
	uint64_t v = 0;

	assert_int_equal(gpbs_size_parse("1G", &v), 0);
	assert_true(v == 1ull << 30);
	assert_int_equal(gpbs_size_parse("512M", &v), 0);
	assert_true(v == 512ull << 20);
	assert_int_equal(gpbs_size_parse("3GiB", &v), 0);
	assert_true(v == 3ull << 30);
	assert_int_equal(gpbs_size_parse("2T", &v), 0);
	assert_true(v == 2ull << 40);
	assert_int_equal(gpbs_size_parse("1.5G", &v), 0);
	assert_true(v == 3ull << 29);
	assert_int_equal(gpbs_size_parse("4096", &v), 0);
	assert_true(v == 4096);
	assert_int_equal(gpbs_size_parse("4096B", &v), 0);
	assert_int_equal(gpbs_size_parse("16KB", &v), 0);
	assert_true(v == 16384);
	const char *bad[] = {"",          "0",   "0G",   "G",  "-1G",
	                     "0.5B",      "1 G", "1GB2", "1X", "18446744073709551616",
	                     "16777216T", NULL};
	for (int i = 0; bad[i]; i++) {
		v = 7;
		assert_int_equal(gpbs_size_parse(bad[i], &v), -1);
		assert_true(v == 7);
	}
	assert_int_equal(gpbs_size_parse(NULL, &v), -1);
}

static void test_devices(void **state)
{
	int d[8];

	assert_int_equal(gpbs_devices_parse("", d, 8), 0);
	assert_int_equal(gpbs_devices_parse("3", d, 8), 1);
	assert_int_equal(d[0], 3);
	assert_int_equal(gpbs_devices_parse("0,2-4,7", d, 8), 5);
	assert_int_equal(d[1], 2);
	assert_int_equal(d[3], 4);
	assert_int_equal(d[4], 7);
	const char *bad[] = {"a", "1,", ",1", "3-1", "1,1", "0-8", "1;2", "1-", "9999999", NULL};
	for (int i = 0; bad[i]; i++)
		assert_int_equal(gpbs_devices_parse(bad[i], d, 8), -1);
}

static void test_gres(void **state)
{
	uint64_t v = 0;

	assert_int_equal(gpbs_gres_count("gpumem(CNT:1073741824)", "gpumem", &v), 1);
	assert_true(v == 1073741824);
	assert_int_equal(gpbs_gres_count("gpu:a100:2(IDX:0-1),gpumem:big(CNT:42)", "gpumem", &v),
	                 1);
	assert_true(v == 42);
	assert_int_equal(gpbs_gres_count("gpu:2(IDX:0,1),gpumemx(CNT:5)", "gpumem", &v), 0);
	assert_int_equal(gpbs_gres_count("gpu:2(IDX:0-1)", "gpumem", &v), 0);
	assert_int_equal(gpbs_gres_count("", "gpumem", &v), 0);
	assert_int_equal(gpbs_gres_count(NULL, "gpumem", &v), 0);
	assert_int_equal(gpbs_gres_count("gpumem(IDX:0)", "gpumem", &v), -1);
	assert_int_equal(gpbs_gres_count("gpumem(CNT:x)", "gpumem", &v), -1);
	assert_int_equal(gpbs_gres_count("gpumem(CNT:99999999999999999999)", "gpumem", &v), -1);
}

/* The job's GPUs on a node as slurmctld records them (`scontrol show job -d`). */
static void test_gres_devices(void **state)
{
	int d[8];

	/* As Slurm 22.05 printed it in the suite. */
	assert_int_equal(gpbs_gres_devices("gpu:2(IDX:0-1),gpumem(CNT:1073741824)", "gpu", d, 8),
	                 2);
	assert_int_equal(d[0], 0);
	assert_int_equal(d[1], 1);
	assert_int_equal(gpbs_gres_devices("gpumem(CNT:1),gpu:1(IDX:1)", "gpu", d, 8), 1);
	assert_int_equal(d[0], 1);
	/* A comma inside the parentheses is the list's, not the next entry's. */
	assert_int_equal(gpbs_gres_devices("gpu:2(IDX:0,3),gpumem(CNT:5)", "gpu", d, 8), 2);
	assert_int_equal(d[1], 3);
	/* Typed entries add up; another GRES whose name starts alike does not. */
	assert_int_equal(
	    gpbs_gres_devices("gpu:a100:1(IDX:0),gpus:1(IDX:4),gpu:v100:2(IDX:2-3)", "gpu", d, 8),
	    3);
	assert_int_equal(d[0], 0);
	assert_int_equal(d[1], 2);
	assert_int_equal(d[2], 3);
	assert_int_equal(gpbs_devices_index(d, 3, 3), 2);
	assert_int_equal(gpbs_devices_index(d, 3, 7), -1);
	/* No GPU, or GPUs without device files (no IDX): none named. */
	assert_int_equal(gpbs_gres_devices("gpumem(CNT:5)", "gpu", d, 8), 0);
	assert_int_equal(gpbs_gres_devices("gpu(CNT:2)", "gpu", d, 8), 0);
	assert_int_equal(gpbs_gres_devices("", "gpu", d, 8), 0);
	assert_int_equal(gpbs_gres_devices(NULL, "gpu", d, 8), 0);
	/* Malformed, or more than fit. */
	assert_int_equal(gpbs_gres_devices("gpu:1(IDX:x)", "gpu", d, 8), -1);
	assert_int_equal(gpbs_gres_devices("gpu:1(IDX:N/A)", "gpu", d, 8), -1);
	assert_int_equal(gpbs_gres_devices("gpu:1(IDX:0", "gpu", d, 8), -1);
	assert_int_equal(gpbs_gres_devices("gpu:9(IDX:0-8)", "gpu", d, 8), -1);
	assert_int_equal(gpbs_gres_devices("gpu:a:5(IDX:0-4),gpu:b:4(IDX:5-8)", "gpu", d, 8), -1);
}

static void test_token_files(void **state)
{
	char dir[] = "/tmp/gpbs-test.XXXXXX", sub[64], tok[65], path[128];
	const char *t = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	struct stat st;
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/state", dir);
	assert_int_equal(gpbs_token_read(sub, 7, tok), -1);
	assert_int_equal(errno, ENOENT);
	fd = gpbs_lock(sub, 7);
	assert_true(fd >= 0);
	assert_int_equal(stat(sub, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(gpbs_token_write(sub, 7, t), 0);
	gpbs_unlock(fd);
	snprintf(path, sizeof(path), "%s/7.token", sub);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(gpbs_token_read(sub, 7, tok), 0);
	assert_string_equal(tok, t);
	/* A token file that is not 64 hex characters is refused. */
	assert_int_equal(gpbs_token_write(sub, 8, "zz"), 0);
	assert_int_equal(gpbs_token_read(sub, 8, tok), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(gpbs_token_remove(sub, 8), 0);
	assert_int_equal(gpbs_token_remove(sub, 7), 0);
	assert_int_equal(gpbs_token_remove(sub, 7), 0); /* already gone: fine */
	assert_int_equal(gpbs_token_read(sub, 7, tok), -1);
	assert_int_equal(rmdir(sub), 0); /* lock and token files all removed */
	/* A state folder others may write is refused. */
	assert_int_equal(mkdir(sub, 0777), 0);
	assert_int_equal(chmod(sub, 0777), 0);
	assert_int_equal(gpbs_token_write(sub, 7, t), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(gpbs_lock(sub, 7), -1);
	assert_int_equal(rmdir(sub), 0);
	assert_int_equal(rmdir(dir), 0);
}

static void test_name(void **state)
{
	char n[32];

	gpbs_partition_name(4294967295u, n, sizeof(n));
	assert_string_equal(n, "slurm-4294967295");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_conf),         cmocka_unit_test(test_size),
	    cmocka_unit_test(test_devices),      cmocka_unit_test(test_gres),
	    cmocka_unit_test(test_gres_devices), cmocka_unit_test(test_token_files),
	    cmocka_unit_test(test_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
