/*
 * backend_sim.c - simulated devices backed by sealed memfds.
 *
 * A slab is a memfd of the slab's size: sparse until touched, so a 16 GiB
 * simulated device costs nothing until clients write. Clients receive the
 * descriptor over the socket (SCM_RIGHTS) and map it, so bytes written by one
 * process are read by another: cross-process behaviour is real. The size is
 * sealed so no client can shrink a slab under another mapping (SIGBUS).
 * New memfds are zero-filled, and a slab serves one uid only, so no scrub is
 * needed between users.
 */
#include "backend.h"
#include "log.h"
#include "memfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define SIM_HANDLE_MAGIC "GPBSIM01"

struct sim_device {
	uint64_t total;
	uint64_t reserved; /* bytes in live slabs */
};

struct sim {
	struct sim_device dev[BACKEND_MAX_DEVICES];
};

static int sim_init(struct backend *b, const struct backend_config *cfg)
{
	if (cfg->sim_devices < 1 || cfg->sim_devices > BACKEND_MAX_DEVICES || cfg->sim_memory == 0)
		return -EINVAL;
	struct sim *sim = calloc(1, sizeof(*sim));
	if (!sim)
		return -ENOMEM;
	for (int i = 0; i < cfg->sim_devices; i++)
		sim->dev[i].total = cfg->sim_memory;
	b->priv = sim;
	b->device_count = cfg->sim_devices;
	return 0;
}

static void sim_finish(struct backend *b)
{
	free(b->priv);
	b->priv = NULL;
}

static int sim_device_info(struct backend *b, int device, struct backend_device_info *out)
{
	struct sim *sim = b->priv;
	if (device < 0 || device >= b->device_count)
		return -ENODEV;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "gpubroker simulated device %d", device);
	/* Stable across restarts so scripts can address a sim device by UUID. */
	snprintf(out->uuid, sizeof(out->uuid), "GPU-5117d000-0000-4000-8000-%012x", device);
	out->total = sim->dev[device].total;
	snprintf(out->transport, sizeof(out->transport), "%s", BACKEND_TRANSPORT_MEMFD);
	return 0;
}

static int sim_slab_create(struct backend *b, int device, uint64_t size, uint32_t uid,
                           unsigned flags, struct backend_slab **out)
{
	struct sim *sim = b->priv;
	if (device < 0 || device >= b->device_count)
		return -ENODEV;
	/* No stream-ordered pools here (info.async is false). */
	if (flags & BACKEND_SLAB_ASYNC)
		return -EOPNOTSUPP;
	struct sim_device *dev = &sim->dev[device];
	if (size > dev->total - dev->reserved)
		return -ENOMEM;
	struct backend_slab *slab = calloc(1, sizeof(*slab));
	if (!slab)
		return -ENOMEM;
	int rc;
	int fd = memfile_create("gpubroker-slab", size);
	if (fd < 0) {
		rc = fd;
		goto fail;
	}
	slab->id = b->next_slab_id++;
	slab->device = device;
	slab->uid = uid;
	slab->size = size;
	slab->fd = fd;
	/* The handle's shape follows CUipcMemHandle: 64 opaque bytes, here a
	 * magic, the slab's identity and random bytes. */
	memcpy(slab->handle, SIM_HANDLE_MAGIC, 8);
	memcpy(slab->handle + 8, &slab->id, 8);
	memcpy(slab->handle + 16, &size, 8);
	if (getrandom(slab->handle + 24, PROTO_HANDLE_SIZE - 24, 0) !=
	    (ssize_t)(PROTO_HANDLE_SIZE - 24)) {
		rc = -errno;
		close(fd);
		goto fail;
	}
	dev->reserved += size;
	*out = slab;
	return 0;
fail:
	free(slab);
	/* Host memory or descriptor exhaustion is not a full device: report
	 * a backend failure and say what the host ran out of. */
	log_warn("sim: cannot create a slab of %llu bytes: %s", (unsigned long long)size,
	         strerror(-rc));
	snprintf(b->last_error, sizeof(b->last_error), "%s", strerrorname_np(-rc));
	return -EIO;
}

static void sim_slab_destroy(struct backend *b, struct backend_slab *slab)
{
	struct sim *sim = b->priv;
	sim->dev[slab->device].reserved -= slab->size;
	close(slab->fd);
	free(slab);
}

static int sim_slab_room(struct backend *b, int device, uint64_t *bytes)
{
	struct sim *sim = b->priv;
	if (device < 0 || device >= b->device_count)
		return -ENODEV;
	/* Exactly what sim_slab_create accepts. */
	*bytes = sim->dev[device].total - sim->dev[device].reserved;
	return 0;
}

const struct backend_ops backend_sim_ops = {
    .name = "sim",
    .init = sim_init,
    .finish = sim_finish,
    .device_info = sim_device_info,
    .slab_create = sim_slab_create,
    .slab_destroy = sim_slab_destroy,
    .slab_room = sim_slab_room,
};
