/*
 * fakecuda_vmm.c - the fake libcuda.so.1's virtual memory management:
 * cuMemCreate, cuMemExportToShareableHandle / cuMemImportFromShareableHandle
 * with POSIX file descriptors, cuMemAddressReserve / cuMemAddressFree,
 * cuMemMap / cuMemUnmap, cuMemSetAccess, cuMemRelease and the allocation
 * granularity.
 *
 * Physical memory is a file of the state directory (vmm-SERIAL): its first
 * `size` bytes are the memory, a trailer page after them says what it is
 * (struct fake_vmm_file); it is unlinked when the last process holding the
 * memory lets go. A handle holds no descriptor, as the driver's hold none
 * (a handle is a driver object): the file is opened by its name only for
 * the call that needs it (cuMemCreate, an import's check, cuMemMap) and
 * closed before the call returns, the mapping keeping the pages. The shareable handle is, as the
 * driver's are all descriptors of /dev/nvidiactl (measured on an H100), a descriptor of the fake's
 * control file whose offset names the memory (fakecuda_internal.h): a process that receives it
 * (over SCM_RIGHTS) imports the same bytes, and every exported descriptor has one (dev, inode), so
 * nothing can tell two allocations apart by the file. The descriptor of the control file a process
 * holds from cuInit on imports as the driver's own /dev/nvidiactl descriptor does: as a handle that
 * cuMemMap refuses (CUDA_ERROR_NOT_SUPPORTED). A reservation is an inaccessible anonymous range, a
 * mapping the memfd mapped over it, made readable and writable only by
 * cuMemSetAccess (until then a touch faults, as on a GPU).
 *
 * Physical memory is reference counted, per process and across processes:
 * each handle (of cuMemCreate or of an import) and each mapping holds it;
 * cuMemRelease of the last handle does not free memory that is still
 * mapped, here or in another process, and cuMemGetInfo counts it until the
 * last holder let go or died (fake_vmm_record_new / fake_vmm_hold in
 * fakecuda.c).
 *
 * Refused as the driver refuses them (CUDA_ERROR_INVALID_VALUE unless
 * noted): sizes, addresses and offsets that are not multiples of the
 * granularity (2 MiB); allocation properties other than pinned device
 * memory with no or POSIX descriptor handles; flags; exporting a handle
 * created without the POSIX descriptor type, or as another type; importing
 * a descriptor that is not such memory; mapping outside a reservation, over
 * a mapping, past the end of the memory or with a released handle; setting
 * access on a range that is not mapped; unmapping part of a mapping or
 * nothing; freeing a reservation that is not one or still has mappings;
 * releasing a handle twice. A mapping made accessible belongs to the
 * context current then: a reset or destroyed context takes it (as it takes
 * legacy IPC mappings in fakecuda.c; whether a driver does is for a GPU to
 * say). FAKECUDA_NO_VMM=1 makes the devices report no
 * VMM (cuMemCreate is CUDA_ERROR_NOT_SUPPORTED), FAKECUDA_NO_VMM_FD=1 VMM
 * without POSIX descriptors; FAKECUDA_NO_RDMA and FAKECUDA_NO_VMM_EXPORT:
 * fakecuda_strict.c. cuMemRetainAllocationHandle and
 * cuMemGetAllocationPropertiesFromHandle answer what a mapping was made
 * with (the GPUDirect RDMA flag included, carried in the trailer).
 */
#include "fakecuda_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define VMM_GRANULARITY (2ull << 20)
#define VMM_TRAILER     4096
#define VMM_MAGIC       "FAKEVMM"

/* The trailer of a physical allocation's memfd. */
struct fake_vmm_file {
	char magic[8];
	uint64_t serial;
	uint64_t size;
	int32_t device;
	int32_t handle_types;
	int32_t rdma;  /* made with allocFlags.gpuDirectRDMACapable */
	int32_t spare; /* no padding: the whole trailer is written, every byte set */
};

/* Physical memory this process holds (a handle or a mapping of it). */
struct fake_phys {
	struct fake_phys *next;
	uint64_t serial, size;
	int device;
	int handle_types;
	bool control;     /* the import of a bare control descriptor: maps nothing */
	bool rdma;        /* allocFlags.gpuDirectRDMACapable */
	bool created;     /* by cuMemCreate here, not imported */
	unsigned handles; /* live handles */
	unsigned maps;    /* live mappings */
};

/* A CUmemGenericAllocationHandle is the address of one of these: each
 * cuMemCreate and cuMemImportFromShareableHandle makes one. */
struct fake_vhandle {
	struct fake_vhandle *next;
	struct fake_phys *phys;
};

struct fake_va {
	struct fake_va *next;
	uintptr_t base;
	uint64_t size;
};

struct fake_vmap {
	struct fake_vmap *next;
	uintptr_t base;
	uint64_t size;
	struct fake_phys *phys;
	struct fake_mem *mem;         /* once accessible: what fake_mem_find finds */
	unsigned long long access[8]; /* cuMemSetAccess's flags per device */
};

/* This process's VMM objects, under fake_lock. */
static struct fake_phys *vmm_phys;
static struct fake_vhandle *vmm_handles;
static struct fake_va *vmm_vas;
static struct fake_vmap *vmm_maps;

/* ---- physical memory in the state file ---------------------------------- */

static struct fake_record *fake_record_free_slot(void)
{
	struct fake_record *rec = fake_records();
	for (int i = 0; i < FAKE_MAX_RECORDS; i++) {
		if (!rec[i].owner)
			return &rec[i];
	}
	return NULL;
}

CUresult fake_vmm_record_new(int dev, uint64_t size, uint64_t *serial)
{
	fake_lock_state();
	fake_reap();
	struct fake_record *r = fake_record_free_slot();
	if (!r || fake_used(dev) + size > fake_memory) {
		fake_unlock_state();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*serial = fake_new_serial_locked();
	*r = (struct fake_record){
	    .owner = getpid(), .vmm = 1, .device = dev, .size = size, .serial = *serial};
	r->importers[0] = getpid();
	fake_unlock_state();
	return CUDA_SUCCESS;
}

bool fake_vmm_hold(uint64_t serial, bool hold)
{
	fake_lock_state();
	struct fake_record *r = fake_record_find(serial);
	bool found = r != NULL;
	bool held = false;
	for (int j = 0; r && j < FAKE_MAX_IMPORTER; j++) {
		if (r->importers[j] == getpid())
			r->importers[j] = 0;
		if (hold && !r->importers[j]) {
			r->importers[j] = getpid();
			hold = false;
		}
		held |= r->importers[j] != 0;
	}
	if (r && !held)
		fake_vmm_record_drop(r);
	fake_unlock_state();
	return found;
}

void fake_vmm_record_drop(struct fake_record *r)
{
	char path[300];
	fake_vmm_path(r->serial, path, sizeof(path));
	unlink(path);
	memset(r, 0, sizeof(*r));
}

FAKE_EXPORT unsigned fakecuda_vmm_live(void)
{
	unsigned n = 0;
	struct fake_record *rec = fake_records();
	if (!rec)
		return 0;
	fake_lock_state();
	fake_reap();
	for (int i = 0; i < FAKE_MAX_RECORDS; i++)
		n += rec[i].owner && rec[i].vmm;
	fake_unlock_state();
	return n;
}

static bool vmm_aligned(uint64_t v)
{
	return v % VMM_GRANULARITY == 0;
}

static bool vmm_prop_ok(const CUmemAllocationProp *prop)
{
	return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
	       prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id >= 0 &&
	       prop->location.id < fake_devices && !prop->win32HandleMetaData &&
	       (prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE ||
	        prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
}

static struct fake_vhandle *vmm_handle_find(CUmemGenericAllocationHandle h)
{
	for (struct fake_vhandle *v = vmm_handles; v; v = v->next) {
		if ((CUmemGenericAllocationHandle)(uintptr_t)v == h)
			return v;
	}
	return NULL;
}

/* Drops the process's hold when nothing of it is left here. Lock held. */
static void vmm_phys_put(struct fake_phys *p)
{
	if (p->handles || p->maps)
		return;
	for (struct fake_phys **pp = &vmm_phys; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	if (!p->control)
		fake_vmm_hold(p->serial, false);
	free(p);
}

/* A new handle on p. Lock held. */
static CUresult vmm_handle_new(struct fake_phys *p, CUmemGenericAllocationHandle *out)
{
	struct fake_vhandle *v = calloc(1, sizeof(*v));
	if (!v)
		return CUDA_ERROR_OUT_OF_MEMORY;
	v->phys = p;
	v->next = vmm_handles;
	vmm_handles = v;
	p->handles++;
	*out = (CUmemGenericAllocationHandle)(uintptr_t)v;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                                   const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option)
{
	NEED_INIT();
	INJECT("cuMemGetAllocationGranularity");
	if (!granularity || !vmm_prop_ok(prop) ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	     option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	if (fake_no_vmm)
		return CUDA_ERROR_NOT_SUPPORTED;
	*granularity = VMM_GRANULARITY;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
	NEED_INIT();
	INJECT("cuMemCreate");
	if (!handle || !vmm_prop_ok(prop) || flags || size == 0 || !vmm_aligned(size))
		return CUDA_ERROR_INVALID_VALUE;
	if (fake_no_vmm || (fake_no_vmm_fd &&
	                    prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return CUDA_ERROR_NOT_SUPPORTED;
	/* Only where the device reports GPUDirect RDMA with VMM. */
	if (prop->allocFlags.gpuDirectRDMACapable && fake_no_rdma)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_phys *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->device = prop->location.id;
	p->size = size;
	p->handle_types = (int)prop->requestedHandleTypes;
	p->rdma = prop->allocFlags.gpuDirectRDMACapable != 0;
	p->created = true;
	CUresult rc = fake_vmm_record_new(p->device, size, &p->serial);
	if (rc != CUDA_SUCCESS) {
		free(p);
		return rc;
	}
	struct fake_vmm_file f = {.magic = VMM_MAGIC,
	                          .serial = p->serial,
	                          .size = size,
	                          .device = p->device,
	                          .handle_types = p->handle_types,
	                          .rdma = p->rdma};
	char path[300];
	fake_vmm_path(p->serial, path, sizeof(path));
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	void *mem = MAP_FAILED;
	/* Processes of other users import it (the fake, not the mode, decides). */
	if (fd >= 0 && fchmod(fd, 0666) == 0 && ftruncate(fd, (off_t)(size + VMM_TRAILER)) == 0 &&
	    pwrite(fd, &f, sizeof(f), (off_t)size) == (ssize_t)sizeof(f))
		mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fd >= 0)
		close(fd);
	if (mem == MAP_FAILED) {
		fake_vmm_hold(p->serial, false);
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* Real device memory comes with whatever was there before. */
	if (!fake_clean)
		memset(mem, 0xa5, size);
	munmap(mem, size);
	pthread_mutex_lock(&fake_lock);
	p->next = vmm_phys;
	vmm_phys = p;
	rc = vmm_handle_new(p, handle);
	if (rc != CUDA_SUCCESS)
		vmm_phys_put(p);
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	NEED_INIT();
	INJECT("cuMemRelease");
	pthread_mutex_lock(&fake_lock);
	struct fake_vhandle *v = vmm_handle_find(handle);
	if (!v) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (struct fake_vhandle **pp = &vmm_handles; *pp; pp = &(*pp)->next) {
		if (*pp == v) {
			*pp = v->next;
			break;
		}
	}
	v->phys->handles--;
	/* Still mapped (here or elsewhere): the memory stays. */
	vmm_phys_put(v->phys);
	free(v);
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemExportToShareableHandle(void *shareable,
                                                  CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType type,
                                                  unsigned long long flags)
{
	NEED_INIT();
	INJECT("cuMemExportToShareableHandle");
	if (!shareable || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	if (fake_no_vmm_export)
		return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&fake_lock);
	struct fake_vhandle *v = vmm_handle_find(handle);
	/* Only the types asked for at cuMemCreate can be exported. */
	bool ok = v && (v->phys->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	int fd = ok ? fake_ctl_export(FAKE_CTL_CODE(v->phys->serial, v->phys->device, FAKE_CTL_VMM))
	            : -1;
	pthread_mutex_unlock(&fake_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)shareable = fd;
	return CUDA_SUCCESS;
}

static CUresult vmm_import_control(CUmemGenericAllocationHandle *handle);
static CUresult vmm_import_file(CUmemGenericAllocationHandle *handle,
                                const struct fake_vmm_file *f);

FAKE_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                    void *os_handle, CUmemAllocationHandleType type)
{
	NEED_INIT();
	INJECT("cuMemImportFromShareableHandle");
	uint64_t code;
	if (!handle || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
	    fake_ctl_code((int)(intptr_t)os_handle, &code) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* A bare control descriptor (a process's own, at offset 0): the
	 * driver imports its own /dev/nvidiactl descriptor too, as a handle
	 * that maps nothing. */
	if (code == 0)
		return vmm_import_control(handle);
	if (FAKE_CTL_KIND(code) != FAKE_CTL_VMM)
		return CUDA_ERROR_INVALID_VALUE;
	char path[300];
	fake_vmm_path(FAKE_CTL_SERIAL(code), path, sizeof(path));
	int fd = open(path, O_RDWR | O_CLOEXEC);
	struct fake_vmm_file f;
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= VMM_TRAILER ||
	    pread(fd, &f, sizeof(f), st.st_size - VMM_TRAILER) != (ssize_t)sizeof(f) ||
	    memcmp(f.magic, VMM_MAGIC, 8) != 0 || f.size != (uint64_t)st.st_size - VMM_TRAILER ||
	    f.serial != FAKE_CTL_SERIAL(code) || f.device < 0 || f.device >= fake_devices) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	close(fd);
	return vmm_import_file(handle, &f);
}

/* A handle of the control file: it holds no memory, maps nothing. */
static CUresult vmm_import_control(CUmemGenericAllocationHandle *handle)
{
	struct fake_phys *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (struct fake_phys){.control = true};
	pthread_mutex_lock(&fake_lock);
	CUresult rc = vmm_handle_new(p, handle);
	if (rc != CUDA_SUCCESS)
		free(p);
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

/* The import of VMM memory whose trailer is f (its file checked and
 * closed: the handle keeps the name, as a driver's keeps no descriptor). */
static CUresult vmm_import_file(CUmemGenericAllocationHandle *handle,
                                const struct fake_vmm_file *fp)
{
	struct fake_vmm_file f = *fp;
	pthread_mutex_lock(&fake_lock);
	struct fake_phys *p = vmm_phys;
	while (p && p->serial != f.serial)
		p = p->next;
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p) {
			pthread_mutex_unlock(&fake_lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		*p = (struct fake_phys){.serial = f.serial,
		                        .size = f.size,
		                        .device = f.device,
		                        .handle_types = f.handle_types,
		                        .rdma = f.rdma != 0,
		                        .next = vmm_phys};
		/* Its last holder let go since the file was checked: gone. */
		if (!fake_vmm_hold(p->serial, true)) {
			free(p);
			pthread_mutex_unlock(&fake_lock);
			return CUDA_ERROR_INVALID_VALUE;
		}
		vmm_phys = p;
	}
	CUresult rc = vmm_handle_new(p, handle);
	if (rc != CUDA_SUCCESS)
		vmm_phys_put(p);
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                         CUdeviceptr addr, unsigned long long flags)
{
	(void)addr; /* a hint, which the driver may ignore too */
	NEED_INIT();
	INJECT("cuMemAddressReserve");
	if (!ptr || size == 0 || !vmm_aligned(size) || flags ||
	    (alignment && (alignment & (alignment - 1))))
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t align = alignment > VMM_GRANULARITY ? alignment : VMM_GRANULARITY;
	struct fake_va *va = calloc(1, sizeof(*va));
	if (!va)
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *p =
	    mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		free(va);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* Aligned as the driver's addresses are: trim the rest. */
	uintptr_t start = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
	if (start > (uintptr_t)p)
		munmap(p, start - (uintptr_t)p);
	uintptr_t end = (uintptr_t)p + size + align;
	if (end > start + size)
		munmap((void *)(start + size), end - start - size);
	va->base = start;
	va->size = size;
	pthread_mutex_lock(&fake_lock);
	va->next = vmm_vas;
	vmm_vas = va;
	pthread_mutex_unlock(&fake_lock);
	*ptr = (CUdeviceptr)start;
	return CUDA_SUCCESS;
}

/* The first mapping overlapping [p, p + n), or NULL. Lock held. */
static struct fake_vmap *vmm_map_overlapping(uintptr_t p, uint64_t n, struct fake_vmap *from)
{
	for (struct fake_vmap *m = from; m; m = m->next) {
		if (m->base < p + n && p < m->base + m->size)
			return m;
	}
	return NULL;
}

FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	NEED_INIT();
	INJECT("cuMemAddressFree");
	pthread_mutex_lock(&fake_lock);
	struct fake_va **pp = &vmm_vas;
	while (*pp && ((*pp)->base != (uintptr_t)ptr || (*pp)->size != size))
		pp = &(*pp)->next;
	struct fake_va *va = *pp;
	if (!va || vmm_map_overlapping(va->base, va->size, vmm_maps)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	*pp = va->next;
	pthread_mutex_unlock(&fake_lock);
	munmap((void *)va->base, va->size);
	free(va);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	NEED_INIT();
	INJECT("cuMemMap");
	uintptr_t p = (uintptr_t)ptr;
	if (flags || size == 0 || !vmm_aligned(p) || !vmm_aligned(size) || !vmm_aligned(offset))
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_vmap *m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fake_lock);
	struct fake_vhandle *v = vmm_handle_find(handle);
	struct fake_va *va = vmm_vas;
	while (va &&
	       !(p >= va->base && p - va->base < va->size && size <= va->size - (p - va->base)))
		va = va->next;
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	/* A released handle, no reservation there, past the memory's end, or
	 * over a mapping: refused. */
	/* A handle of the bare control descriptor: the driver's answer. */
	if (v && v->phys->control)
		rc = CUDA_ERROR_NOT_SUPPORTED;
	if (!v || v->phys->control || !va || offset > v->phys->size ||
	    size > v->phys->size - offset || vmm_map_overlapping(p, size, vmm_maps))
		goto out;
	/* The file by its name, for this mmap only (the process holds it as
	 * an importer, so it is not unlinked meanwhile). */
	char path[300];
	fake_vmm_path(v->phys->serial, path, sizeof(path));
	int fd = open(path, O_RDWR | O_CLOEXEC);
	void *at =
	    fd < 0 ? MAP_FAILED
	           : mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, (off_t)offset);
	if (fd >= 0)
		close(fd);
	if (at == MAP_FAILED) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*m = (struct fake_vmap){.base = p, .size = size, .phys = v->phys, .next = vmm_maps};
	vmm_maps = m;
	v->phys->maps++;
	m = NULL;
	rc = CUDA_SUCCESS;
out:
	pthread_mutex_unlock(&fake_lock);
	free(m);
	return rc;
}

/* Whether [p, p + n) is made of whole mappings only, with at least one. */
static bool vmm_whole_maps(uintptr_t p, uint64_t n)
{
	uint64_t covered = 0;
	for (struct fake_vmap *m = vmm_maps; (m = vmm_map_overlapping(p, n, m)); m = m->next) {
		if (m->base < p || m->base + m->size > p + n)
			return false;
		covered += m->size;
	}
	return covered == n;
}

FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                    size_t count)
{
	NEED_INIT();
	INJECT("cuMemSetAccess");
	uintptr_t p = (uintptr_t)ptr;
	if (!desc || count == 0 || size == 0 || !vmm_aligned(p) || !vmm_aligned(size))
		return CUDA_ERROR_INVALID_VALUE;
	int prot = -1;
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    desc[i].location.id < 0 || desc[i].location.id >= fake_devices)
			return CUDA_ERROR_INVALID_DEVICE;
		switch (desc[i].flags) {
		case CU_MEM_ACCESS_FLAGS_PROT_NONE:
			prot = prot < 0 ? PROT_NONE : prot;
			break;
		case CU_MEM_ACCESS_FLAGS_PROT_READ:
			prot = PROT_READ;
			break;
		case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
			prot = PROT_READ | PROT_WRITE;
			break;
		default:
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	pthread_mutex_lock(&fake_lock);
	/* Access is set on what is mapped: before cuMemMap there is nothing. */
	if (!vmm_whole_maps(p, size)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	CUresult rc = CUDA_SUCCESS;
	for (struct fake_vmap *m = vmm_maps; (m = vmm_map_overlapping(p, size, m)); m = m->next) {
		for (size_t i = 0; i < count; i++) {
			if (desc[i].location.id < 8)
				m->access[desc[i].location.id] = desc[i].flags;
		}
		if (mprotect((void *)m->base, m->size, prot) < 0) {
			rc = CUDA_ERROR_UNKNOWN;
			break;
		}
		if (prot != PROT_NONE && !m->mem) {
			m->mem = calloc(1, sizeof(*m->mem));
			if (!m->mem) {
				rc = CUDA_ERROR_OUT_OF_MEMORY;
				break;
			}
			*m->mem = (struct fake_mem){.base = m->base,
			                            .size = m->size,
			                            .serial = m->phys->serial,
			                            .device = m->phys->device,
			                            .ctx = fake_current(),
			                            .vmm = true};
			fake_mem_link(m->mem);
		} else if (prot == PROT_NONE && m->mem) {
			fake_mem_unlink(m->mem);
			free(m->mem);
			m->mem = NULL;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

FAKE_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                    CUdeviceptr ptr)
{
	NEED_INIT();
	if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    location->id < 0 || location->id >= fake_devices)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	struct fake_vmap *m = vmm_map_overlapping((uintptr_t)ptr, 1, vmm_maps);
	if (m && location->id < 8)
		*flags = m->access[location->id];
	pthread_mutex_unlock(&fake_lock);
	return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Unmaps m (unlinked), leaving its range reserved and inaccessible. Lock
 * held. */
static void vmm_map_drop(struct fake_vmap *m)
{
	mmap((void *)m->base, m->size, PROT_NONE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	if (m->mem) {
		fake_mem_unlink(m->mem);
		free(m->mem);
	}
	m->phys->maps--;
	vmm_phys_put(m->phys);
	free(m);
}

void fake_vmm_destroy_ctx(struct fake_ctx *ctx)
{
	pthread_mutex_lock(&fake_lock);
	for (struct fake_vmap **pp = &vmm_maps; *pp;) {
		struct fake_vmap *m = *pp;
		if (!m->mem || m->mem->ctx != ctx) {
			pp = &m->next;
			continue;
		}
		*pp = m->next;
		vmm_map_drop(m);
	}
	pthread_mutex_unlock(&fake_lock);
}

FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	NEED_INIT();
	INJECT("cuMemUnmap");
	uintptr_t p = (uintptr_t)ptr;
	if (size == 0 || !vmm_aligned(p) || !vmm_aligned(size))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	if (!vmm_whole_maps(p, size)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (struct fake_vmap **pp = &vmm_maps; *pp;) {
		struct fake_vmap *m = *pp;
		if (!(m->base < p + size && p < m->base + m->size)) {
			pp = &m->next;
			continue;
		}
		*pp = m->next;
		/* Back to an inaccessible part of the reservation. */
		vmm_map_drop(m);
	}
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	NEED_INIT();
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	struct fake_vmap *m = vmm_map_overlapping((uintptr_t)addr, 1, vmm_maps);
	CUresult rc = m ? vmm_handle_new(m->phys, handle) : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

FAKE_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                            CUmemGenericAllocationHandle handle)
{
	NEED_INIT();
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	struct fake_vhandle *v = vmm_handle_find(handle);
	if (v) {
		memset(prop, 0, sizeof(*prop));
		prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop->requestedHandleTypes = (CUmemAllocationHandleType)v->phys->handle_types;
		prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop->location.id = v->phys->device;
		/* An importer reads no flag: an H200 (driver 580.159.04) answered 0
		 * for a slab the daemon made with it. */
		prop->allocFlags.gpuDirectRDMACapable = v->phys->created && v->phys->rdma;
	}
	pthread_mutex_unlock(&fake_lock);
	return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* For tests: whether the memory mapped at addr in this process was made
 * GPUDirect RDMA capable (1 or 0), or -1 when nothing is mapped there. What
 * the driver's own calls cannot tell an importer. */
FAKE_EXPORT int fakecuda_vmm_rdma(uintptr_t addr)
{
	pthread_mutex_lock(&fake_lock);
	struct fake_vmap *m = vmm_map_overlapping(addr, 1, vmm_maps);
	int r = m ? m->phys->rdma : -1;
	pthread_mutex_unlock(&fake_lock);
	return r;
}
