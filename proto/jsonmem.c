/*
 * jsonmem.c - counting allocator hooks for cJSON (see jsonmem.h).
 *
 * The counter is atomic because the client library may build JSON on several
 * threads of a test program; relaxed ordering suffices for a tally read at
 * exit.
 */
#include "jsonmem.h"

#include <stdlib.h>

#include <cjson/cJSON.h>

static long jsonmem_live;
static long jsonmem_fail_in = -1; /* allocations before the one that fails; < 0: none */

static void *jsonmem_malloc(size_t size)
{
	if (__atomic_load_n(&jsonmem_fail_in, __ATOMIC_RELAXED) >= 0 &&
	    __atomic_sub_fetch(&jsonmem_fail_in, 1, __ATOMIC_RELAXED) == -1)
		return NULL;
	void *p = malloc(size);
	if (p)
		__atomic_add_fetch(&jsonmem_live, 1, __ATOMIC_RELAXED);
	return p;
}

static void jsonmem_free(void *p)
{
	if (!p)
		return;
	__atomic_sub_fetch(&jsonmem_live, 1, __ATOMIC_RELAXED);
	free(p);
}

void jsonmem_install(void)
{
	cJSON_Hooks hooks = {.malloc_fn = jsonmem_malloc, .free_fn = jsonmem_free};
	cJSON_InitHooks(&hooks);
}

void jsonmem_fail_once(long n)
{
	__atomic_store_n(&jsonmem_fail_in, n, __ATOMIC_RELAXED);
}

long jsonmem_outstanding(void)
{
	return __atomic_load_n(&jsonmem_live, __ATOMIC_RELAXED);
}
