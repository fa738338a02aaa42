/*
 * fuzz-protocol.c - the frame decoder and the request dispatcher, fed
 * through the daemon's real libuv server (daemon/server/server.c).
 *
 * Each input gets a fresh daemon core: a sim backend of two 16 MiB devices
 * with 2 MiB slabs, a broker with small limits, a server on its own loop.
 * One or two clients are socketpairs attached with server_attach_fd(). The
 * input's bytes are written to them in small uneven chunks, so frames split
 * anywhere (at the delimiter too) and several may arrive in one read; after
 * most chunks the loop runs until idle (uv_run NOWAIT rounds until nothing
 * moves) and the replies are drained, but not always, so the server's
 * write queue fills and the connection pauses and resumes. Then waits may
 * be cancelled, the clients half-close and/or close, and everything must
 * be reclaimed.
 *
 * Input:
 *   byte 0  flags (FZ_*), byte 1 more flags (FZ2_*), byte 2 the chunk seed
 *   (its top bit: write_high_water 512 bytes instead of 4096, so replies
 *   and events queue past it, pause the client and get it dropped);
 *   then client A's stream, and after the first 0x1e byte (a raw control
 *   byte, which the daemon refuses in a frame anyway) client B's stream.
 *   A 0x1d byte in a stream is not sent: the chunk it is in carries a
 *   descriptor instead (SCM_RIGHTS), which the daemon must refuse.
 * In a stream "$0".."$7" stand for the 8 most recent allocation ids the
 * clients were given (replies and allocation_ready events): ids are random,
 * the fuzzer could never guess one, and free/attach/detach/claim of real
 * allocations is where the bugs would be.
 *
 * GPB_FUZZ_TRACE=1 prints every line the daemon sends; GPB_FUZZ_LOG=debug
 * turns its log on.
 *
 * Checked during the input: broker_check() (pools, sessions, policy) after
 * every 8th loop round and at the end of each phase, and that every line the
 * daemon sent is a JSON reply or event. After
 * each input: no session, instance, allocation or wait left, every pool at
 * zero used and zero live blocks, the loop closes (no libuv handle left),
 * and no JSON node and no descriptor outlived the input.
 *
 * Built twice (tests/fuzz/meson.build): with libFuzzer under -Dfuzz=true,
 * and with replay.c as an ordinary test that runs the corpus and crashes/.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "broker.h"
#include "broker_internal.h"
#include "conf.h"
#include "jsonmem.h"
#include "log.h"
#include "policy.h"
#include "pool.h"
#include "proto.h"
#include "server.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
	FZ_ADMIN_A = 1u << 0,       /* client A is an administrator */
	FZ_ADMIN_B = 1u << 1,       /* client B is an administrator */
	FZ_SAME_UID = 1u << 2,      /* B has A's uid (attach works across them) */
	FZ_HALF_CLOSE = 1u << 3,    /* end with shutdown(SHUT_WR) and read the rest */
	FZ_CANCEL = 1u << 4,        /* answer every wait with a timeout before the end */
	FZ_NO_DRAIN = 1u << 5,      /* read replies only when the server stops reading */
	FZ_SMALL_BUF = 1u << 6,     /* tiny socket buffers: partial writes, queued replies */
	FZ_CLOSE_A_EARLY = 1u << 7, /* A closes as soon as its stream is written */
};

enum {
	FZ2_ACTIVE = 1u << 0,       /* the policy starts in active mode */
	FZ2_ONE_PER_UID = 1u << 1,  /* B refused: max_clients_per_uid 1 (same uid), else
	                               max_clients 2 with 1 kept for admins (B gets
	                               in only as an admin) */
	FZ2_RELOAD_FAILS = 1u << 2, /* the `reload` request finds a bad file */
	FZ2_FLOOD = 1u << 3,        /* A's stream ends in 70000 bytes without a newline */
	FZ2_BIG_SHARE = 1u << 4,    /* min_auto_share 0.3: the auto pool fills up */
	FZ2_ONE_DEVICE = 1u << 5,   /* one device instead of two */
	FZ2_BYTEWISE = 1u << 6,     /* every chunk is one byte (bad input 3) */
	FZ2_INTERLEAVE = 1u << 7,   /* the clients' chunks interleave (else A's stream first) */
};

#define FZ_MEMORY   (16ull << 20)
#define FZ_SLAB     (2ull << 20)
#define FZ_IDS      8
#define FZ_MAX_LOOP 4096

struct fz_client {
	int fd; /* our end; -1 once closed */
	const uint8_t *in;
	size_t in_len, in_pos;
	size_t flood; /* filler bytes still to write after the stream */
	bool done;    /* nothing more will be written */
	bool eof;     /* the server closed its end */
	char *rx;     /* bytes of an incomplete reply line */
	size_t rx_len, rx_cap;
};

struct fz {
	uv_loop_t loop;
	struct broker *broker;
	struct server *srv;
	struct fz_client c[2];
	int nclients;
	unsigned flags, flags2;
	uint32_t rng;
	unsigned rounds;
	bool tiny_high_water;
	char ids[FZ_IDS][17]; /* most recent first */
	int nids;
	struct broker_ghost *kept[16]; /* ghosts whose made-up process "lives" */
	int nkept;
};

static struct conf fz_conf;
static bool fz_reload_fails;
static int fz_devnull = -1; /* the descriptor clients pass */
static bool fz_trace;       /* GPB_FUZZ_TRACE set: print every line the daemon sends */
static char *fz_rx[2];      /* the clients' reply buffers, reused from input to input */
static size_t fz_rx_cap[2];

static __attribute__((format(printf, 1, 2), noreturn)) void fz_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "fuzz-protocol: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
}

static uint32_t fz_rand(struct fz *f)
{
	/* xorshift32: deterministic for a given input. */
	uint32_t x = f->rng;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	f->rng = x;
	return x;
}

static int fz_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		fz_fail("cannot list /proc/self/fd");
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static int fz_reload(struct conf *out, char *message, size_t size)
{
	*out = fz_conf;
	if (!fz_reload_fails)
		return 0;
	snprintf(message, size, "fuzz.conf:1: 'x' is bad");
	return -EINVAL;
}

static void fz_check(struct fz *f)
{
	char msg[256] = "";
	if (broker_check(f->broker, msg, sizeof(msg)) < 0)
		fz_fail("broker_check: %s", msg);
}

/* Remembers the id of an allocation: one a reply granted (alloc, attach,
 * claim), or one `allocation_ready` announced. */
static void fz_note_id(struct fz *f, const cJSON *obj)
{
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "id");
	if (!cJSON_IsString(id) || strlen(id->valuestring) != 16)
		return;
	memmove(f->ids[1], f->ids[0], sizeof(f->ids[0]) * (FZ_IDS - 1));
	memcpy(f->ids[0], id->valuestring, 17);
	if (f->nids < FZ_IDS)
		f->nids++;
}

/*
 * Every complete line the daemon sent must be one JSON object: a reply (an
 * id, and a result or an error with a code) or an event. Parsed with cJSON
 * itself rather than proto_reply_parse: the system's cJSON carries no
 * coverage instrumentation, so checking replies costs the fuzzer little and
 * adds no client-side paths to its coverage.
 */
static void fz_parse_lines(struct fz *f, struct fz_client *c)
{
	size_t start = 0;
	for (size_t i = 0; i < c->rx_len; i++) {
		if (c->rx[i] != '\n')
			continue;
		char *line = c->rx + start;
		int len = (int)(i - start);
		if (fz_trace)
			fprintf(stderr, "%c< %.*s\n", c == &f->c[0] ? 'A' : 'B',
			        len > 400 ? 400 : len, line);
		c->rx[i] = '\0';
		const char *end = NULL;
		cJSON *root = cJSON_ParseWithOpts(line, &end, 1);
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
		const cJSON *result = cJSON_GetObjectItemCaseSensitive(root, "result");
		const cJSON *error = cJSON_GetObjectItemCaseSensitive(root, "error");
		const cJSON *event = cJSON_GetObjectItemCaseSensitive(root, "event");
		bool reply = (cJSON_IsString(id) || cJSON_IsNull(id)) &&
		             (cJSON_IsObject(result) ||
		              cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(error, "code")));
		if (!cJSON_IsObject(root) || (!reply && !cJSON_IsString(event)))
			fz_fail("the daemon sent a line that is neither reply nor event: %.*s",
			        len > 300 ? 300 : len, line);
		if (cJSON_IsObject(result))
			fz_note_id(f, result);
		if (cJSON_IsString(event) && !strcmp(event->valuestring, "allocation_ready")) {
			const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data"), *a;
			cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(data, "arrays"))
			    fz_note_id(f, a);
		}
		cJSON_Delete(root);
		c->rx[i] = '\n';
		start = i + 1;
	}
	memmove(c->rx, c->rx + start, c->rx_len - start);
	c->rx_len -= start;
}

/* Reads what the server sent to one client; returns the bytes read. */
static size_t fz_drain(struct fz *f, struct fz_client *c)
{
	size_t total = 0;
	while (c->fd >= 0 && !c->eof) {
		if (c->rx_cap - c->rx_len < 65536) {
			size_t cap = c->rx_cap ? c->rx_cap * 2 : 131072;
			if (cap > PROTO_MAX_REPLY + 131072)
				fz_fail("a reply line longer than %u bytes", PROTO_MAX_REPLY);
			char *rx = realloc(c->rx, cap);
			if (!rx)
				fz_fail("out of memory");
			c->rx = rx;
			c->rx_cap = cap;
		}
		union {
			struct cmsghdr align;
			char buf[CMSG_SPACE(sizeof(int) * 16)];
		} ctl;
		struct iovec iov = {c->rx + c->rx_len, c->rx_cap - c->rx_len};
		struct msghdr mh = {.msg_iov = &iov,
		                    .msg_iovlen = 1,
		                    .msg_control = ctl.buf,
		                    .msg_controllen = sizeof(ctl.buf)};
		ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			int nfd = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (int k = 0; k < nfd; k++) {
				int fd;
				memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
				close(fd);
			}
		}
		if (n <= 0) {
			/* EOF, or ECONNRESET when the server closed with our
			 * bytes unread: either way it is gone. */
			c->eof = true;
			c->done = true;
			break;
		}
		c->rx_len += (size_t)n;
		total += (size_t)n;
		fz_parse_lines(f, c);
		if ((size_t)n < iov.iov_len)
			break; /* drained, most likely; the next round reads any rest */
	}
	return total;
}

/*
 * Runs the loop until it is idle: a round (uv_run NOWAIT: every ready
 * descriptor served, which reads all a client has written) after which we
 * read nothing, and no timer, pending callback or closing handle is due.
 */
static void fz_pump(struct fz *f, bool drain)
{
	for (int round = 0; round < FZ_MAX_LOOP; round++) {
		uv_run(&f->loop, UV_RUN_NOWAIT);
		size_t moved = 0;
		for (int i = 0; drain && i < f->nclients; i++)
			moved += fz_drain(f, &f->c[i]);
		/* broker_check walks every pool: after every 8th round here, and
		 * at the end of each phase of the input. */
		if (++f->rounds % 8 == 0)
			fz_check(f);
		if (!moved && (!uv_loop_alive(&f->loop) || uv_backend_timeout(&f->loop) != 0))
			return;
	}
	fz_fail("the loop did not settle in %d rounds", FZ_MAX_LOOP);
}

/* Fills buf with up to want input bytes of c's stream, "$N" expanded. */
static size_t fz_take(struct fz *f, struct fz_client *c, size_t want, char *buf, size_t *consumed,
                      bool *pass_fd)
{
	size_t n = 0, used = 0;
	*pass_fd = false;
	while (used < want && c->in_pos + used < c->in_len) {
		const uint8_t *p = c->in + c->in_pos + used;
		size_t left = c->in_len - c->in_pos - used;
		if (p[0] == 0x1d) {
			*pass_fd = true;
			used++;
			continue;
		}
		if (p[0] == '$' && left >= 2 && p[1] >= '0' && p[1] < '0' + FZ_IDS &&
		    p[1] - '0' < f->nids) {
			memcpy(buf + n, f->ids[p[1] - '0'], 16);
			n += 16;
			used += 2;
			continue;
		}
		buf[n++] = (char)p[0];
		used++;
	}
	if (used == 0 && c->flood > 0) {
		n = want < c->flood ? want : c->flood;
		memset(buf, 'x', n);
		c->flood -= n;
	}
	*consumed = used;
	return n;
}

/* Writes one chunk of c's stream. */
static void fz_write_chunk(struct fz *f, struct fz_client *c)
{
	uint32_t r = fz_rand(f);
	size_t want = (r & 3) == 0 ? 1 + (r >> 8) % 600 : 1 + (r >> 8) % 40;
	if (f->flags2 & FZ2_BYTEWISE)
		want = 1;
	if (c->in_pos >= c->in_len)
		want = 8192; /* the flood */
	char buf[8192 * 2];
	size_t consumed;
	bool pass_fd;
	size_t n = fz_take(f, c, want, buf, &consumed, &pass_fd);
	if (n == 0 && !consumed) {
		c->done = true;
		return;
	}
	if (n == 0)
		buf[n++] = '\n'; /* a descriptor needs a byte to ride on */
	size_t off = 0;
	for (int tries = 0; off < n;) {
		/* Zeroed: the padding after the descriptor goes to the
		 * kernel too, and valgrind rightly flags it. */
		union {
			struct cmsghdr align;
			char buf[CMSG_SPACE(sizeof(int))];
		} ctl = {0};
		struct iovec iov = {buf + off, n - off};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		if (pass_fd) {
			/* Not our own end of the connection: in flight, it would
			 * keep that end open after we close it, so a paused server
			 * would see no hangup until its pause timer, which this
			 * harness never runs (bad input 22 covers that timer). */
			mh.msg_control = ctl.buf;
			mh.msg_controllen = sizeof(ctl.buf);
			struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(cm), &fz_devnull, sizeof(int));
		}
		ssize_t w = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w > 0)
			pass_fd = false;
		if (w > 0) {
			off += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN && tries++ < 4) {
			/* The server is not reading: its replies are unread
			 * (paused), or it is busy. Read them, then retry. */
			fz_pump(f, true);
			continue;
		}
		/* Gone (EPIPE, ECONNRESET) or no longer reading. */
		c->done = true;
		return;
	}
	c->in_pos += consumed;
}

static void fz_client_close(struct fz_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->done = true;
}

static void fz_setup_conf(struct fz *f)
{
	conf_defaults(&fz_conf);
	snprintf(fz_conf.backend, sizeof(fz_conf.backend), "sim");
	fz_conf.admin_group[0] = '\0'; /* no group lookups */
	fz_conf.socket_group[0] = '\0';
	fz_conf.sim_devices = f->flags2 & FZ2_ONE_DEVICE ? 1 : 2;
	fz_conf.sim_memory = FZ_MEMORY;
	fz_conf.log_level = 0;
	fz_conf.max_clients_per_uid = f->flags2 & FZ2_ONE_PER_UID ? 1 : 4;
	fz_conf.limits.slab_size = FZ_SLAB;
	fz_conf.limits.max_instances = 4;
	fz_conf.limits.max_allocations = 12;
	fz_conf.limits.write_high_water = f->tiny_high_water ? 512 : 4096;
	/* Small enough for an input to reach both drops of a client that does
	 * not read: its own backlog, and the most of every client's. */
	fz_conf.max_output_per_client = 4 * fz_conf.limits.write_high_water;
	fz_conf.max_output_total = 24 * 1024;
	fz_conf.admin_reserved_connections = 0;
	if ((f->flags2 & FZ2_ONE_PER_UID) && !(f->flags & FZ_SAME_UID)) {
		fz_conf.limits.max_clients = 2;
		fz_conf.admin_reserved_connections = 1;
	}
	fz_conf.limits.mode = f->flags2 & FZ2_ACTIVE ? POLICY_ACTIVE : POLICY_PASSIVE;
	fz_conf.limits.min_auto_share = f->flags2 & FZ2_BIG_SHARE ? 0.3 : POLICY_MIN_AUTO_SHARE;
	const char *level = getenv("GPB_FUZZ_LOG");
	if (level && log_level_parse(level) > 0)
		fz_conf.log_level = log_level_parse(level);
	log_init(fz_conf.log_level);
	fz_reload_fails = f->flags2 & FZ2_RELOAD_FAILS;
}

static void fz_attach(struct fz *f, int i, uid_t uid, bool admin)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		fz_fail("socketpair: %s", strerror(errno));
	if (f->flags & FZ_SMALL_BUF) {
		int small = 1; /* the kernel's minimum */
		setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
		setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	}
	int rc = server_attach_fd(f->srv, sv[1], uid, uid, 4000 + i, admin);
	if (rc < 0)
		fz_fail("server_attach_fd: %s", uv_strerror(rc));
	f->c[i].fd = sv[0];
	f->nclients = i + 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	jsonmem_install();
	signal(SIGPIPE, SIG_IGN);
	fz_devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fz_devnull < 0)
		fz_fail("/dev/null: %s", strerror(errno));
	fz_trace = getenv("GPB_FUZZ_TRACE") != NULL;
	/* libuv opens a process-wide pipe for signals with the first loop and
	 * keeps it: open it now, so it does not count as a descriptor leaked
	 * by the first input. */
	uv_loop_t warm;
	if (uv_loop_init(&warm) < 0 || uv_loop_close(&warm) < 0)
		fz_fail("uv_loop_init");
	return 0;
}

/* broker_exit_fn: keeps the ghost (its process "lives" until the input's
 * end), or refuses (the process "is gone"). */
static int fz_exit_watch(void *ctx, pid_t pid, int pidfd, struct broker_ghost *ghost)
{
	struct fz *f = ctx;
	(void)pid;
	(void)pidfd;
	if (fz_rand(f) % 2 == 0 || f->nkept == (int)(sizeof(f->kept) / sizeof(f->kept[0])))
		return -ESRCH;
	f->kept[f->nkept++] = ghost;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	static struct fz f;
	memset(&f, 0, sizeof(f));
	for (int i = 0; i < 2; i++) {
		f.c[i].fd = -1;
		f.c[i].rx = fz_rx[i];
		f.c[i].rx_cap = fz_rx_cap[i];
	}
	f.flags = data[0];
	f.flags2 = data[1];
	f.rng = 0x9e3779b9u ^ (uint32_t)(data[2] & 0x7f) * 0x01000193u;
	f.tiny_high_water = data[2] & 0x80;
	data += 3;
	size -= 3;
	const uint8_t *sep = memchr(data, 0x1e, size);
	f.c[0].in = data;
	f.c[0].in_len = sep ? (size_t)(sep - data) : size;
	if (f.flags2 & FZ2_FLOOD)
		f.c[0].flood = 70000;
	if (sep) {
		f.c[1].in = sep + 1;
		f.c[1].in_len = size - (size_t)(sep + 1 - data);
	}

	long json_before = jsonmem_outstanding();
	int fds_before = fz_count_fds();
	fz_setup_conf(&f);

	struct backend_config bcfg = {.sim_devices = fz_conf.sim_devices,
	                              .sim_memory = fz_conf.sim_memory};
	struct backend *backend;
	if (backend_create("sim", &bcfg, &backend) < 0)
		fz_fail("backend_create");
	if (broker_create(backend, &fz_conf.limits, &f.broker) < 0)
		fz_fail("broker_create");
	if (uv_loop_init(&f.loop) < 0)
		fz_fail("uv_loop_init");
	if (server_create(&f.loop, f.broker, &fz_conf, fz_reload, &f.srv) < 0)
		fz_fail("server_create");
	/* The clients' pids are made up: an evicted one's ghost is kept (or,
	 * every other time, let go at once) without watching a real process,
	 * until the input's end, where their processes "exit". */
	broker_set_exit_watch(f.broker, fz_exit_watch, &f);

	fz_attach(&f, 0, 1000, f.flags & FZ_ADMIN_A);
	if (sep)
		fz_attach(&f, 1, f.flags & FZ_SAME_UID ? 1000 : 2000, f.flags & FZ_ADMIN_B);
	fz_pump(&f, true);

	/* The streams, chunk by chunk, clients interleaved. */
	for (;;) {
		int open = 0, pick[2];
		for (int i = 0; i < f.nclients; i++) {
			if (!f.c[i].done)
				pick[open++] = i;
		}
		if (!open)
			break;
		uint32_t r = fz_rand(&f);
		struct fz_client *c =
		    &f.c[f.flags2 & FZ2_INTERLEAVE ? pick[r % (unsigned)open] : pick[0]];
		fz_write_chunk(&f, c);
		if (c == &f.c[0] && c->done && (f.flags & FZ_CLOSE_A_EARLY))
			fz_client_close(c);
		if (fz_rand(&f) % 4 != 0)
			fz_pump(&f, !(f.flags & FZ_NO_DRAIN));
	}
	fz_pump(&f, true);
	fz_check(&f);
	if (f.flags & FZ_CANCEL) {
		broker_waits_cancel(f.broker, -ETIMEDOUT);
		fz_pump(&f, true);
		fz_check(&f);
	}
	if (f.flags & FZ_HALF_CLOSE) {
		/* Answered, then closed by the server: nothing may linger. */
		for (int i = 0; i < f.nclients; i++) {
			if (f.c[i].fd >= 0)
				shutdown(f.c[i].fd, SHUT_WR);
		}
		fz_pump(&f, true);
		if (f.broker->session_count != 0)
			fz_fail("%u sessions still open after the clients half-closed",
			        f.broker->session_count);
	}
	for (int i = 0; i < f.nclients; i++)
		fz_client_close(&f.c[i]);
	fz_pump(&f, false);

	/* The made-up processes of kept ghosts exit now: their fences (an
	 * evicted client's ranges, kept while its process may still write
	 * there) go with them. Only an exit lets a ghost go. */
	struct broker *b = f.broker;
	for (int i = 0; i < f.nkept; i++)
		broker_ghost_release(b, f.kept[i]);
	f.nkept = 0;

	/* Everything reclaimed. */
	fz_check(&f);
	if (b->session_count || b->allocs.count || b->instance_count || b->wait_count ||
	    b->policy.count || b->hosts.count || b->host_used)
		fz_fail("left behind: %u sessions, %llu allocations, %llu instances, %u waits",
		        b->session_count, (unsigned long long)b->allocs.count,
		        (unsigned long long)b->instance_count, b->wait_count);
	for (int d = 0; d < b->device_count; d++) {
		struct pool_stats st;
		pool_get_stats(b->dev[d].pool, &st);
		if (st.used || st.live || b->policy.dev[d].used)
			fz_fail("device %d: %llu bytes in %llu blocks still used", d,
			        (unsigned long long)st.used, (unsigned long long)st.live);
	}
	server_destroy(f.srv);
	int rc = uv_loop_close(&f.loop);
	if (rc < 0)
		fz_fail("uv_loop_close: %s (a handle was left open)", uv_strerror(rc));
	broker_destroy(f.broker);
	for (int i = 0; i < 2; i++) {
		fz_rx[i] = f.c[i].rx; /* kept for the next input */
		fz_rx_cap[i] = f.c[i].rx_cap;
	}
	long json_left = jsonmem_outstanding() - json_before;
	if (json_left != 0)
		fz_fail("%ld cJSON allocations outlived the input", json_left);
	int fds_after = fz_count_fds();
	if (fds_after != fds_before)
		fz_fail("%d descriptors before the input, %d after", fds_before, fds_after);
	return 0;
}
