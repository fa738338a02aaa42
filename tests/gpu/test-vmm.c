/*
 * test-vmm.c (gpu-vmm) - the transports, and the VMM calls as the driver
 * takes them.
 *
 * - Transport selection: `devices` shows the transport this run asked for
 *   (vmm, or ipc with --cuda-transport ipc); with the fake, a device without
 *   POSIX descriptor export gets ipc under auto with the reason logged, and
 *   under --cuda-transport vmm is left out (the daemon does not start).
 * - The driver's VMM calls (on the fake and on a GPU alike): what the
 *   driver refuses (sizes and offsets off the granularity, mapping outside
 *   a reservation, over a mapping or past the memory, access before a
 *   mapping, exporting a handle made without the descriptor type, importing
 *   what is no such descriptor, releasing twice, cuMemFree and legacy IPC
 *   of VMM memory) is refused; two mappings of one allocation, and an
 *   import of its descriptor, see the same bytes; releasing the handle
 *   keeps the memory while a mapping lives.
 * - Reference counting across processes: a child maps the memory from the
 *   descriptor and writes; the creator releases its handle; the child
 *   still reads its bytes and the memory still counts in cuMemGetInfo until
 *   the child lets go (fake: its records say so).
 * - Through the broker (transport vmm): a slab is readable and writable from
 *   every device of the process that can reach its device as a peer (two
 *   fake devices); it is mapped once per process,
 *   with the number of driver calls that costs (printed, and checked with
 *   the fake), and 1000 alloc+free cycles in a held slab import nothing.
 * - Exact accounting (transport vmm): a process that closes its connection
 *   but keeps its mapping (here a raw client: the descriptor from the
 *   grant, mapped by hand) keeps the slab counted (`stats` slabs) until it
 *   exits, and its bytes stay (also when the slab was parting: invalidated,
 *   never answered); a client that disconnects through the
 *   library (goodbye) lets the slab go at once while its process lives on.
 * - Finding 9 (fake): a client in another PID namespace maps VMM memory.
 */
#include "gpu-common.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>

static unsigned fake_vmm_live(void)
{
	unsigned (*fn)(void);
	void *sym = cu.lib ? dlsym(cu.lib, "fakecuda_vmm_live") : NULL;
	if (!sym)
		return 0;
	memcpy(&fn, &sym, sizeof(fn));
	return fn();
}

static CUmemAllocationProp prop_of(CUmemAllocationHandleType types)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.requestedHandleTypes = types;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = 0;
	return p;
}

static void set_rw(CUdeviceptr va, size_t n)
{
	CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
	                     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CU(cu.MemSetAccess(va, n, &a, 1));
}

/* Imports descriptor @fd (closing it) and maps one granule of it,
 * readable and writable, the handle released: the mapping holds it. */
static CUdeviceptr map_fd(int fd, size_t *granularity)
{
	CUmemAllocationProp prop = prop_of(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	size_t g = 0;
	CU(cu.MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CU(cu.MemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
	                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	CU(cu.MemAddressReserve(&va, g, 0, 0, 0));
	CU(cu.MemMap(va, g, 0, h, 0));
	CU(cu.MemRelease(h));
	set_rw(va, g);
	if (granularity)
		*granularity = g;
	return va;
}

static void transports(void)
{
	struct gt_daemon d;
	char t[16];
	gt_daemon_start(&d, "cuda", NULL, NULL);
	gpb_client *c = gt_connect(&d, "gpu-vmm-transport");
	gt_device_transport(c, 0, t, sizeof(t));
	printf("transport %s: devices says %s\n", gt_transport(), t);
	CHECK(strcmp(t, gt_vmm() ? "vmm" : "ipc") == 0);
	/* Who can open legacy handles is said only where they are made. */
	CHECK(gt_log_contains(&d, "legacy IPC handles (cuIpcOpenMemHandle) open") == !gt_vmm());
	gpb_disconnect(c);
	gt_daemon_stop(&d);
	if (!gt_fake())
		return;

	/* auto without descriptor export: ipc, and the log says why. */
	const char *no_fd[] = {"FAKECUDA_NO_VMM_FD=1", NULL};
	const char *autot[] = {"--cuda-transport", "auto", NULL};
	gt_daemon_start(&d, "cuda", autot, no_fd);
	c = gt_connect(&d, "gpu-vmm-auto");
	gt_device_transport(c, 0, t, sizeof(t));
	CHECK(strcmp(t, "ipc") == 0);
	CHECK(gt_log_contains(&d, "transport ipc, not vmm: the device cannot export memory as "
	                          "a POSIX file descriptor"));
	CHECK(gt_log_contains(&d, "legacy IPC handles (cuIpcOpenMemHandle) open"));
	gpb_disconnect(c);
	gt_daemon_stop(&d);

	/* vmm asked for, no VMM: the device is left out, nothing to serve. */
	const char *no_vmm[] = {"FAKECUDA_NO_VMM=1", NULL};
	const char *vmm[] = {"--cuda-transport", "vmm", NULL};
	CHECK(gt_daemon_run_to_exit(&d, "cuda", vmm, no_vmm) != 0);
	CHECK(gt_log_contains(&d, "left out: cuda_transport is vmm, but the device reports no "
	                          "virtual memory management"));
	unlink(d.log);
	rmdir(d.dir);
}

/* One reply line of a raw connection, and the descriptor on it (or -1). */
static void raw_reply(int sock, char *buf, size_t len, int *fd)
{
	size_t n = 0;
	*fd = -1;
	while (n + 1 < len) {
		char ch;
		union {
			struct cmsghdr h;
			char space[CMSG_SPACE(sizeof(int))];
		} ctl;
		struct iovec iov = {.iov_base = &ch, .iov_len = 1};
		struct msghdr msg = {.msg_iov = &iov,
		                     .msg_iovlen = 1,
		                     .msg_control = &ctl,
		                     .msg_controllen = sizeof(ctl)};
		CHECK(recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) == 1);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		if (c && c->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(c), sizeof(int));
		if (ch == '\n')
			break;
		buf[n++] = ch;
	}
	buf[n] = '\0';
}

/* Sends one request line; returns the reply's result (the reply freed
 * with *root). */
static const cJSON *raw_call(int sock, const char *line, cJSON **root, int *fd)
{
	static char reply[65536];
	CHECK(write(sock, line, strlen(line)) == (ssize_t)strlen(line));
	raw_reply(sock, reply, sizeof(reply), fd);
	*root = cJSON_Parse(reply);
	const cJSON *r = cJSON_GetObjectItem(*root, "result");
	if (!r)
		GT_FAIL("reply without a result: %s", reply);
	return r;
}

/* The child of the accounting case: allocates over a raw connection, maps
 * the descriptor itself, writes, closes the socket without goodbye and
 * keeps the mapping until told to check it and exit. */
static int child_lingers(const char *path, bool invalidated)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	cJSON *root;
	int fd;
	char line[256];
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(sock >= 0 && connect(sock, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	raw_call(sock, "{\"id\":\"1\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}\n", &root,
	         &fd);
	cJSON_Delete(root);
	const cJSON *r =
	    raw_call(sock, "{\"id\":\"2\",\"method\":\"register\",\"params\":{\"name\":\"l\"}}\n",
	             &root, &fd);
	snprintf(line, sizeof(line),
	         "{\"id\":\"3\",\"method\":\"alloc\",\"params\":{\"instance\":\"%s\",\"size\":"
	         "\"1048576\"}}\n",
	         cJSON_GetObjectItem(r, "instance")->valuestring);
	cJSON_Delete(root);
	r = raw_call(sock, line, &root, &fd);
	CHECK(fd >= 0 && cJSON_IsTrue(cJSON_GetObjectItem(r, "vmm")));
	cJSON_Delete(root);
	gt_cuda_context(0);
	CUdeviceptr va = map_fd(fd, NULL);
	unsigned char buf[4096];
	gt_fill(buf, sizeof(buf), 31);
	CU(cu.MemcpyHtoD(va, buf, sizeof(buf)));
	if (invalidated) {
		/* The parent invalidates; this client never answers. */
		printf("mapped\n");
		if (!fgets(line, sizeof(line), stdin))
			GT_FAIL("no word from the parent");
	}
	close(sock);
	printf("closed\n");
	if (!fgets(line, sizeof(line), stdin))
		GT_FAIL("no word from the parent");
	gt_expect_and_write((void *)(uintptr_t)va, sizeof(buf), 31, 32);
	return 0;
}

/* A client that allocates, writes and reads back (the other-PID-namespace
 * case: the fake pretends one through FAKECUDA_PIDNS). */
static int child_uses(const char *socket)
{
	gpb_client *c = NULL;
	struct gpb_allocation a;
	unsigned char buf[4096];
	GPB(gpb_connect(socket, "gpu-vmm-pidns", &c));
	GPB(gpb_alloc(c, gt_register(c, 0), 1 << 20, 0, &a));
	gt_cuda_context(0);
	gt_fill(buf, sizeof(buf), 41);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a.ptr, buf, sizeof(buf)));
	gt_expect_and_write(a.ptr, sizeof(buf), 41, 42);
	GPB(gpb_free(c, a.id));
	gpb_disconnect(c);
	return 0;
}

/* Finding 9: a client in another PID namespace than the daemon maps VMM
 * memory (no pid in a descriptor), where a legacy handle is refused
 * (test-gpu-legacy-ipc). Fake only: it pretends the namespace. */
static void other_pidns(void)
{
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, NULL);
	setenv("FAKECUDA_PIDNS", "4026531999", 1);
	char *args[] = {"uses", d.socket, NULL};
	pid_t pid = gt_spawn_self(args, NULL);
	unsetenv("FAKECUDA_PIDNS");
	CHECK(gt_wait(pid) == 0);
	gt_daemon_stop(&d);
	printf("ok: a client in another PID namespace mapped, wrote and read VMM memory\n");
}

/* The child of the goodbye case: disconnects through the library and
 * lives on until told. */
static int child_goodbye(const char *socket)
{
	char line[16];
	gpb_client *c = NULL;
	struct gpb_allocation a;
	GPB(gpb_connect(socket, "gpu-vmm-goodbye", &c));
	GPB(gpb_alloc(c, gt_register(c, 0), 1 << 20, 0, &a));
	gpb_disconnect(c);
	printf("disconnected\n");
	if (!fgets(line, sizeof(line), stdin))
		GT_FAIL("no word from the parent");
	return 0;
}

/* Spawns this program as @role with the socket, its stdin a pipe whose
 * write end is returned in *to, its stdout read from *from. */
static pid_t spawn_role(const char *role, const char *socket, int *to, int *from)
{
	int p[2];
	/* Close-on-exec: the child must not hold its own stdin's write end. */
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	int saved = dup(STDIN_FILENO);
	dup2(p[0], STDIN_FILENO);
	close(p[0]);
	char *args[] = {(char *)role, (char *)socket, NULL};
	pid_t pid = gt_spawn_self(args, from);
	dup2(saved, STDIN_FILENO);
	close(saved);
	*to = p[1];
	return pid;
}

static uint64_t slabs_now(gpb_client *c)
{
	struct gpb_pool_stats ps = {0};
	GPB(gpb_stats(c, 0, &ps));
	return ps.slabs;
}

static void accounting(void)
{
	struct gt_daemon d;
	char line[64];
	int to, from;
	gt_daemon_start(&d, "cuda", NULL, NULL);
	gpb_client *admin = gt_connect(&d, "gpu-vmm-admin");
	/* One slab per allocation, returned when let go: nothing cached. */
	GPB(gpb_set_allocator(admin, "direct"));

	/* Held when the connection closed, or parting after an invalidate
	 * the client never answered. */
	for (int inv = 0; inv < 2; inv++) {
		pid_t pid = spawn_role(inv ? "linger-inv" : "linger", d.socket, &to, &from);
		if (inv) {
			CHECK(gt_read_line(from, line, sizeof(line)) &&
			      strcmp(line, "mapped") == 0);
			GPB(gpb_invalidate_all(admin));
			CHECK(write(to, "close\n", 6) == 6);
		}
		CHECK(gt_read_line(from, line, sizeof(line)) && strcmp(line, "closed") == 0);
		/* The connection is gone, the mapping is not: the slab counts. */
		for (int i = 0; i < 30; i++) {
			if (slabs_now(admin) != 1)
				GT_FAIL("the slab of a process that still maps it was let go (%llu "
				        "slabs, invalidated %d)",
				        (unsigned long long)slabs_now(admin), inv);
			poll(NULL, 0, 10);
		}
		CHECK(write(to, "go\n", 3) == 3);
		CHECK(gt_wait(pid) == 0);
		close(to);
		close(from);
		gt_wait_slabs(admin, 0, 0);
	}

	pid_t pid = spawn_role("goodbye", d.socket, &to, &from);
	CHECK(gt_read_line(from, line, sizeof(line)) && strcmp(line, "disconnected") == 0);
	/* Said goodbye: let go while its process lives on. */
	gt_wait_slabs(admin, 0, 0);
	CHECK(write(to, "go\n", 3) == 3);
	CHECK(gt_wait(pid) == 0);
	close(to);
	close(from);
	gpb_disconnect(admin);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: a slab counts until every process that maps it let go\n");
}

/* The child of the reference-counting case: maps the memory of descriptor
 * @fd, writes pattern 7, says so, waits for the parent's release, checks
 * the bytes, lets go. */
static int child_holds(int fd)
{
	size_t g = 0;
	char line[16];
	gt_cuda_context(0);
	CUdeviceptr va = map_fd(fd, &g);
	gt_expect_and_write((void *)(uintptr_t)va, 4096, 5, 7);
	printf("mapped\n");
	if (!fgets(line, sizeof(line), stdin) || strcmp(line, "released\n") != 0)
		GT_FAIL("no word from the parent");
	/* The creator let go: the mapping still holds the memory. */
	gt_expect_and_write((void *)(uintptr_t)va, 4096, 7, 8);
	CU(cu.MemUnmap(va, g));
	CU(cu.MemAddressFree(va, g));
	return 0;
}

static void driver_calls(void)
{
	CUmemAllocationProp prop = prop_of(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CUmemAllocationProp plain = prop_of(CU_MEM_HANDLE_TYPE_NONE);
	CUmemGenericAllocationHandle h, h2, h3;
	CUdeviceptr va;
	size_t g = 0, free0, free1, total;
	int fd = -1;

	gt_cuda_context(0);
	CU(cu.MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK(g >= 4096 && (g & (g - 1)) == 0);
	gt_mem_info(&free0, &total);

	/* Sizes off the granularity, flags, a device that is not there. */
	CHECK(cu.MemCreate(&h, g / 2, &prop, 0) != CUDA_SUCCESS);
	CHECK(cu.MemCreate(&h, 0, &prop, 0) != CUDA_SUCCESS);
	CHECK(cu.MemCreate(&h, g, &prop, 1) != CUDA_SUCCESS);
	CUmemAllocationProp nodev = prop;
	int n = 0;
	CU(cu.DeviceGetCount(&n));
	nodev.location.id = n;
	CHECK(cu.MemCreate(&h, g, &nodev, 0) != CUDA_SUCCESS);

	CU(cu.MemCreate(&h, g, &prop, 0));
	CU(cu.MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK(fd >= 0);
	/* Made without the descriptor type: not exportable as one. */
	int fd2 = -1;
	CU(cu.MemCreate(&h2, g, &plain, 0));
	CHECK(cu.MemExportToShareableHandle(&fd2, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	                                    0) != CUDA_SUCCESS);
	CU(cu.MemRelease(h2));
	/* Released twice: the second is refused. */
	CHECK(cu.MemRelease(h2) != CUDA_SUCCESS);
	/* What is no exported memory does not import. */
	int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(null_fd >= 0);
	CHECK(cu.MemImportFromShareableHandle(&h2, (void *)(intptr_t)null_fd,
	                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
	      CUDA_SUCCESS);
	close(null_fd);

	CU(cu.MemAddressReserve(&va, 2 * g, 0, 0, 0));
	/* Access before a mapping; a mapping off the granularity, past the
	 * memory, or outside the reservation. */
	CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
	                      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CHECK(cu.MemSetAccess(va, g, &rw, 1) != CUDA_SUCCESS);
	CHECK(cu.MemMap(va + g / 2, g, 0, h, 0) != CUDA_SUCCESS);
	CHECK(cu.MemMap(va, g, g, h, 0) != CUDA_SUCCESS);
	CHECK(cu.MemMap(va, 2 * g, 0, h, 0) != CUDA_SUCCESS);
	CHECK(cu.MemMap(va + 2 * g, g, 0, h, 0) != CUDA_SUCCESS);
	CU(cu.MemMap(va, g, 0, h, 0));
	/* Over a mapping. */
	CHECK(cu.MemMap(va, g, 0, h, 0) != CUDA_SUCCESS);
	/* The same memory twice: one set of bytes. */
	CU(cu.MemMap(va + g, g, 0, h, 0));
	set_rw(va, 2 * g);
	unsigned char buf[4096], want[4096];
	gt_fill(want, sizeof(want), 11);
	CU(cu.MemcpyHtoD(va, want, sizeof(want)));
	CU(cu.MemcpyDtoH(buf, va + g, sizeof(buf)));
	CHECK(memcmp(buf, want, sizeof(buf)) == 0);
	/* Not cuMemAlloc memory: neither freed nor shared by legacy IPC. */
	CUipcMemHandle ipc;
	CHECK(cu.MemFree(va) != CUDA_SUCCESS);
	CHECK(cu.IpcGetMemHandle(&ipc, va) != CUDA_SUCCESS);
	/* Part of a mapping does not unmap. */
	if (gt_fake())
		CHECK(cu.MemUnmap(va, g / 2) != CUDA_SUCCESS);
	CU(cu.MemUnmap(va, g));
	/* The handle goes; the mapping at va + g keeps the memory. */
	CU(cu.MemRelease(h));
	CU(cu.MemcpyDtoH(buf, va + g, sizeof(buf)));
	CHECK(memcmp(buf, want, sizeof(buf)) == 0);
	/* Its descriptor imports the same memory. */
	CU(cu.MemImportFromShareableHandle(&h3, (void *)(intptr_t)fd,
	                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CU(cu.MemMap(va, g, 0, h3, 0));
	set_rw(va, g);
	CU(cu.MemcpyDtoH(buf, va, sizeof(buf)));
	CHECK(memcmp(buf, want, sizeof(buf)) == 0);
	CU(cu.MemRelease(h3));
	/* A reservation with mappings in it is not freed (fake: strict). */
	if (gt_fake())
		CHECK(cu.MemAddressFree(va, 2 * g) != CUDA_SUCCESS);
	CU(cu.MemUnmap(va, 2 * g));
	CU(cu.MemAddressFree(va, 2 * g));
	close(fd);
	gt_mem_info(&free1, &total);
	CHECK(free1 == free0 || !gt_fake());
	CHECK(fake_vmm_live() == 0);

	/* Across processes: the creator's release does not free what the
	 * child maps. */
	CU(cu.MemCreate(&h, g, &prop, 0));
	CU(cu.MemAddressReserve(&va, g, 0, 0, 0));
	CU(cu.MemMap(va, g, 0, h, 0));
	set_rw(va, g);
	gt_fill(want, sizeof(want), 5);
	CU(cu.MemcpyHtoD(va, want, sizeof(want)));
	CU(cu.MemUnmap(va, g));
	CU(cu.MemAddressFree(va, g));
	CU(cu.MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	int inherit = fcntl(fd, F_DUPFD, 100); /* not close-on-exec: the child's */
	CHECK(inherit >= 0);
	close(fd);
	char arg[16];
	snprintf(arg, sizeof(arg), "%d", inherit);
	int to_child, from_child;
	pid_t pid = spawn_role("hold", arg, &to_child, &from_child);
	close(inherit);
	char line[64];
	CHECK(gt_read_line(from_child, line, sizeof(line)) && strcmp(line, "mapped") == 0);
	CU(cu.MemRelease(h));
	gt_mem_info(&free1, &total);
	CHECK(free1 <= free0 - g);
	if (gt_fake())
		CHECK(fake_vmm_live() == 1);
	CHECK(write(to_child, "released\n", 9) == 9);
	close(to_child);
	CHECK(gt_wait(pid) == 0);
	close(from_child);
	gt_mem_info(&free1, &total);
	CHECK(free1 == free0 || !gt_fake());
	CHECK(fake_vmm_live() == 0);
	printf("ok: the driver's VMM calls refuse what they must; memory lives while mapped\n");
}

/* Through the broker: one import per slab per process, and what it costs. */
static void broker_mapping(void)
{
	struct gt_daemon d;
	struct gpb_mapping_stats s0, s;
	gt_daemon_start(&d, "cuda", NULL, NULL); /* 64 MiB slabs */
	gpb_client *c = gt_connect(&d, "gpu-vmm-broker");
	uint64_t inst = gt_register(c, 0);
	static const char *const calls[] = {"cuMemImportFromShareableHandle",
	                                    "cuMemAddressReserve",
	                                    "cuMemMap",
	                                    "cuMemSetAccess",
	                                    "cuMemRelease",
	                                    "cuMemUnmap",
	                                    "cuMemAddressFree",
	                                    "cuIpcOpenMemHandle",
	                                    "cuIpcCloseMemHandle"};
	enum { NCALLS = sizeof(calls) / sizeof(calls[0]) };
	uint64_t before[NCALLS], after[NCALLS];
	for (int i = 0; i < NCALLS; i++)
		before[i] = gt_fake_calls(calls[i]);
	GPB(gpb_mapping_stats(&s0));

	struct gpb_allocation keep, x;
	GPB(gpb_alloc(c, inst, 1 << 20, 0, &keep));
	/* Every device of this process that can reach device 0 as a peer may
	 * use the slab, as legacy IPC's lazy peer access allowed. */
	int ndev = 0;
	CU(cu.DeviceGetCount(&ndev));
	for (int i = 1; i < ndev && gt_vmm(); i++) {
		CUdevice dev0, peer;
		int can = 0;
		unsigned long long fl = 0;
		CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = i};
		CU(cu.DeviceGet(&dev0, 0));
		CU(cu.DeviceGet(&peer, i));
		CU(cu.DeviceCanAccessPeer(&can, peer, dev0));
		CU(cu.MemGetAccess(&fl, &loc, (CUdeviceptr)(uintptr_t)keep.ptr));
		CHECK(fl ==
		      (can ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE));
		printf("device %d reaches the slab of device 0: %s\n", i, can ? "yes" : "no");
	}
	/* Scrubbed by the daemon through its own passing mapping. */
	unsigned char buf[4096], zero[4096] = {0};
	CU(cu.MemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)keep.ptr, sizeof(buf)));
	CHECK(memcmp(buf, zero, sizeof(buf)) == 0);
	gt_fill(buf, sizeof(buf), 3);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)keep.ptr, buf, sizeof(buf)));
	gt_expect_and_write(keep.ptr, 4096, 3, 4);
	for (int i = 0; i < 1000; i++) {
		GPB(gpb_alloc(c, inst, 65536, 0, &x));
		CHECK(x.slab == keep.slab);
		GPB(gpb_free(c, x.id));
	}
	GPB(gpb_mapping_stats(&s));
	CHECK(s.opens - s0.opens == 1);
	GPB(gpb_free(c, keep.id));
	CHECK(gpb_release_kept(c) == 1); /* kept (issue 18) until let go */
	GPB(gpb_mapping_stats(&s));
	CHECK(s.closes - s0.closes == 1 && s.open_now == 0);
	for (int i = 0; i < NCALLS; i++)
		after[i] = gt_fake_calls(calls[i]) - before[i];
	if (gt_fake()) {
		printf("driver calls for one slab mapped, 1000 alloc+free in it, and unmapped "
		       "(transport %s):",
		       gt_vmm() ? "vmm" : "ipc");
		for (int i = 0; i < NCALLS; i++)
			printf(" %s %llu", calls[i], (unsigned long long)after[i]);
		printf("\n");
		if (gt_vmm()) {
			/* Five calls to map, two to unmap: once, not per allocation. */
			for (int i = 0; i < 7; i++)
				CHECK(after[i] == 1);
			CHECK(after[7] == 0 && after[8] == 0);
		} else {
			CHECK(after[0] == 0 && after[7] == 1 && after[8] == 1);
		}
	}
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
}

int main(int argc, char **argv)
{
	/* Two fake devices, peers: access to give. */
	if (getenv("GPB_FAKE_CUDA")) {
		setenv("FAKECUDA_DEVICES", "2", 0);
		setenv("FAKECUDA_PEER", "1", 0);
	}
	gt_require_gpu(argc, argv);
	if (argc == 3 && strcmp(argv[1], "hold") == 0)
		return child_holds(atoi(argv[2]));
	if (argc == 3 && strcmp(argv[1], "linger") == 0)
		return child_lingers(argv[2], false);
	if (argc == 3 && strcmp(argv[1], "linger-inv") == 0)
		return child_lingers(argv[2], true);
	if (argc == 3 && strcmp(argv[1], "goodbye") == 0)
		return child_goodbye(argv[2]);
	if (argc == 3 && strcmp(argv[1], "uses") == 0)
		return child_uses(argv[2]);
	transports();
	gt_cuda_context(0);
	broker_mapping();
	if (gt_vmm())
		accounting();
	if (gt_vmm() && gt_fake())
		other_pidns();
	int vmm = 0, fd = 0;
	if (!cu.has_vmm ||
	    cu.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
	                          0) ||
	    cu.DeviceGetAttribute(
	        &fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0) ||
	    vmm != 1 || fd != 1) {
		printf(
		    "SKIP (the driver's VMM calls): device 0 has no VMM with POSIX descriptors\n");
		return 0;
	}
	driver_calls();
	printf("ok: transport %s\n", gt_vmm() ? "vmm" : "ipc");
	return 0;
}
