/*
 * torchcxx.cc - libgpubroker-torch: gpb_torch_alloc() for PyTorch's
 * pluggable allocator, throwing where libgpubroker returns NULL.
 *
 * Why C++ here, in a C project: PyTorch's CUDAPluggableAllocator does not
 * look at what the allocation function returns. A NULL from it becomes a
 * tensor whose storage is address 0 (seen on an H200 with PyTorch 2.11: a
 * refused torch.empty() "succeeded"), and the first kernel that touches it
 * faults the context. The only refusal PyTorch hears is a C++ exception
 * thrown through its std::function, which it turns into a Python
 * RuntimeError (as it does for RMM's std::bad_alloc). So this library wraps
 * the three entry points and throws; everything else stays in libgpubroker,
 * which this library links (the same copy the Python package loaded, by
 * its soname), so gpubroker.torch.memory_info() sees the same instances.
 *
 * Exported (libgpubroker-torch.sym): gpb_torch_cxx_alloc, gpb_torch_cxx_free,
 * gpb_torch_cxx_free3, with gpb_torch_alloc's, gpb_torch_free's and
 * gpb_torch_free3's arguments (include/gpubroker.h).
 */
#include <stdexcept>
#include <string>

#include <sys/types.h>

#include "gpubroker.h"

/* The build hides every symbol; these three are the library. */
#define TORCHCXX_EXPORT __attribute__((visibility("default")))

extern "C" {
TORCHCXX_EXPORT void *gpb_torch_cxx_alloc(ssize_t size, int device, void *stream);
TORCHCXX_EXPORT void gpb_torch_cxx_free(void *ptr, ssize_t size, int device, void *stream);
TORCHCXX_EXPORT void gpb_torch_cxx_free3(void *ptr, ssize_t size, void *stream);
}

/* gpb_torch_alloc(), or a std::runtime_error whose what() is "gpubroker:
 * " and gpb_last_error() (the daemon's reason: a cap, the device full, no
 * daemon). @size 0 is no refusal: PyTorch asks for 0 bytes for an empty
 * tensor and takes NULL for it, as from cudaMalloc(0). */
void *gpb_torch_cxx_alloc(ssize_t size, int device, void *stream)
{
	void *ptr = gpb_torch_alloc(size, device, stream);

	if (!ptr && size != 0)
		throw std::runtime_error(std::string("gpubroker: ") + gpb_last_error());
	return ptr;
}

/* Frees never throw: PyTorch calls them from destructors. */
void gpb_torch_cxx_free(void *ptr, ssize_t size, int device, void *stream)
{
	gpb_torch_free(ptr, size, device, stream);
}

void gpb_torch_cxx_free3(void *ptr, ssize_t size, void *stream)
{
	gpb_torch_free3(ptr, size, stream);
}
