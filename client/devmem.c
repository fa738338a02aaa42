/*
 * devmem.c - host copies to and from gpubroker memory, and the process's
 * slab mapping counts.
 */
#include "error.h"
#include "export.h"
#include "slab.h"

GPB_EXPORT int gpb_copy_to_device(void *dst, const void *src, size_t size, void *stream)
{
	error_clear();
	return slab_cache_copy(dst, src, size, true, stream);
}

GPB_EXPORT int gpb_copy_from_device(void *dst, const void *src, size_t size, void *stream)
{
	error_clear();
	return slab_cache_copy(dst, src, size, false, stream);
}

GPB_EXPORT int gpb_mapping_stats(struct gpb_mapping_stats *out)
{
	error_clear();
	if (!out)
		return error_set(GPB_E_INVALID, "gpb_mapping_stats: out is NULL");
	slab_cache_counts(&out->opens, &out->closes, &out->open_now);
	return 0;
}
