/*
 * slurm-client.c - the program the slurm suite runs inside Slurm jobs. It
 * links libgpubroker and finds the broker and its partition the way any
 * job's program does: GPUBROKER_SOCKET and GPUBROKER_TOKEN, which the SPANK
 * plugin put in the job's environment.
 *
 *   gpb-slurm-client check SIZE   the job's partition is SIZE bytes: mem_info
 *                                 reports it as the device's total; SIZE can
 *                                 be allocated and not a chunk more; in
 *                                 active mode a 1/4 registration is capped
 *                                 at SIZE/4 and the auto pool gets the rest
 *   gpb-slurm-client hold SIZE    allocates SIZE, touches it, says "held",
 *                                 and waits to be killed
 *   gpb-slurm-client churn SIZE   allocates and frees SIZE in a loop (says
 *                                 "churning" once), until killed
 *
 * GPB_DEVICE: the broker's device index to register on (default 0).
 *
 * Exit status 0 when every check holds, 1 (with the reason on stderr) when
 * one does not.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpubroker.h"

#define CHUNK (64ull << 20)

static int fail(const char *what, int err)
{
	fprintf(stderr, "gpb-slurm-client: %s: %s (%s)\n", what, gpb_strerror(err),
	        gpb_last_error());
	return 1;
}

static int instance(gpb_client *c, const char *name, double proportion, uint64_t *id)
{
	struct gpb_register_opts o;

	memset(&o, 0, sizeof(o));
	o.name = name;
	o.device = getenv("GPB_DEVICE") ? atoi(getenv("GPB_DEVICE")) : 0;
	o.proportion = proportion;
	return gpb_register(c, &o, id);
}

/* Allocates CHUNKs on @inst until refused; returns the bytes it got. */
static uint64_t fill(gpb_client *c, uint64_t inst, uint64_t *ids, int max, int *n, int *why)
{
	struct gpb_allocation a;
	uint64_t got = 0;

	*why = 0;
	while (*n < max) {
		int rc = gpb_alloc(c, inst, CHUNK, 0, &a);

		if (rc < 0) {
			*why = rc;
			break;
		}
		memset(a.ptr, 0x5a, 4096);
		ids[(*n)++] = a.id;
		got += a.size;
	}
	return got;
}

static int check(gpb_client *c, uint64_t size)
{
	uint64_t ids[1024], a = 0, b = 0, got;
	struct gpb_instance_info ia, ib;
	struct gpb_mem_info mi;
	int n = 0, why, rc;

	if ((rc = instance(c, "slurm-a", 0, &a)) < 0)
		return fail("register", rc);
	if ((rc = gpb_mem_info(c, a, &mi)) < 0)
		return fail("mem_info", rc);
	printf("total %" PRIu64 " free %" PRIu64 "\n", mi.device_total, mi.device_free);
	if (mi.device_total != size) {
		fprintf(stderr,
		        "gpb-slurm-client: the device's total is %" PRIu64
		        ", not the partition's %" PRIu64 "\n",
		        mi.device_total, size);
		return 1;
	}
	got = fill(c, a, ids, 1024, &n, &why);
	printf("allocated %" PRIu64 " then %s\n", got, gpb_strerror(why));
	if (got != size || (why != GPB_E_OUT_OF_MEMORY && why != GPB_E_QUOTA)) {
		fprintf(stderr,
		        "gpb-slurm-client: allocated %" PRIu64 " of a %" PRIu64
		        " partition, then %s\n",
		        got, size, gpb_strerror(why));
		return 1;
	}
	for (int i = 0; i < n; i++)
		if ((rc = gpb_free(c, ids[i])) < 0)
			return fail("free", rc);
	n = 0;

	/* The policy, relative to the partition: a quarter for b, the rest
	 * to the auto pool (a), in active mode. */
	if ((rc = instance(c, "slurm-b", 0.25, &b)) < 0)
		return fail("register b", rc);
	if ((rc = gpb_instance_info(c, a, &ia)) < 0 || (rc = gpb_instance_info(c, b, &ib)) < 0)
		return fail("instance_info", rc);
	printf("cap a %" PRIu64 " b %" PRIu64 "\n", ia.cap, ib.cap);
	if (ib.cap != size / 4 || ia.cap != size - size / 4) {
		fprintf(stderr,
		        "gpb-slurm-client: caps %" PRIu64 " and %" PRIu64 ", expected %" PRIu64
		        " and %" PRIu64 " (3/4 and 1/4 of the "
		        "partition, active mode)\n",
		        ia.cap, ib.cap, size - size / 4, size / 4);
		return 1;
	}
	got = fill(c, b, ids, 1024, &n, &why);
	printf("b allocated %" PRIu64 " then %s\n", got, gpb_strerror(why));
	if (got != size / 4 || why != GPB_E_QUOTA) {
		fprintf(stderr,
		        "gpb-slurm-client: b allocated %" PRIu64 " of its %" PRIu64
		        " cap, then %s\n",
		        got, size / 4, gpb_strerror(why));
		return 1;
	}
	printf("ok\n");
	return 0;
}

static int hold(gpb_client *c, uint64_t size, int churn)
{
	struct gpb_allocation al;
	uint64_t inst;
	int rc, said = 0;

	if ((rc = instance(c, "slurm-hold", 0, &inst)) < 0)
		return fail("register", rc);
	for (;;) {
		if ((rc = gpb_alloc(c, inst, size, 0, &al)) < 0)
			return fail("alloc", rc);
		memset(al.ptr, 0xa5, al.size < 65536 ? al.size : 65536);
		if (!said) {
			printf(churn ? "churning\n" : "held\n");
			fflush(stdout);
			said = 1;
		}
		if (!churn)
			for (;;)
				pause();
		if ((rc = gpb_free(c, al.id)) < 0)
			return fail("free", rc);
	}
}

int main(int argc, char **argv)
{
	gpb_client *c = NULL;
	uint64_t size;
	char *end;
	int rc;

	if (argc != 3 || (size = strtoull(argv[2], &end, 0)) == 0 || *end) {
		fprintf(stderr, "usage: gpb-slurm-client check|hold|churn BYTES\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((rc = gpb_connect(NULL, "slurm-client", &c)) < 0)
		return fail("connect", rc);
	if (strcmp(argv[1], "check") == 0)
		rc = check(c, size);
	else if (strcmp(argv[1], "hold") == 0 || strcmp(argv[1], "churn") == 0)
		rc = hold(c, size, argv[1][0] == 'c');
	else
		rc = 2;
	gpb_disconnect(c);
	return rc;
}
