/*
 * test-vmm-uid.c (gpu-vmm-uid) - a client of another uid maps, writes and
 * reads back a VMM slab, and reaches nothing it was not granted (finding 1
 * of issue 15: with transport vmm the descriptor is the capability).
 *
 * Needs root: the daemon runs as this test's uid (root), or on the uid axis
 * (cuda-fake-xuid-vmm-uid) as uid 65533 as an operator's gpubroker user
 * would be a uid of its own, so that three uids meet; the client is a child
 * that setuid()s to nobody (65534) once the socket (and, with the fake,
 * its state directory) is open to it. Skipped (77) when not root, and under
 * transport ipc (whether legacy IPC crosses uids is the driver's share
 * policy: test-gpu-ipc-policy's business).
 *
 * The root client holds an allocation with a known pattern. The nobody
 * client: allocates (its slab is new, not root's: zeros), writes and reads
 * back through the driver; `attach` of root's allocation id is refused;
 * the only descriptor it holds that imports as VMM memory is the library's
 * copy of its own slab's; the daemon's descriptors under /proc are closed
 * to it. Root's bytes are untouched.
 */
#include "gpu-common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define NOBODY 65534
#define SIZE   (1u << 20)

/* The daemon's pid, from `status`. */
static long daemon_pid(gpb_client *c)
{
	char *json = NULL;
	GPB(gpb_request(c, "status", NULL, &json));
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	CHECK(r != NULL);
	const cJSON *pid = cJSON_GetObjectItem(r, "pid");
	CHECK(cJSON_IsNumber(pid));
	long v = (long)pid->valuedouble;
	cJSON_Delete(r);
	return v;
}

static size_t granularity(void)
{
	CUmemAllocationProp prop;
	size_t g = 0;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	CU(cu.MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	return g;
}

/* Maps one granule of imported handle @h (released): true and *va, or
 * false when it is no memory. The driver imports the process's own
 * /dev/nvidiactl descriptor too (every exported descriptor is one of that
 * file), as a handle cuMemMap refuses with CUDA_ERROR_NOT_SUPPORTED
 * (measured on an H100; the fake does the same with its control file). */
static bool map_own(CUmemGenericAllocationHandle h, CUdeviceptr *va)
{
	size_t g = granularity();
	CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
	                     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CU(cu.MemAddressReserve(va, g, 0, 0, 0));
	CUresult rc = cu.MemMap(*va, g, 0, h, 0);
	CU(cu.MemRelease(h));
	if (rc == CUDA_ERROR_NOT_SUPPORTED) {
		CU(cu.MemAddressFree(*va, g));
		return false;
	}
	CU(rc);
	CU(cu.MemSetAccess(*va, g, &a, 1));
	return true;
}

static void unmap_own(CUdeviceptr va)
{
	CU(cu.MemUnmap(va, granularity()));
	CU(cu.MemAddressFree(va, granularity()));
}

static int client_of_nobody(const char *socket, const char *root_id, const char *root_slab)
{
	CHECK(getuid() == NOBODY && geteuid() == NOBODY);
	gpb_client *c = NULL;
	GPB(gpb_connect(socket, "gpu-vmm-uid-nobody", &c));
	char t[16];
	gt_device_transport(c, 0, t, sizeof(t));
	CHECK(strcmp(t, "vmm") == 0);
	uint64_t inst = gt_register(c, 0);
	struct gpb_allocation a;
	GPB(gpb_alloc(c, inst, SIZE, 0, &a));
	/* Its own slab, not root's, and cleared before it got here. */
	char slab[32];
	snprintf(slab, sizeof(slab), "%016" PRIx64, a.slab);
	CHECK(strcmp(slab, root_slab) != 0);
	gt_cuda_context(0);
	unsigned char *buf = calloc(1, SIZE), *zero = calloc(1, SIZE);
	CHECK(buf && zero);
	CU(cu.MemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)a.ptr, SIZE));
	CHECK(memcmp(buf, zero, SIZE) == 0);
	gt_fill(buf, SIZE, 21);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a.ptr, buf, SIZE));
	gt_expect_and_write(a.ptr, SIZE, 21, 22);

	/* Root's allocation, by its id: not this user's to attach. */
	struct gpb_allocation b;
	int rc = gpb_attach(c, strtoull(root_id, NULL, 16), &b);
	CHECK(rc < 0);
	/* Every descriptor of this process that maps as VMM memory is its own
	 * slab (the library's copy, where it keeps one while the slab is
	 * mapped): nothing else was ever sent to it. Descriptors that import
	 * but map nothing (the driver's own /dev/nvidiactl ones) are counted
	 * apart. */
	unsigned tried = 0, own = 0, control = 0;
	for (int fd = 0; fd < 1024; fd++) {
		CUmemGenericAllocationHandle h;
		if (fcntl(fd, F_GETFD) < 0)
			continue;
		tried++;
		if (cu.MemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
		                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
		    CUDA_SUCCESS)
			continue;
		CUdeviceptr va;
		if (!map_own(h, &va)) {
			control++;
			continue;
		}
		/* Pattern 22, which this client wrote last: its own memory. */
		CHECK(a.offset + 4096 <= granularity());
		gt_expect_and_write((void *)(uintptr_t)(va + a.offset), 4096, 22, 22);
		unmap_own(va);
		own++;
	}
	printf("descriptors: %u open, %u map as memory, %u import but map nothing\n", tried, own,
	       control);
	CHECK(tried >= 3 && own <= 1);
	/* The daemon's descriptors are not this user's to open. */
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%ld/fd", daemon_pid(c));
	DIR *dp = opendir(dir);
	if (dp) {
		for (struct dirent *e; (e = readdir(dp));) {
			char path[PATH_MAX];
			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd >= 0)
				GT_FAIL("nobody opened the daemon's %s", path);
		}
		closedir(dp);
	}
	GPB(gpb_free(c, a.id));
	gpb_disconnect(c);
	free(buf);
	free(zero);
	printf("ok: nobody mapped, wrote and read its slab, and reached nothing else\n");
	return 0;
}

/* Opens the fake's state directory to every user: real processes of any
 * uid share one driver; the fake's state stands in for it. */
static void open_fake_state(void)
{
	const char *dir = getenv("FAKECUDA_DIR");
	char path[PATH_MAX];
	CHECK(dir != NULL);
	CHECK(chmod(dir, 0777) == 0);
	snprintf(path, sizeof(path), "%s/state", dir);
	CHECK(chmod(path, 0666) == 0);
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (argc == 5 && strcmp(argv[1], "nobody") == 0)
		return client_of_nobody(argv[2], argv[3], argv[4]);
	if (geteuid() != 0) {
		printf("SKIP: needs root: the client setuid()s to %d to be another user than the "
		       "daemon\n",
		       NOBODY);
		return GT_SKIP;
	}
	if (!gt_vmm()) {
		printf("SKIP: transport %s: legacy IPC across uids is the driver's share policy "
		       "(finding 1; the ipc transport's own tests)\n",
		       gt_transport());
		return GT_SKIP;
	}
	if (gt_fake())
		open_fake_state();
	struct gt_daemon d;
	const char *open_socket[] = {"--socket-mode", "0666", NULL};
	gt_daemon_start(&d, "cuda", open_socket, NULL);
	CHECK(chmod(d.dir, 0755) == 0);

	gpb_client *c = gt_connect(&d, "gpu-vmm-uid-root");
	struct gpb_allocation a;
	GPB(gpb_alloc(c, gt_register(c, 0), SIZE, 0, &a));
	gt_cuda_context(0);
	unsigned char *buf = malloc(SIZE);
	CHECK(buf != NULL);
	gt_fill(buf, SIZE, 1);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a.ptr, buf, SIZE));
	free(buf);

	char id[32], slab[32];
	snprintf(id, sizeof(id), "%016" PRIx64, a.id);
	snprintf(slab, sizeof(slab), "%016" PRIx64, a.slab);
	/* A copy nobody can reach, wherever the build tree is. */
	char self[PATH_MAX];
	gt_stage_self(self, sizeof(self));
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		gid_t g = NOBODY;
		if (setgroups(1, &g) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0) {
			perror("setuid");
			_exit(126);
		}
		gt_stage_use();
		char *args[] = {"gpu-test-nobody", "nobody", d.socket, id, slab, NULL};
		execv(self, args);
		_exit(127);
	}
	int st = gt_wait(pid);
	if (st != 0)
		GT_FAIL("the nobody client exited %d", st);
	/* Root's bytes are as root left them. */
	gt_expect_and_write(a.ptr, SIZE, 1, 2);
	GPB(gpb_free(c, a.id));
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: a client of uid %d used VMM memory and nothing it was not granted\n", NOBODY);
	return 0;
}
