/*
 * cuda_ctx.h - the one CUDA context per device that all of this process's
 * mappings of that device live in (cuda.c's mappings, fences and host
 * registrations).
 *
 * CUDA lets a legacy IPC handle be opened by one context per device per
 * process, and a pointer mapped in one context is not usable by kernels of
 * another, so every mapping of a device goes into one context: the one
 * current on the calling thread when the process maps its first slab of
 * that device (the application's own, e.g. from cuCtxCreate, or the primary
 * context it made current), else the device's primary context. The record
 * holds it while anything is mapped in it: a primary context is retained
 * (cuDevicePrimaryCtxRetain) and released with the last reference; an own
 * context cannot be retained, it is the application's to keep.
 *
 * A context can die under its mappings: cuDevicePrimaryCtxReset (Numba's
 * Device.reset, cudaDeviceReset) destroys a primary context and everything
 * mapped in it whoever retained it, and cuCtxDestroy an own one. Every use
 * checks the record first (cuda_ctx_alive: the primary context's state, then
 * cuCtxGetId against the id it had) and a dead record stays dead: its
 * mappings are not closed (the driver destroyed them) and the next mapping
 * of the device makes a new record, in whatever context is current then.
 *
 * Thread-safe: one mutex guards the list and the reference counts.
 */
#ifndef GPB_CLIENT_CUDA_CTX_H
#define GPB_CLIENT_CUDA_CTX_H

#include <stdbool.h>

#include "cudaapi.h"

#define CUDA_CTX_EVENTS 64 /* finished fences' events kept per context */

struct cuda_ctx {
	struct cuda_ctx *next;
	CUdevice dev;
	CUcontext ctx;
	unsigned long long id; /* cuCtxGetId when made; 0 where the driver has none */
	bool primary;          /* ctx is the primary context, retained by this record */
	bool dead;             /* reset or destroyed: never used again */
	unsigned long refs;    /* mappings, fences and registrations in it */
	/* Events of finished fences, kept for the next (a free records one:
	 * no cuEventCreate per free in steady state). Under the list's lock;
	 * destroyed with the record. */
	CUevent events[CUDA_CTX_EVENTS];
	unsigned nevents;
};

/*
 * A reference to the process's live context of @dev, made if there is none
 * (or the one there was died). Returns CUDA_SUCCESS, or the failed call's
 * result with *what naming it.
 */
CUresult cuda_ctx_get(const struct cuda_api *api, CUdevice dev, struct cuda_ctx **out,
                      const char **what);
/* Drops a reference; the last lets go of a primary context's retain (a dead
 * one's too: a reset does not release it). */
void cuda_ctx_put(const struct cuda_api *api, struct cuda_ctx *c);
/* cuda_ctx_put() in a forked child, of a record of its parent's: the last
 * reference frees it with no driver call (cuda_ctx_forget_all dropped the
 * list, and the retain is the parent's). */
void cuda_ctx_forget(struct cuda_ctx *c);
/* In a forked child (cuda.c's fork handler): no context of the parent's is
 * this process's; forgets them all without a driver call. */
void cuda_ctx_forget_all(void);
/* Whether @c's context still lives; marks it dead for good when not. */
bool cuda_ctx_alive(const struct cuda_api *api, struct cuda_ctx *c);
/* Waits for the work queued in @c's context (cuCtxSynchronize, pushed and
 * popped); nothing when it is dead. CUDA_SUCCESS or the driver's error. */
CUresult cuda_ctx_sync(const struct cuda_api *api, struct cuda_ctx *c);
/* cuda_ctx_sync() of every live context of the process. */
void cuda_ctx_sync_all(const struct cuda_api *api);

/*
 * A fence: the point after which memory freed on a stream (gpb_free_async,
 * the lease allocator's frees) is no longer used by work queued in a
 * context, holding a reference to the context. Usually an event recorded
 * on the stream, from the context's kept ones where there is one and back
 * there when the fence is freed.
 *
 * Stream capture changes that: work queued on a capturing stream does not
 * run, it becomes a node of a graph that may be launched any number of
 * times later, and an event recorded there is a node too, which no query
 * may ask about; the legacy default stream may not be used at all while a
 * blocking stream of its context captures, and a synchronize breaks any
 * capture. So a fence asked for in a capture is one of two others, which
 * pass out of order with the events (cuda_fence_ordered):
 *  - CUDA_FENCE_GRAPH, the stream captures: a user object retained by the
 *    graph being captured (cuUserObjectCreate, cuGraphRetainUserObject),
 *    whose destructor CUDA runs once the graph, every executable graph made
 *    from it and their launches are gone. Then it becomes the next.
 *  - CUDA_FENCE_CAPTURE, the legacy stream is unusable (a blocking stream
 *    captures), the capture is invalidated, or the graph could not be had
 *    (a driver before 12.3, a failure): an event recorded on the legacy
 *    stream once no blocking stream captures any more.
 */
enum cuda_fence_state { CUDA_FENCE_EVENT, CUDA_FENCE_GRAPH, CUDA_FENCE_CAPTURE };

/* What a graph's user object and a GRAPH fence share: the destructor may
 * run after the fence is freed, or before it is looked at. */
struct cuda_hold;

struct cuda_fence {
	struct cuda_ctx *c;
	CUevent ev; /* CUDA_FENCE_EVENT */
	enum cuda_fence_state state;
	struct cuda_hold *hold; /* CUDA_FENCE_GRAPH */
};

/* Records a fence on @stream in @c's context: CUDA_SUCCESS with *out set,
 * or NULL when the context is dead (nothing queued there can still run);
 * else the failed call's result, *what naming it. */
CUresult cuda_fence_record(const struct cuda_api *api, struct cuda_ctx *c, CUstream stream,
                           struct cuda_fence **out, const char **what);
/* Whether the fence passes in stream order with the events (not one of a
 * capture's). */
static inline bool cuda_fence_ordered(const struct cuda_fence *f)
{
	return f->state == CUDA_FENCE_EVENT;
}
/* Whether the work before the fence has finished (or never will). A
 * capture's fence moves on here (a query, never a wait). */
bool cuda_fence_done(const struct cuda_api *api, struct cuda_fence *f);
/* Waits until it has; a capture's fence is not waited for (the graph may
 * live as long as the process, and the capture may be this thread's). */
void cuda_fence_wait(const struct cuda_api *api, struct cuda_fence *f);
void cuda_fence_free(const struct cuda_api *api, struct cuda_fence *f);
/* A forked child's copy of its parent's fence: freed with no driver call. */
void cuda_fence_forget(struct cuda_fence *f);
/* Whether @stream of @c's context is capturing, or (the legacy stream,
 * NULL) cannot be used because a blocking stream captures. @c may be NULL
 * for a stream handle. False where the driver cannot tell. */
bool cuda_stream_capturing(const struct cuda_api *api, struct cuda_ctx *c, CUstream stream);

#endif
