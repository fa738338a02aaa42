/*
 * fwalloc.h - a framework's allocator over the broker: what PyTorch's
 * pluggable allocator (torch.c) and CuPy's CFunctionAllocator (cupy.c)
 * share. Frameworks allocate by size and CUDA ordinal and free by pointer;
 * the broker registers instances on devices by UUID and frees by id.
 *
 * One per framework, process-wide (a static object): a client connected
 * at the first call ($GPUBROKER_SOCKET, else the default), an instance per
 * CUDA ordinal registered at the device's first allocation, named
 * $<prefix>NAME (default "<kind>-PID"), in the manual pool with
 * $<prefix>PROPORTION (in (0, 1]; unset: the auto pool) and stream group
 * $<prefix>GROUP, and the pointers handed out.
 *
 * Locks: a mutex (lock) guards the client and instances, held across
 * connecting and registering (two threads must not register one device
 * twice) but not across the allocations and frees, which the library
 * serves from many threads at once (its arenas, lease.h). Those are in a
 * read section of "users" for the client they use; replacing a client the
 * daemon dropped is its writer, which waits until no call uses the old
 * one. users is a lock of a reader flag per thread (fwalloc.c): a shared
 * read lock is a cache line every call writes, which made two threads
 * slower than one (issue 29). The pointers handed out are kept in
 * FWALLOC_SHARDS tables, each with its own mutex and figures: a thread
 * puts its allocations in its own and looks there first when it frees.
 * Order: users, then lock, then a shard's lock.
 *
 * fork: the child forgets the parent's client and pointers (not its own)
 * and connects afresh if it allocates.
 */
#ifndef GPB_CLIENT_FWALLOC_H
#define GPB_CLIENT_FWALLOC_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpubroker.h"
#include "thread.h"

#define FWALLOC_MAX_DEVICES 64 /* CUDA ordinals served (more than any node has) */

struct fwalloc_ptr {
	void *ptr; /* NULL: an empty slot */
	uint64_t id;
	uint64_t size;
	int device;
};

/* The figures of one CUDA ordinal (PyTorch's memory_stats names them). */
struct fwalloc_figures {
	uint64_t allocated, peak, live, allocs, frees, refused;
};

#define FWALLOC_SHARDS 8 /* pointer tables (the threads are dealt out over them) */

/* One table of the pointers handed out, with the figures of its blocks. */
struct fwalloc_shard {
	pthread_mutex_t lock;
	/* Open addressing, linear probing, power-of-two size, at most half full. */
	struct fwalloc_ptr *ptrs;
	size_t cap, count;
	struct fwalloc_figures figures[FWALLOC_MAX_DEVICES];
} __attribute__((aligned(THREAD_APART)));

/* One thread's side of users: how deep it is in read sections (written
 * by its thread, read by a writer), and whether a live thread has it. */
struct fwalloc_reader {
	unsigned depth;
	bool taken;
	struct fwalloc_reader *next;
} __attribute__((aligned(THREAD_APART)));

struct fwalloc {
	const char *kind;     /* "torch": the client's name, the default instance name */
	const char *prefix;   /* "GPUBROKER_TORCH_": the settings' variables */
	const char *alloc_fn; /* "gpb_torch_alloc": what a bad free names */
	/* The client's and the default instance's name when set before the
	 * first call (the interposer: the program's), else kind and kind-PID. */
	char name[64];
	pthread_mutex_t lock;
	/* users' writer side: held by the writer, which sets writer. */
	pthread_mutex_t writer_lock;
	bool writer;
	struct fwalloc_reader *readers; /* every thread's that called (never shrinks) */
	unsigned index;                 /* in the fork list: the thread's reader slot */
	/* Set under lock, read in a read section of users with no lock. */
	gpb_client *client;
	uint64_t instance[FWALLOC_MAX_DEVICES]; /* 0: not registered yet */
	struct fwalloc_shard shards[FWALLOC_SHARDS];
	bool forked_handler; /* listed for the fork handlers (index set) */
};

#define FWALLOC_INIT(kind_, prefix_, alloc_fn_)                                                    \
	{                                                                                          \
		.kind = (kind_), .prefix = (prefix_), .alloc_fn = (alloc_fn_),                     \
		.lock = PTHREAD_MUTEX_INITIALIZER, .writer_lock = PTHREAD_MUTEX_INITIALIZER,       \
		.shards = {                                                                        \
			[0 ... FWALLOC_SHARDS - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER}           \
		}                                                                                  \
	}

/*
 * @size bytes on CUDA ordinal @device: gpb_alloc_async on @stream when
 * @ordered (the framework frees on the stream it allocated on), else
 * gpb_alloc. 0 with *out set, or a GPB_E_* code with the reason set.
 */
int fwalloc_alloc(struct fwalloc *fw, size_t size, int device, void *stream, bool ordered,
                  void **out);
/* Frees @ptr from fwalloc_alloc: gpb_free_async on @stream when @ordered,
 * else gpb_free. 0 or a GPB_E_* code (GPB_E_NOT_FOUND: not this one's). */
int fwalloc_free(struct fwalloc *fw, void *ptr, void *stream, bool ordered);
/* @device's figures (gpb_torch_stats): the blocks handed out, counted
 * here, and what the daemon charges the instance (0 before its first
 * allocation: nothing is registered for a look). The peak is the sum of
 * each table's: exact while one thread allocates, never below the true
 * peak when several do (a global peak would be a line every call writes). */
int fwalloc_stats(struct fwalloc *fw, int device, struct gpb_framework_stats *out);
/* Sets @device's peak to what is allocated now. */
int fwalloc_reset_peak(struct fwalloc *fw, int device);
/* Connects if not connected (registers nothing): 0 or a GPB_E_* code. */
int fwalloc_connect(struct fwalloc *fw);
/* The block handed out that holds @ptr (its start or inside it): true with
 * *base and *size set, false when none does. A block's start is one
 * lookup; a pointer inside a block walks every pointer (queries, not the
 * allocation path). */
bool fwalloc_find(struct fwalloc *fw, const void *ptr, void **base, uint64_t *size);
/* @device's instance (registered if need be) and its figures. */
int fwalloc_mem_info(struct fwalloc *fw, int device, uint64_t *instance, struct gpb_mem_info *out);

#endif
