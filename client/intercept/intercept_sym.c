/*
 * intercept_sym.c - how a program reaches the interposer's entry points
 * (intercept.h), and how the interposer reaches the driver's.
 *
 * - Linked with -lcuda: the preloaded library's symbols come first.
 * - dlsym on a libcuda.so.1 handle: dlsym itself is interposed; a name of
 *   ours that the handle has is answered with ours. Calls from the
 *   broker's own code (this library and any libgpubroker in the process)
 *   get the driver's: the client below loads libcuda.so.1 the same way.
 * - cuGetProcAddress (libcudart, cuda-bindings): ours is what dlsym and
 *   the driver's cuGetProcAddress hand out; it asks the driver, then
 *   answers ours for an entry point we serve when the driver's answer is
 *   the very variant ours implements (the same ABI: a later _v3 would not
 *   be), or when the driver has none and ours needs none of the driver's.
 *
 * dlsym's RTLD_NEXT and RTLD_DEFAULT are relative to the caller, which
 * glibc reads from the return address: forwarded from here they would be
 * relative to this library. RTLD_NEXT is therefore walked here from the
 * caller's object on; RTLD_DEFAULT falls back to the caller's own scope
 * (an object loaded RTLD_LOCAL sees its dependencies).
 */
#include "config.h"

#include "intercept.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define ICPT_EXPORT __attribute__((visibility("default")))

#undef cuGetProcAddress
ICPT_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                                      cuuint64_t flags);

/* ---- the real dlsym ----------------------------------------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym_fn;

void *icpt_real_dlsym(void *handle, const char *name)
{
	dlsym_fn fn = __atomic_load_n(&real_dlsym_fn, __ATOMIC_ACQUIRE);

	if (!fn) {
		/* dlvsym is not interposed: glibc's dlsym of 2.34 on, else the
		 * older version. */
		fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (!fn)
			fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		if (!fn)
			return NULL;
		__atomic_store_n(&real_dlsym_fn, fn, __ATOMIC_RELEASE);
	}
	return fn(handle, name);
}

/* ---- the driver's entry points -------------------------------------------------- */

static struct icpt_real real;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

#define R(field, name)                                                                             \
	{                                                                                          \
		offsetof(struct icpt_real, field), name                                            \
	}
static const struct {
	size_t offset;
	const char *name;
} real_syms[] = {
    R(Init, "cuInit"),
    R(CtxGetDevice, "cuCtxGetDevice"),
    R(MemAlloc, "cuMemAlloc_v2"),
    R(MemAllocPitch, "cuMemAllocPitch_v2"),
    R(MemFree, "cuMemFree_v2"),
    R(MemAllocAsync, "cuMemAllocAsync"),
    R(MemAllocFromPoolAsync, "cuMemAllocFromPoolAsync"),
    R(MemFreeAsync, "cuMemFreeAsync"),
    R(MemGetInfo, "cuMemGetInfo_v2"),
    R(DeviceTotalMem, "cuDeviceTotalMem_v2"),
    R(MemGetAddressRange, "cuMemGetAddressRange_v2"),
    R(PointerGetAttribute, "cuPointerGetAttribute"),
    R(PointerGetAttributes, "cuPointerGetAttributes"),
    R(MemCreate, "cuMemCreate"),
    R(MemAllocManaged, "cuMemAllocManaged"),
    R(IpcGetMemHandle, "cuIpcGetMemHandle"),
    R(GetProcAddress, "cuGetProcAddress"),
    R(GetProcAddress_v2, "cuGetProcAddress_v2"),
};
#undef R

static void real_load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

	if (!lib)
		lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return; /* every entry point then answers as a driver-less one */
	real.lib = lib;
	for (size_t i = 0; i < sizeof(real_syms) / sizeof(real_syms[0]); i++) {
		void *fn = icpt_real_dlsym(lib, real_syms[i].name);
		memcpy((char *)&real + real_syms[i].offset, &fn, sizeof(fn));
	}
}

const struct icpt_real *icpt_real(void)
{
	pthread_once(&real_once, real_load);
	return &real;
}

/* ---- ours ------------------------------------------------------------------------ */

/* An entry point we serve: its exported name, the base name and version
 * cuGetProcAddress asks by (NULL: by export only, a _ptsz variant), and
 * whether ours calls the driver's (then the driver must have it). */
struct icpt_sym {
	const char *export;
	const char *base;
	int since;
	void *ours;
	bool needs_real;
	const char *ptsz; /* the per-thread default stream variant's export */
};

#define S(exp, base, since, fn, needs)                                                             \
	{                                                                                          \
#exp, base, since, (void *)(fn), needs, NULL                                       \
	}
#define SP(exp, base, since, fn, needs)                                                            \
	{                                                                                          \
#exp, base, since, (void *)(fn), needs, #exp "_ptsz"                               \
	}
static const struct icpt_sym syms[] = {
    S(cuInit, "cuInit", 2000, cuInit, true),
    S(cuMemAlloc_v2, "cuMemAlloc", 3020, cuMemAlloc_v2, false),
    S(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, cuMemAllocPitch_v2, false),
    S(cuMemFree_v2, "cuMemFree", 3020, cuMemFree_v2, true),
    SP(cuMemAllocAsync, "cuMemAllocAsync", 11020, cuMemAllocAsync, false),
    SP(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, false),
    SP(cuMemFreeAsync, "cuMemFreeAsync", 11020, cuMemFreeAsync, true),
    S(cuMemGetInfo_v2, "cuMemGetInfo", 3020, cuMemGetInfo_v2, false),
    S(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2, false),
    S(cuMemGetAddressRange_v2, "cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2, true),
    S(cuPointerGetAttribute, "cuPointerGetAttribute", 4000, cuPointerGetAttribute, true),
    S(cuPointerGetAttributes, "cuPointerGetAttributes", 7000, cuPointerGetAttributes, true),
    S(cuMemCreate, "cuMemCreate", 10020, cuMemCreate, true),
    S(cuMemAllocManaged, "cuMemAllocManaged", 6000, cuMemAllocManaged, true),
    S(cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, cuIpcGetMemHandle, true),
    S(cuGetProcAddress, "cuGetProcAddress", 11030, cuGetProcAddress, true),
    S(cuGetProcAddress_v2, "cuGetProcAddress", 12000, cuGetProcAddress_v2, true),
};
#undef S
#undef SP
#define NSYMS (sizeof(syms) / sizeof(syms[0]))

void *icpt_ours_by_export(const char *name)
{
	for (size_t i = 0; i < NSYMS; i++) {
		if (strcmp(syms[i].export, name) == 0)
			return syms[i].ours;
		if (syms[i].ptsz && strcmp(syms[i].ptsz, name) == 0)
			return syms[i].ours;
	}
	return NULL;
}

/* Whether @fn, the driver's answer for @s, is the variant ours implements:
 * its export, or that export's per-thread default stream variant (ours
 * serves both: a free in legacy order waits for the per-thread stream). */
static bool icpt_same_variant(const struct icpt_sym *s, void *fn)
{
	const struct icpt_real *r = icpt_real();

	if (!r->lib)
		return false;
	return fn == icpt_real_dlsym(r->lib, s->export) ||
	       (s->ptsz && fn == icpt_real_dlsym(r->lib, s->ptsz));
}

/* Ours for a cuGetProcAddress answer of the driver (@fn, maybe NULL). */
static void *icpt_ours_by_base(const char *symbol, int version, void *fn)
{
	const struct icpt_sym *best = NULL;

	for (size_t i = 0; i < NSYMS; i++) {
		const struct icpt_sym *s = &syms[i];
		if (s->base && strcmp(s->base, symbol) == 0 && s->since <= version &&
		    (!best || s->since > best->since))
			best = s;
	}
	if (!best)
		return NULL;
	if (fn)
		return icpt_same_variant(best, fn) ? best->ours : NULL;
	return best->needs_real ? NULL : best->ours;
}

ICPT_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	const struct icpt_real *r = icpt_real();
	CUresult rc;

	if (r->GetProcAddress_v2)
		rc = r->GetProcAddress_v2(symbol, pfn, version, flags, status);
	else if (r->GetProcAddress)
		rc = r->GetProcAddress(symbol, pfn, version, flags);
	else
		return CUDA_ERROR_NOT_SUPPORTED;
	if (rc != CUDA_SUCCESS || !symbol || !pfn)
		return rc;
	void *ours = icpt_ours_by_base(symbol, version, *pfn);
	if (ours) {
		*pfn = ours;
		if (status)
			*status = CU_GET_PROC_ADDRESS_SUCCESS;
	}
	return rc;
}

ICPT_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* ---- dlsym ----------------------------------------------------------------------- */

/* Whether @addr lies in the broker's own code: this library, or a
 * libgpubroker loaded beside it, which resolve the driver for themselves. */
static bool icpt_ours_calling(const void *addr)
{
	static Dl_info self;
	Dl_info info;

	if (!self.dli_fbase)
		dladdr((void *)icpt_ours_calling, &self);
	if (!dladdr(addr, &info))
		return false;
	if (info.dli_fbase == self.dli_fbase)
		return true;
	const char *base = info.dli_fname ? strrchr(info.dli_fname, '/') : NULL;
	base = base ? base + 1 : info.dli_fname;
	return base && strncmp(base, "libgpubroker", strlen("libgpubroker")) == 0;
}

/* RTLD_NEXT from @caller's object: the first object after it in load
 * order that defines @name itself. Each is looked up through a handle of
 * its own (dlopen with RTLD_NOLOAD: a link map is not a handle glibc's
 * dlsym can search), and the answer kept only if it lies in that object
 * (a handle searches the object's dependencies too). */
static void *icpt_next(const void *caller, const char *name)
{
	struct link_map *map = NULL;
	Dl_info info;

	if (!dladdr1(caller, &info, (void **)&map, RTLD_DL_LINKMAP) || !map)
		return NULL;
	for (struct link_map *l = map->l_next; l; l = l->l_next) {
		if (!l->l_name || !l->l_name[0]) /* the vDSO: no file to name */
			continue;
		void *h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
		if (!h)
			continue;
		void *fn = icpt_real_dlsym(h, name);
		Dl_info where;
		bool here = fn && dladdr(fn, &where) && where.dli_fname &&
		            strcmp(where.dli_fname, l->l_name) == 0;
		dlclose(h);
		if (here)
			return fn;
	}
	return NULL;
}

/* RTLD_DEFAULT from @caller: the global scope, then the caller's own. */
static void *icpt_default(const void *caller, const char *name)
{
	struct link_map *map = NULL;
	Dl_info info;
	void *fn = icpt_real_dlsym(RTLD_DEFAULT, name);

	if (!fn && dladdr1(caller, &info, (void **)&map, RTLD_DL_LINKMAP) && map)
		fn = icpt_real_dlsym(map, name);
	return fn;
}

ICPT_EXPORT void *dlsym(void *handle, const char *name)
{
	const void *caller = __builtin_return_address(0);
	void *fn;

	if (handle == RTLD_NEXT) {
		fn = icpt_next(caller, name);
		/* Not found: glibc's own lookup from here sets dlerror() to say
		 * so (whatever it finds is before the caller: not the answer). */
		if (!fn)
			icpt_real_dlsym(RTLD_NEXT, name);
	} else if (handle == RTLD_DEFAULT)
		fn = icpt_default(caller, name);
	else
		fn = icpt_real_dlsym(handle, name);
	if (!fn || icpt_ours_calling(caller))
		return fn;
	void *ours = icpt_ours_by_export(name);
	return ours ? ours : fn;
}
