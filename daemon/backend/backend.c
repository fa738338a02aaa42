/*
 * backend.c - backend selection.
 */
#include "backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"

static struct backend *backend_new(const struct backend_ops *ops)
{
	struct backend *b = calloc(1, sizeof(*b));
	if (b) {
		b->ops = ops;
		b->next_slab_id = 1;
	}
	return b;
}

/* Initialises a backend of ops; 0 with *out, or init's error with b freed
 * and the reason in why (when not NULL). */
static int backend_try(const struct backend_ops *ops, const struct backend_config *cfg,
                       struct backend **out, char *why, size_t why_len)
{
	struct backend *b = backend_new(ops);
	if (!b)
		return -ENOMEM;
	int rc = ops->init(b, cfg);
	if (rc < 0) {
		if (why)
			snprintf(why, why_len, "%s",
			         b->init_error[0] ? b->init_error : strerror(-rc));
		free(b);
		return rc;
	}
	*out = b;
	return 0;
}

int backend_create(const char *kind, const struct backend_config *cfg, struct backend **out)
{
	char why[sizeof(((struct backend *)0)->init_error)] = "";
	int rc;
	if (strcmp(kind, "sim") == 0)
		return backend_try(&backend_sim_ops, cfg, out, NULL, 0);
	if (strcmp(kind, "cuda") != 0 && strcmp(kind, "auto") != 0)
		return -EINVAL;
#if GPB_HAVE_CUDA_H
	rc = backend_try(&backend_cuda_ops, cfg, out, why, sizeof(why));
	if (rc == 0) {
		log_info("backend %s: using the cuda backend", kind);
		return 0;
	}
#else
	rc = -ENODEV;
	snprintf(why, sizeof(why),
	         "this gpubrokerd was built without cuda.h (meson option "
	         "cudatoolkit)");
#endif
	if (strcmp(kind, "cuda") == 0) {
		log_error("backend cuda: unavailable: %s (the simulated backend is --backend sim)",
		          why);
		return rc == -ENOMEM ? rc : -ENODEV;
	}
	/* No driver at all is the normal case on a machine without a GPU; a
	 * driver that loads but serves nothing deserves a warning. */
	if (strncmp(why, "cannot load ", 12) == 0)
		log_info("backend auto: no CUDA driver (%s); using the simulated backend", why);
	else
		log_warn("backend auto: the CUDA driver is present but unusable (%s); using the "
		         "simulated backend",
		         why);
	return backend_try(&backend_sim_ops, cfg, out, NULL, 0);
}

void backend_destroy(struct backend *b)
{
	if (!b)
		return;
	b->ops->finish(b);
	free(b);
}
