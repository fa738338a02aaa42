/*
 * backend.c - backend selection.
 */
#include "backend.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* True when the CUDA driver library can be loaded. The cuda backend itself
 * is not part of this version; the probe keeps `auto` honest about why it
 * chose sim. */
static bool backend_cuda_driver_present(const char **why)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		*why = dlerror();
		return false;
	}
	dlclose(lib);
	return true;
}

int backend_create(const char *kind, const struct backend_config *cfg, struct backend **out)
{
	const struct backend_ops *ops;
	const char *why = "";
	if (strcmp(kind, "sim") == 0) {
		ops = &backend_sim_ops;
	} else if (strcmp(kind, "cuda") == 0) {
		log_error("backend cuda: not available in this build (the simulated backend is "
		          "--backend sim)");
		return -ENODEV;
	} else if (strcmp(kind, "auto") == 0) {
		if (backend_cuda_driver_present(&why))
			log_warn("backend auto: a CUDA driver is present but this build has no "
			         "cuda backend; using the simulated backend");
		else
			log_info("backend auto: no CUDA driver (%s); using the simulated backend",
			         why ? why : "not found");
		ops = &backend_sim_ops;
	} else {
		return -EINVAL;
	}
	struct backend *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ops = ops;
	b->next_slab_id = 1;
	int rc = ops->init(b, cfg);
	if (rc < 0) {
		free(b);
		return rc;
	}
	*out = b;
	return 0;
}

void backend_destroy(struct backend *b)
{
	if (!b)
		return;
	b->ops->finish(b);
	free(b);
}
