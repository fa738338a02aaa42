/*
 * alloc.c - the smallest complete gpubroker client.
 *
 * Connects, registers an instance on device 0, allocates a buffer, fills it
 * with a pattern and checks it, prints the allocation and the instance's
 * memory, then frees everything.
 *
 *   gpubroker-example-alloc [--socket PATH] [--size BYTES]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpubroker.h"

static int fail(const char *what, int err)
{
	fprintf(stderr, "gpubroker-example-alloc: %s: %s (%s)\n", what, gpb_strerror(err),
	        gpb_last_error());
	return 1;
}

/* A pattern that differs from byte to byte and from one 256-byte block to
 * the next, so a misplaced mapping would not read back right. */
static unsigned char pattern(uint64_t i)
{
	return (unsigned char)(i * 31 + (i >> 8) * 7 + 1);
}

/* With the sim backend ptr is host memory; with CUDA it would be a device
 * pointer, to be filled with cuMemcpy instead. */
static int fill_and_check(unsigned char *p, uint64_t size)
{
	for (uint64_t i = 0; i < size; i++)
		p[i] = pattern(i);
	for (uint64_t i = 0; i < size; i++) {
		if (p[i] != pattern(i)) {
			fprintf(stderr,
			        "gpubroker-example-alloc: byte %" PRIu64 " reads back %u, "
			        "expected %u\n",
			        i, p[i], pattern(i));
			return 1;
		}
	}
	return 0;
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v == 0)
		return -1;
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"socket", required_argument, NULL, 's'},
	    {"size", required_argument, NULL, 'n'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct gpb_register_opts opts = {.name = "example", .device = 0};
	const char *socket_path = NULL;
	uint64_t size = 1 << 20;
	struct gpb_allocation a;
	struct gpb_mem_info info;
	gpb_client *client;
	uint64_t instance;
	int c, rc, status = 1;

	while ((c = getopt_long(argc, argv, "s:n:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			socket_path = optarg;
			break;
		case 'n':
			if (parse_size(optarg, &size) < 0) {
				fprintf(stderr, "gpubroker-example-alloc: bad size '%s'\n", optarg);
				return 2;
			}
			break;
		case 'h':
			printf("Usage: %s [--socket PATH] [--size BYTES]\n", argv[0]);
			return 0;
		default:
			fprintf(stderr, "Usage: %s [--socket PATH] [--size BYTES]\n", argv[0]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "Usage: %s [--socket PATH] [--size BYTES]\n", argv[0]);
		return 2;
	}

	rc = gpb_connect(socket_path, "gpubroker-example-alloc", &client);
	if (rc < 0)
		return fail("connect", rc);
	rc = gpb_register(client, &opts, &instance);
	if (rc < 0) {
		fail("register", rc);
		goto out;
	}
	rc = gpb_alloc(client, instance, size, 0, &a);
	if (rc < 0) {
		fail("alloc", rc);
		goto out;
	}
	printf("allocation %016" PRIx64 ": device %d, slab %016" PRIx64 ", offset %" PRIu64
	       ", size %" PRIu64 " (requested %" PRIu64 ")\n",
	       a.id, a.device, a.slab, a.offset, a.size, size);
	if (fill_and_check(a.ptr, a.size))
		goto out;
	printf("pattern of %" PRIu64 " bytes written and read back\n", a.size);

	rc = gpb_mem_info(client, instance, &info);
	if (rc < 0) {
		fail("mem_info", rc);
		goto out;
	}
	printf("instance %016" PRIx64 ": cap %" PRIu64 ", used %" PRIu64 ", free %" PRIu64
	       "; device total %" PRIu64 ", free %" PRIu64 "\n",
	       instance, info.cap, info.used, info.free, info.device_total, info.device_free);

	rc = gpb_free(client, a.id);
	if (rc < 0) {
		fail("free", rc);
		goto out;
	}
	rc = gpb_unregister(client, instance);
	if (rc < 0) {
		fail("unregister", rc);
		goto out;
	}
	status = 0;
	printf("ok\n");
out:
	gpb_disconnect(client);
	return status;
}
