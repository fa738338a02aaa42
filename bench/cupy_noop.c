/*
 * cupy_noop.c - a C allocator that does nothing, for bench/cupy_bridge.py:
 * CuPy's CFunctionAllocatorMemory around these functions costs what CuPy's
 * C allocator path costs by itself, with no allocator behind it. Every
 * call hands out the same block; a free keeps it.
 */
#include <stddef.h>

void *gpb_bench_noop_malloc(void *param, size_t size, int device);
void gpb_bench_noop_free(void *param, void *ptr, int device);

static char block[1 << 16] __attribute__((aligned(256)));

void *gpb_bench_noop_malloc(void *param, size_t size, int device)
{
	(void)param;
	(void)device;
	return size <= sizeof(block) ? block : NULL;
}

void gpb_bench_noop_free(void *param, void *ptr, int device)
{
	(void)param;
	(void)ptr;
	(void)device;
}
