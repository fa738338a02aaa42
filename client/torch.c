/*
 * torch.c - PyTorch's pluggable allocator over the broker (gpb_torch_*,
 * include/gpubroker.h): fwalloc.h's allocator for PyTorch, its settings
 * $GPUBROKER_TORCH_*, in stream order on the stream PyTorch passes.
 */
#include "config.h"

#include <sys/types.h>

#include "error.h"
#include "export.h"
#include "fwalloc.h"

static struct fwalloc torch_fw = FWALLOC_INIT("torch", "GPUBROKER_TORCH_", "gpb_torch_alloc");

GPB_EXPORT void *gpb_torch_alloc(ssize_t size, int device, void *stream)
{
	void *ptr = NULL;

	error_clear();
	if (size <= 0) {
		if (size < 0)
			error_set(GPB_E_INVALID, "gpb_torch_alloc: size %zd", size);
		return NULL;
	}
	/* In stream order on PyTorch's stream, as its own caching allocator
	 * serves blocks (a tensor used on another stream is PyTorch's
	 * record_stream's business): freed on the same stream, the block is
	 * served again at once (gpb_alloc_async). */
	fwalloc_alloc(&torch_fw, (size_t)size, device, stream, true, &ptr);
	return ptr;
}

GPB_EXPORT void gpb_torch_free3(void *ptr, ssize_t size, void *stream)
{
	(void)size;
	error_clear();
	if (ptr)
		fwalloc_free(&torch_fw, ptr, stream, true);
}

GPB_EXPORT void gpb_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
	(void)device;
	gpb_torch_free3(ptr, size, stream);
}

GPB_EXPORT int gpb_torch_mem_info(int device, uint64_t *instance, struct gpb_mem_info *out)
{
	error_clear();
	return fwalloc_mem_info(&torch_fw, device, instance, out);
}

GPB_EXPORT int gpb_torch_stats(int device, struct gpb_framework_stats *out)
{
	error_clear();
	return fwalloc_stats(&torch_fw, device, out);
}

GPB_EXPORT int gpb_torch_reset_peak(int device)
{
	error_clear();
	return fwalloc_reset_peak(&torch_fw, device);
}
