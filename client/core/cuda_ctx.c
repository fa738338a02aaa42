/*
 * cuda_ctx.c - the process's one CUDA context per device (see cuda_ctx.h)
 * and the fences of gpb_free_async.
 */
#include "cuda_ctx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static pthread_mutex_t cuda_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuda_ctx *cuda_ctxs;

/*
 * The check behind cuda_ctx_alive() (no lock needed: its fields are fixed
 * but dead, which only turns true). A primary context that is
 * not active was reset (our retain would keep it otherwise); one that is
 * active again, or an own context, must still have the id it had: a new
 * context behind the same handle is not the one the mappings were made in.
 * Without cuCtxGetId (drivers before CUDA 12.0) an own context is tried by
 * pushing it, and a primary context re-created after a reset goes unseen.
 */
static bool cuda_ctx_check(const struct cuda_api *api, struct cuda_ctx *c)
{
	unsigned long long id = 0;
	unsigned flags = 0;
	int active = 1;
	CUcontext popped;
	bool dead = false;

	if (__atomic_load_n(&c->dead, __ATOMIC_ACQUIRE))
		return false;
	if (c->primary && api->DevicePrimaryCtxGetState &&
	    (api->DevicePrimaryCtxGetState(c->dev, &flags, &active) != CUDA_SUCCESS || !active))
		dead = true;
	else if (api->CtxGetId && c->id &&
	         (api->CtxGetId(c->ctx, &id) != CUDA_SUCCESS || id != c->id))
		dead = true;
	else if (!api->CtxGetId && !c->primary) {
		if (api->CtxPushCurrent(c->ctx) != CUDA_SUCCESS)
			dead = true;
		else
			api->CtxPopCurrent(&popped);
	}
	if (dead)
		__atomic_store_n(&c->dead, true, __ATOMIC_RELEASE);
	return !dead;
}

bool cuda_ctx_alive(const struct cuda_api *api, struct cuda_ctx *c)
{
	/* No lock: the record's fields are fixed but dead, which only turns
	 * true, and the caller's reference keeps it. Every local allocation
	 * asks (slab_cache_dead): a lock here made threads wait on each other. */
	return cuda_ctx_check(api, c);
}

void cuda_ctx_forget_all(void)
{
	/* The records are the parent's mappings' (never closed here); the
	 * lock may have been held by a thread of the parent. */
	cuda_ctxs = NULL;
	pthread_mutex_init(&cuda_ctx_lock, NULL);
}

void cuda_ctx_forget(struct cuda_ctx *c)
{
	pthread_mutex_lock(&cuda_ctx_lock);
	bool last = --c->refs == 0;
	pthread_mutex_unlock(&cuda_ctx_lock);
	if (last)
		free(c);
}

/*
 * The context current on this thread when it is a live one on @dev: *own
 * true for the application's own, false when it is the primary context
 * (then retained, as a record of it must be). NULL when there is none.
 */
static CUcontext cuda_ctx_current(const struct cuda_api *api, CUdevice dev, bool *own)
{
	CUcontext cur = NULL, primary = NULL;
	CUdevice cur_dev;
	unsigned flags = 0;
	int active = 1;

	if (api->CtxGetCurrent(&cur) != CUDA_SUCCESS || !cur ||
	    api->CtxGetDevice(&cur_dev) != CUDA_SUCCESS || cur_dev != dev)
		return NULL;
	*own = true;
	/* Only an active primary context can be current: asking a device
	 * whose primary context is inactive would create one (hundreds of
	 * MiB on a GPU) for nothing. */
	if (api->DevicePrimaryCtxGetState &&
	    (api->DevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active))
		return cur;
	if (api->DevicePrimaryCtxRetain(&primary, dev) != CUDA_SUCCESS)
		return cur;
	if (primary == cur)
		*own = false;
	else
		api->DevicePrimaryCtxRelease(dev);
	return cur;
}

CUresult cuda_ctx_get(const struct cuda_api *api, CUdevice dev, struct cuda_ctx **out,
                      const char **what)
{
	struct cuda_ctx *c;
	CUresult rc = CUDA_SUCCESS;
	bool own = false;
	CUcontext ctx;

	pthread_mutex_lock(&cuda_ctx_lock);
	for (c = cuda_ctxs; c; c = c->next) {
		if (c->dev == dev && cuda_ctx_check(api, c)) {
			c->refs++;
			*out = c;
			goto out;
		}
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		*what = "allocating a context record";
		goto out;
	}
	ctx = cuda_ctx_current(api, dev, &own);
	if (!ctx) {
		rc = api->DevicePrimaryCtxRetain(&ctx, dev);
		if (rc != CUDA_SUCCESS) {
			free(c);
			*what = "cuDevicePrimaryCtxRetain";
			goto out;
		}
	}
	c->dev = dev;
	c->ctx = ctx;
	c->primary = !own;
	c->refs = 1;
	if (api->CtxGetId && api->CtxGetId(ctx, &c->id) != CUDA_SUCCESS)
		c->id = 0;
	c->next = cuda_ctxs;
	cuda_ctxs = c;
	*out = c;
out:
	pthread_mutex_unlock(&cuda_ctx_lock);
	return rc;
}

void cuda_ctx_put(const struct cuda_api *api, struct cuda_ctx *c)
{
	pthread_mutex_lock(&cuda_ctx_lock);
	if (--c->refs > 0) {
		pthread_mutex_unlock(&cuda_ctx_lock);
		return;
	}
	for (struct cuda_ctx **pp = &cuda_ctxs; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	pthread_mutex_unlock(&cuda_ctx_lock);
	/* The kept events go with their context: before a primary context's
	 * release, which may destroy it. A dead context took them with it. */
	if (!c->dead)
		for (unsigned k = 0; k < c->nevents; k++)
			api->EventDestroy(c->events[k]);
	if (c->primary)
		api->DevicePrimaryCtxRelease(c->dev);
	free(c);
}

/* cuCtxSynchronize in @c's context, pushed and popped. */
static CUresult cuda_ctx_sync_in(const struct cuda_api *api, struct cuda_ctx *c)
{
	CUcontext popped;
	CUresult rc = api->CtxPushCurrent(c->ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = api->CtxSynchronize();
	api->CtxPopCurrent(&popped);
	return rc;
}

/* Outside the lock, which other threads' mappings need meanwhile: the
 * caller's reference keeps the record. */
CUresult cuda_ctx_sync(const struct cuda_api *api, struct cuda_ctx *c)
{
	return cuda_ctx_alive(api, c) ? cuda_ctx_sync_in(api, c) : CUDA_SUCCESS;
}

/* Under the lock: a thread that maps meanwhile waits, but this runs only
 * where a whole connection lets go (free_label, invalidate, disconnect),
 * and a process has a context per device at most. */
void cuda_ctx_sync_all(const struct cuda_api *api)
{
	pthread_mutex_lock(&cuda_ctx_lock);
	for (struct cuda_ctx *c = cuda_ctxs; c; c = c->next) {
		if (cuda_ctx_check(api, c))
			cuda_ctx_sync_in(api, c);
	}
	pthread_mutex_unlock(&cuda_ctx_lock);
}

/* ---- fences (gpb_free_async) --------------------------------------------- */

struct cuda_hold {
	atomic_int refs; /* the fence's and the user object's */
	atomic_bool released;
};

/* The user object's destructor, on a thread of CUDA's: no CUDA call, no
 * lock, only the flag the fence reads. */
static void cuda_hold_release(void *p)
{
	struct cuda_hold *h = p;

	atomic_store(&h->released, true);
	if (atomic_fetch_sub(&h->refs, 1) == 1)
		free(h);
}

static void cuda_hold_put(struct cuda_hold *h)
{
	if (atomic_fetch_sub(&h->refs, 1) == 1)
		free(h);
}

/* @stream's capture, the context current: 0 none, 1 capturing (a graph to
 * be had), 2 a capture in the way that offers none (the legacy stream while
 * a blocking stream captures, an invalidated capture). */
static int capture_state(const struct cuda_api *api, CUstream stream)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult rc;

	if (!api->StreamIsCapturing)
		return 0;
	rc = api->StreamIsCapturing(stream, &st);
	if (rc == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
		return 2;
	if (rc != CUDA_SUCCESS || st == CU_STREAM_CAPTURE_STATUS_NONE)
		return 0; /* an error shows again where the stream is used */
	return st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? 1 : 2;
}

bool cuda_stream_capturing(const struct cuda_api *api, struct cuda_ctx *c, CUstream stream)
{
	CUcontext popped;
	int st;

	if (!api->StreamIsCapturing)
		return false;
	if (stream && stream != CU_STREAM_LEGACY)
		return capture_state(api, stream) != 0;
	/* The legacy stream is the current context's. */
	if (!c || !cuda_ctx_alive(api, c) || api->CtxPushCurrent(c->ctx) != CUDA_SUCCESS)
		return false;
	st = capture_state(api, stream);
	api->CtxPopCurrent(&popped);
	return st != 0;
}

/* A user object for the graph @stream captures into, whose release marks
 * f's hold: true, or false where the driver offers none. Context current. */
static bool fence_hold_graph(const struct cuda_api *api, struct cuda_fence *f, CUstream stream)
{
	CUstreamCaptureStatus st;
	CUgraph graph = NULL;
	CUuserObject obj;
	struct cuda_hold *h;

	if (!api->StreamGetCaptureInfo || !api->UserObjectCreate || !api->UserObjectRelease ||
	    !api->GraphRetainUserObject)
		return false;
	if (api->StreamGetCaptureInfo(stream, &st, NULL, &graph, NULL, NULL, NULL) !=
	        CUDA_SUCCESS ||
	    st != CU_STREAM_CAPTURE_STATUS_ACTIVE || !graph)
		return false;
	h = malloc(sizeof(*h));
	if (!h)
		return false;
	atomic_init(&h->refs, 2);
	atomic_init(&h->released, false);
	if (api->UserObjectCreate(&obj, h, cuda_hold_release, 1,
	                          CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) != CUDA_SUCCESS) {
		free(h);
		return false;
	}
	/* The reference moves to the graph; refused, it is released here,
	 * which runs the destructor (one of the hold's references). */
	if (api->GraphRetainUserObject(graph, obj, 1, CU_GRAPH_USER_OBJECT_MOVE) != CUDA_SUCCESS) {
		api->UserObjectRelease(obj, 1);
		cuda_hold_put(h);
		return false;
	}
	f->hold = h;
	return true;
}

/* An event on @stream, the context current: a kept one or a new one. */
static CUresult fence_event(const struct cuda_api *api, struct cuda_fence *f, CUstream stream,
                            const char **what)
{
	struct cuda_ctx *c = f->c;
	CUresult rc;

	pthread_mutex_lock(&cuda_ctx_lock);
	bool kept = c->nevents > 0;
	if (kept)
		f->ev = c->events[--c->nevents];
	pthread_mutex_unlock(&cuda_ctx_lock);
	rc = kept ? CUDA_SUCCESS : api->EventCreate(&f->ev, CU_EVENT_DISABLE_TIMING);
	*what = "cuEventCreate";
	if (rc == CUDA_SUCCESS) {
		rc = api->EventRecord(f->ev, stream);
		*what = "cuEventRecord";
		if (rc != CUDA_SUCCESS)
			api->EventDestroy(f->ev);
	}
	if (rc == CUDA_SUCCESS)
		f->state = CUDA_FENCE_EVENT;
	return rc;
}

CUresult cuda_fence_record(const struct cuda_api *api, struct cuda_ctx *c, CUstream stream,
                           struct cuda_fence **out, const char **what)
{
	struct cuda_fence *f;
	CUcontext popped;
	CUresult rc = CUDA_SUCCESS;

	*out = NULL;
	if (!cuda_ctx_alive(api, c))
		return CUDA_SUCCESS;
	if (!api->EventCreate || !api->EventRecord || !api->EventQuery || !api->EventSynchronize ||
	    !api->EventDestroy) {
		*what = "cuEventCreate (missing from the driver)";
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		*what = "allocating a fence";
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	rc = api->CtxPushCurrent(c->ctx);
	if (rc != CUDA_SUCCESS) {
		free(f);
		*what = "cuCtxPushCurrent";
		return rc;
	}
	/* The reference is taken first, so that the record cannot go meanwhile. */
	pthread_mutex_lock(&cuda_ctx_lock);
	c->refs++;
	pthread_mutex_unlock(&cuda_ctx_lock);
	f->c = c;
	switch (capture_state(api, stream)) {
	case 0:
		rc = fence_event(api, f, stream, what);
		break;
	case 1:
		f->state = fence_hold_graph(api, f, stream) ? CUDA_FENCE_GRAPH : CUDA_FENCE_CAPTURE;
		break;
	default:
		f->state = CUDA_FENCE_CAPTURE;
		break;
	}
	api->CtxPopCurrent(&popped);
	if (rc != CUDA_SUCCESS) {
		cuda_ctx_put(api, c);
		free(f);
		return rc;
	}
	*out = f;
	return CUDA_SUCCESS;
}

/* Any answer but "not ready" is done: a context that died or failed will
 * never run the work, and waiting for it would keep the memory forever. */
bool cuda_fence_done(const struct cuda_api *api, struct cuda_fence *f)
{
	CUcontext popped;
	const char *what;
	bool done;

	if (!cuda_ctx_alive(api, f->c))
		return true;
	if (f->state == CUDA_FENCE_GRAPH) {
		if (!atomic_load(&f->hold->released))
			return false;
		cuda_hold_put(f->hold);
		f->hold = NULL;
		f->state = CUDA_FENCE_CAPTURE;
	}
	if (f->state == CUDA_FENCE_CAPTURE) {
		/* The graph is gone, or the capture over: what else was queued
		 * on the memory is behind an event on the legacy stream, once
		 * that stream can be used. */
		if (api->CtxPushCurrent(f->c->ctx) != CUDA_SUCCESS)
			return true;
		done = false;
		if (capture_state(api, NULL) == 0 &&
		    fence_event(api, f, NULL, &what) != CUDA_SUCCESS)
			done = true; /* no event to be had: nothing to wait with */
		api->CtxPopCurrent(&popped);
		if (f->state != CUDA_FENCE_EVENT)
			return done;
	}
	return api->EventQuery(f->ev) != CUDA_ERROR_NOT_READY;
}

void cuda_fence_wait(const struct cuda_api *api, struct cuda_fence *f)
{
	if (f->state == CUDA_FENCE_EVENT && cuda_ctx_alive(api, f->c))
		api->EventSynchronize(f->ev);
}

/* A finished fence's event is kept for the next fence of its context
 * (re-recording an event is allowed once its work is done, or before:
 * the new record replaces the old). */
void cuda_fence_free(const struct cuda_api *api, struct cuda_fence *f)
{
	struct cuda_ctx *c = f->c;

	if (f->hold)
		cuda_hold_put(f->hold);
	if (f->state == CUDA_FENCE_EVENT && cuda_ctx_alive(api, c)) {
		pthread_mutex_lock(&cuda_ctx_lock);
		bool keep = c->nevents < CUDA_CTX_EVENTS;
		if (keep)
			c->events[c->nevents++] = f->ev;
		pthread_mutex_unlock(&cuda_ctx_lock);
		if (!keep)
			api->EventDestroy(f->ev);
	}
	cuda_ctx_put(api, c);
	free(f);
}

void cuda_fence_forget(struct cuda_fence *f)
{
	/* The parent's user object releases the parent's hold: this one is
	 * the child's copy. */
	free(f->hold);
	cuda_ctx_forget(f->c);
	free(f);
}
