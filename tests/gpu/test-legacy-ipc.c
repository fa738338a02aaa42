/*
 * test-legacy-ipc.c (gpu-legacy-ipc) - who can open a legacy IPC handle
 * (issue 15, findings 1 and 9).
 *
 * - The daemon's log says which uid's processes can open its legacy
 *   handles (its own), and that other users and PID namespaces cannot.
 * - A client in another PID namespace is refused, with an error that says
 *   why (GPB_E_BACKEND naming the PID namespace), and the daemon keeps
 *   nothing for it. The fake pretends (FAKECUDA_PIDNS); on a GPU, as root,
 *   a real namespace (unshare) is tried and what the driver says printed.
 * - Run as root: a client of another uid is refused under the fake's
 *   default share policy (same-uid), with the error naming the daemon's
 *   user; under FAKECUDA_IPC_POLICY=all it maps, writes and reads back. On
 *   a GPU whether the handle opens across uids is printed.
 * - Two handles of consecutive allocations: how many bytes differ, and
 *   whether a handle changed in those bytes opens the other allocation
 *   (printed: the bearer-token question only a GPU settles).
 * Before the fix the log said nothing and the library's error named only
 * the driver's code; the fake opened across uids and namespaces.
 */
#include "gpu-legacy.h"

#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A client: allocates 1 MiB; "ok" when it mapped, wrote and read back,
 * else "refused: <error>". Exit 0 either way. */
static int client(const char *socket, const char *who)
{
	gpb_client *c = NULL;
	struct gpb_allocation a;
	if (strcmp(who, "other-uid") == 0)
		gl_become_other_user();
	GPB(gpb_connect(socket, "gpu-legacy-ipc", &c));
	int rc = gpb_alloc(c, gt_register(c, 0), 1u << 20, 0, &a);
	if (rc < 0) {
		printf("refused %d: %s\n", rc, gpb_last_error());
		CHECK(gt_status_used(c) == 0);
	} else {
		unsigned char buf[4096];
		gt_cuda_context(0);
		gt_fill(buf, sizeof(buf), 3);
		CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a.ptr, buf, sizeof(buf)));
		gt_expect_and_write(a.ptr, sizeof(buf), 3, 4);
		GPB(gpb_free(c, a.id));
		printf("ok\n");
	}
	gpb_disconnect(c);
	return 0;
}

/* Runs a client; returns its line. With @newns, in a new PID namespace. */
static void run_client(const char *socket, const char *who, bool newns, char *line, size_t len)
{
	int out;
	char *args[] = {"client", (char *)socket, (char *)who, NULL};
	if (newns)
		CHECK(unshare(CLONE_NEWPID) == 0);
	pid_t pid = gt_spawn_self(args, &out);
	bool got = gt_read_line(out, line, len);
	int st = gt_wait(pid);
	if (!got || st != 0)
		GT_FAIL("the %s client%s exited %d having written '%s'", who,
		        newns ? " in a new PID namespace" : "", st, got ? line : "(nothing)");
	close(out);
}

/* Two 2 MiB allocations: prints both handles, waits to be killed. */
static int exporter(void) __attribute__((noreturn));
static int exporter(void)
{
	CUdeviceptr p[2];
	gt_cuda_context(0);
	for (int i = 0; i < 2; i++) {
		CUipcMemHandle h;
		CU(cu.MemAlloc(&p[i], 2u << 20));
		gl_write_marker((void *)(uintptr_t)p[i], 30 + (unsigned)i);
		CU(cu.IpcGetMemHandle(&h, p[i]));
		for (size_t j = 0; j < sizeof(h.reserved); j++)
			printf("%02x", (unsigned char)h.reserved[j]);
		printf("\n");
	}
	fflush(stdout);
	for (;;)
		pause();
}

static void parse_handle(const char *line, CUipcMemHandle *h)
{
	CHECK(strlen(line) == 2 * sizeof(h->reserved));
	for (size_t i = 0; i < sizeof(h->reserved); i++) {
		unsigned x;
		CHECK(sscanf(line + 2 * i, "%2x", &x) == 1);
		h->reserved[i] = (char)x;
	}
}

/* Do two handles differ in few bytes, and does a changed one open the other? */
static void handle_bytes(void)
{
	char line[2][160];
	int out;
	char *args[] = {"exporter", NULL};
	pid_t pid = gt_spawn_self(args, &out);
	CUipcMemHandle h[2];
	for (int i = 0; i < 2; i++) {
		CHECK(gt_read_line(out, line[i], sizeof(line[i])));
		parse_handle(line[i], &h[i]);
	}
	int differ = 0, opened = 0;
	for (size_t j = 0; j < sizeof(h[0].reserved); j++) {
		if (h[0].reserved[j] == h[1].reserved[j])
			continue;
		differ++;
		/* The first handle with one byte of the second. */
		CUipcMemHandle x = h[0];
		x.reserved[j] = h[1].reserved[j];
		CUdeviceptr p;
		if (cu.IpcOpenMemHandle(&p, x, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
			continue;
		size_t range;
		if (gl_range_holds_marker((void *)(uintptr_t)p, 31, &range))
			opened++;
		cu.IpcCloseMemHandle(p);
	}
	printf("two consecutive handles differ in %d of 64 bytes; changing one byte of the first "
	       "opened the second %d time(s)\n",
	       differ, opened);
	kill(pid, SIGKILL);
	gt_wait(pid);
	close(out);
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (argc == 4 && strcmp(argv[1], "client") == 0)
		return client(argv[2], argv[3]);
	if (argc == 2 && strcmp(argv[1], "exporter") == 0)
		return exporter();
	if (gt_vmm()) {
		printf("SKIP: transport vmm hands out no legacy handles (cuda-fake-ipc-legacy-ipc, "
		       "gpu-ipc-legacy-ipc run this; test-gpu-vmm and test-gpu-vmm-uid check vmm "
		       "across uids and PID namespaces)\n");
		return GT_SKIP;
	}

	gt_cuda_context(0);
	struct gt_daemon d;
	const char *extra[] = {"--socket-mode", "0666", NULL};
	gt_daemon_start(&d, "cuda", extra, NULL);
	gl_open_to_others(&d);
	char want[160], line[1024];
	snprintf(want, sizeof(want),
	         "legacy IPC handles (cuIpcOpenMemHandle) open in processes of uid %u",
	         (unsigned)gt_daemon_uid());
	CHECK(gt_log_contains(&d, want));

	/* Finding 9: another PID namespace. */
	if (gt_fake()) {
		setenv("FAKECUDA_PIDNS", "4026531999", 1);
		run_client(d.socket, "same-uid", false, line, sizeof(line));
		unsetenv("FAKECUDA_PIDNS");
		printf("in another PID namespace: %s\n", line);
		CHECK(strncmp(line, "refused", 7) == 0 && strstr(line, "PID namespace"));
	} else if (gl_can_switch_uid()) {
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			run_client(d.socket, "same-uid", true, line, sizeof(line));
			printf("in another PID namespace: %s\n", line);
			fflush(stdout);
			_exit(0);
		}
		CHECK(gt_wait(pid) == 0);
	} else {
		printf("SKIP (part): a PID namespace needs root\n");
	}

	/* Finding 1: another uid. */
	if (gl_can_switch_uid()) {
		/* The fake's default policy for the refusal, whatever this run's
		 * is (cuda-fake-ipc-xuid-X runs with =all). */
		char policy[32];
		snprintf(policy, sizeof(policy), "%s", getenv("FAKECUDA_IPC_POLICY") ?: "same-uid");
		setenv("FAKECUDA_IPC_POLICY", "same-uid", 1);
		run_client(d.socket, "other-uid", false, line, sizeof(line));
		printf("a client of uid %u, the driver's policy: %s\n", GL_OTHER_UID, line);
		if (gt_fake()) {
			CHECK(strncmp(line, "refused", 7) == 0 && strstr(line, "daemon's user"));
			setenv("FAKECUDA_IPC_POLICY", "all", 1);
			run_client(d.socket, "other-uid", false, line, sizeof(line));
			setenv("FAKECUDA_IPC_POLICY", policy, 1);
			printf("a client of uid %u, policy all: %s\n", GL_OTHER_UID, line);
			CHECK(strcmp(line, "ok") == 0);
		}
	} else {
		printf("SKIP (part): a client of another uid needs root\n");
	}
	run_client(d.socket, "same-uid", false, line, sizeof(line));
	CHECK(strcmp(line, "ok") == 0);
	handle_bytes();

	gpb_client *c = gt_connect(&d, "gpu-legacy-ipc-check");
	gt_wait_slabs(c, 0, 0);
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: legacy IPC's users stated, refusals explained\n");
	return 0;
}
