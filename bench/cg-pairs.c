/*
 * cg-pairs.c - the client side of bench/callgrind.sh: connects to
 * $GPUBROKER_SOCKET, registers, holds one anchor allocation (the steady
 * state), then runs N gpb_alloc (1 MiB) + gpb_free pairs (N = argv[1]).
 * Built by the script against a build's libgpubroker, so that two trees
 * (before, after) are measured by the same program.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpubroker.h"

int main(int argc, char **argv)
{
	struct gpb_register_opts opts = {.name = "cg-pairs"};
	struct gpb_allocation anchor, a;
	gpb_client *c;
	uint64_t inst;
	long n = argc > 1 ? atol(argv[1]) : 0;

	if (gpb_connect(NULL, "cg-pairs", &c) < 0 || gpb_register(c, &opts, &inst) < 0 ||
	    gpb_alloc(c, inst, 4096, 0, &anchor) < 0) {
		fprintf(stderr, "cg-pairs: %s\n", gpb_last_error());
		return 1;
	}
	for (long i = 0; i < n; i++) {
		if (gpb_alloc(c, inst, 1u << 20, 0, &a) < 0 || gpb_free(c, a.id) < 0) {
			fprintf(stderr, "cg-pairs: %s\n", gpb_last_error());
			return 1;
		}
	}
	gpb_disconnect(c);
	return 0;
}
