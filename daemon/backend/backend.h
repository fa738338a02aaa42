/*
 * backend.h - where device memory comes from.
 *
 * Each backend is one table of functions. `sim` serves simulated devices whose
 * slabs are sealed memfds (real shared memory a client maps); `cuda` serves
 * real devices through the driver API (backend_cuda.c), loaded at run time.
 */
#ifndef GPB_BACKEND_H
#define GPB_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "schema.h"

#define BACKEND_MAX_DEVICES 64

struct backend_device_info {
	char name[96];
	char uuid[48];
	uint64_t total;
	int cc_major, cc_minor; /* compute capability; 0.0 for sim */
	/* Slabs can come from a stream-ordered memory pool that other
	 * processes import (BACKEND_SLAB_ASYNC, allocator "async"). */
	bool async;
	/* Kept out of the broker's capacity: memory in use (by the daemon's
	 * own context and other processes) when the backend started, and the
	 * reserve for clients' own contexts. 0 for sim. */
	uint64_t in_use;
	uint64_t reserve;
	/* How a client maps the device's slabs: BACKEND_TRANSPORT_* ("vmm",
	 * "ipc"; "memfd" for sim), shown by status and devices. */
	char transport[8];
};

/* The cuda transports (backend_config.cuda_transport, key cuda_transport). */
#define BACKEND_TRANSPORT_AUTO  "auto"                  /* vmm where the device can, else ipc */
#define BACKEND_TRANSPORT_VMM   PROTO_V_TRANSPORT_VMM   /* cuMemCreate, a descriptor per slab */
#define BACKEND_TRANSPORT_IPC   PROTO_V_TRANSPORT_IPC   /* cuMemAlloc, a legacy IPC handle */
#define BACKEND_TRANSPORT_MEMFD PROTO_V_TRANSPORT_MEMFD /* sim: a sealed memfd per slab */

/* slab_create flags. */
#define BACKEND_SLAB_ASYNC 1u /* from the device's stream-ordered pool */

/* A slab: one backend allocation that the pool carves up. */
struct backend_slab {
	uint64_t id; /* unique for the daemon's lifetime */
	int device;
	uint32_t uid; /* the only user whose data it holds */
	uint64_t size;
	unsigned char handle[PROTO_HANDLE_SIZE]; /* what a client opens it by */
	/* Sent to clients with the handle, or -1. sim: the slab's memfd;
	 * cuda async: the memory pool of the slab's uid on the device (pool
	 * true), shared by that uid's async slabs there and owned by the
	 * backend. */
	int fd;
	bool pool;
	/* With pool: the pool's id, unique across daemons (random), by which
	 * a client tells pools apart: the driver's pool descriptors all name
	 * one file (/dev/nvidiactl). */
	uint64_t pool_id;
	/* cuda vmm: fd is the slab's own exported memory (owned by the slab),
	 * imported with cuMemImportFromShareableHandle and mapped. */
	bool vmm;
};

struct backend_config {
	int sim_devices;     /* number of simulated devices */
	uint64_t sim_memory; /* bytes per simulated device */
	/* cuda: bytes per device kept for clients' own contexts; the default
	 * (reserve_explicit false) is bounded by a quarter of the device. */
	uint64_t reserve;
	bool reserve_explicit;
	/* cuda: BACKEND_TRANSPORT_AUTO, _VMM or _IPC (NULL: auto). */
	const char *cuda_transport;
};

/* The default reserve (`reserve`): room for the contexts of a few clients,
 * 300-500 MiB each on current GPUs (docs/cuda.md). */
#define BACKEND_DEFAULT_RESERVE (2ull << 30)

struct backend;

struct backend_ops {
	const char *name;
	int (*init)(struct backend *b, const struct backend_config *cfg);
	void (*finish)(struct backend *b);
	int (*device_info)(struct backend *b, int device, struct backend_device_info *out);
	/* flags: BACKEND_SLAB_* (ASYNC only where info.async). 0, -ENOMEM
	 * (device full), or another negative errno. */
	int (*slab_create)(struct backend *b, int device, uint64_t size, uint32_t uid,
	                   unsigned flags, struct backend_slab **out);
	void (*slab_destroy)(struct backend *b, struct backend_slab *slab);
	/* The bytes a slab_create on the device could get now: a hint (the
	 * pool sizes the last slab a nearly full device has room for by it),
	 * slab_create still decides. 0 and *bytes, or a negative errno. NULL
	 * in a backend that cannot say: the pool then tries sizes down. */
	int (*slab_room)(struct backend *b, int device, uint64_t *bytes);
};

struct backend {
	const struct backend_ops *ops;
	int device_count;
	uint64_t next_slab_id;
	/* Slabs are multiples of this, never smaller: what the device hands
	 * out whole (cuda: 2 MiB, the driver packs smaller cuMemAlloc blocks
	 * together and IPC shares the block). 0: any granule (sim). */
	uint64_t slab_granularity;
	void *priv;
	/* Set with every -EIO a backend returns: the name of what failed, for
	 * error replies (data.backend_error), e.g. "CUDA_ERROR_ECC_UNCORRECTABLE".
	 * Empty when the backend has no better name than "EIO". */
	char last_error[64];
	/* Why init failed, for the log (backend_create prints it). */
	char init_error[256];
};

extern const struct backend_ops backend_sim_ops;
/* Only in builds that found cuda.h (GPB_HAVE_CUDA_H). */
extern const struct backend_ops backend_cuda_ops;

/*
 * Picks and initialises a backend: kind is "auto", "sim" or "cuda". With
 * "auto" the daemon uses cuda when the driver loads, cuInit succeeds and at
 * least one device answers, else sim, and logs which and why.
 * Returns 0 or -ENODEV (cuda requested but unavailable), -EINVAL (unknown
 * kind), or the backend's init error.
 */
int backend_create(const char *kind, const struct backend_config *cfg, struct backend **out);
void backend_destroy(struct backend *b);

#endif
