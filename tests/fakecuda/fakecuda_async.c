/*
 * fakecuda_async.c - the fake libcuda.so.1's streams, events and the work
 * queued on them.
 *
 * A real device runs queued work later, in its own time; a program that
 * frees or unmaps memory, or tells someone else it may reuse it, before the
 * work queued on it has finished has a race that only shows under load. The
 * fake makes that race certain: the *Async copies and memsets and host
 * functions (cuLaunchHostFunc) are queued and run only when something
 * synchronises with them - cuStreamSynchronize, cuCtxSynchronize,
 * cuEventSynchronize, or a synchronous copy or memset, which waits for the
 * context's blocking streams as the legacy default stream does. Closing an
 * IPC mapping or freeing memory that queued work still touches is counted
 * as a violation (fakecuda_violations) and that work is dropped; work that
 * finds its memory gone when it runs is one too. cuStreamQuery and
 * cuEventQuery answer CUDA_ERROR_NOT_READY while the work they cover is
 * queued: with nothing to synchronise, it stays queued forever, which is
 * what a caller that polls must live with. Except as CUDA's rules for
 * pageable host memory say: a copy from it takes the source at the call
 * (the device side is written later), a copy into it returns only when it
 * is done (the work queued before it on the stream runs first).
 *
 * Stream-ordered allocation (cuMemAllocFromPoolAsync, cuMemFreeAsync) stays
 * immediate (fakecuda_pool.c): the daemon synchronises right after it.
 * Apart from fakecuda.c to keep each file short; see the comment at its top.
 */
#include "fakecuda_internal.h"
#include "fakecuda_async.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVENT_MAGIC 0xe7e47000u

struct fake_event {
	/* Every live event is listed (events_lock), as contexts are: the
	 * process's to destroy, and not a leak of a forked child, which holds
	 * copies of its parent's (a child may not destroy them). */
	struct fake_event *prev, *next;
	uint32_t magic;
	struct fake_ctx *ctx;
	struct fake_stream *stream; /* NULL: the legacy default stream */
	uint64_t seq;               /* work up to this one must have run */
	bool captured;              /* last recorded inside a capture: a graph node */
};

static pthread_mutex_t async_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_op *ops_head, **ops_tail = &ops_head;
static uint64_t ops_seq;

/* Whether op is among the work `stream` of ctx covers (NULL: the legacy
 * stream, which covers every blocking stream's; `all`: everything). */
static bool op_matches(const struct fake_op *op, struct fake_ctx *ctx,
                       const struct fake_stream *stream, bool all, uint64_t upto)
{
	if (op->ctx != ctx || op->seq > upto)
		return false;
	if (all || op->stream == stream)
		return true;
	return !stream && (!op->stream || op->stream->blocking);
}

static void op_free(struct fake_op *op)
{
	if (op->body)
		fake_body_put(op->body);
	free(op->staged);
	free(op);
}

static void op_unlink(struct fake_op *op)
{
	for (struct fake_op **pp = &ops_head; *pp; pp = &(*pp)->next) {
		if (*pp == op) {
			*pp = op->next;
			if (!*pp)
				ops_tail = pp;
			return;
		}
	}
}

static void op_run(struct fake_op *op)
{
	if (op->kind == OP_HOST_FN) {
		op->fn(op->data);
		return;
	}
	pthread_mutex_lock(&fake_lock);
	CUresult ok = fake_copy_valid(op->device_side, op->n);
	if (ok == CUDA_SUCCESS && op->device_side2)
		ok = fake_copy_valid(op->device_side2, op->n);
	pthread_mutex_unlock(&fake_lock);
	if (ok != CUDA_SUCCESS) {
		fake_violation("queued work ran on memory at %#" PRIxPTR " no longer mapped",
		               op->device_side);
		return;
	}
	if (op->kind == OP_COPY)
		memmove(op->dst, op->src, op->n);
	else if (op->width > 1)
		fake_fill(op->dst, op->value_wide, op->width, op->n / op->width);
	else
		memset(op->dst, op->value, op->n);
}

/* Runs, in queue order, the work of ctx that the stream covers up to seq
 * `upto`. Each runs with the lock dropped: a host function may block. */
static void ops_run(struct fake_ctx *ctx, const struct fake_stream *stream, bool all, uint64_t upto)
{
	for (;;) {
		pthread_mutex_lock(&async_lock);
		struct fake_op *op = ops_head;
		while (op && !op_matches(op, ctx, stream, all, upto))
			op = op->next;
		if (op)
			op_unlink(op);
		pthread_mutex_unlock(&async_lock);
		if (!op)
			return;
		op_run(op);
		op_free(op);
	}
}

static bool ops_pending(struct fake_ctx *ctx, const struct fake_stream *stream, uint64_t upto)
{
	bool found = false;
	pthread_mutex_lock(&async_lock);
	for (struct fake_op *op = ops_head; op && !found; op = op->next)
		found = op_matches(op, ctx, stream, false, upto);
	pthread_mutex_unlock(&async_lock);
	return found;
}

void fake_async_drain(struct fake_ctx *ctx, bool blocking_only)
{
	/* A synchronous call waits as the legacy stream does. */
	if (blocking_only && fake_capture_conflict(ctx, false, "a synchronous call"))
		return;
	ops_run(ctx, NULL, !blocking_only, UINT64_MAX);
}

void fake_async_forget_ctx(struct fake_ctx *ctx)
{
	pthread_mutex_lock(&async_lock);
	for (struct fake_op **pp = &ops_head; *pp;) {
		struct fake_op *op = *pp;
		if (op->ctx == ctx) {
			*pp = op->next;
			op_free(op);
		} else {
			pp = &op->next;
		}
	}
	ops_tail = &ops_head;
	while (*ops_tail)
		ops_tail = &(*ops_tail)->next;
	pthread_mutex_unlock(&async_lock);
}

void fake_async_closing(uintptr_t base, uint64_t size, const char *what)
{
	unsigned dropped = 0;
	pthread_mutex_lock(&async_lock);
	for (struct fake_op **pp = &ops_head; *pp;) {
		struct fake_op *op = *pp;
		bool touches =
		    (op->device_side && op->device_side - base < size && op->device_side >= base) ||
		    (op->device_side2 && op->device_side2 - base < size &&
		     op->device_side2 >= base);
		if (touches) {
			*pp = op->next;
			op_free(op);
			dropped++;
		} else {
			pp = &op->next;
		}
	}
	ops_tail = &ops_head;
	while (*ops_tail)
		ops_tail = &(*ops_tail)->next;
	pthread_mutex_unlock(&async_lock);
	for (unsigned i = 0; i < dropped; i++)
		fake_violation("%s of memory at %#" PRIxPTR " with work still queued on it", what,
		               base);
}

/* ---- streams ------------------------------------------------------------------ */

CUresult fake_stream_of(CUstream hstream, struct fake_stream **out)
{
	struct fake_stream *s = (struct fake_stream *)(void *)hstream;
	if (hstream == CU_STREAM_LEGACY)
		s = NULL;
	if (s && s->magic != STREAM_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	/* A stream belongs to the context it was made in. */
	if (s && s->ctx != fake_current())
		return CUDA_ERROR_INVALID_HANDLE;
	*out = s;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
{
	NEED_CONTEXT();
	if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*s = (struct fake_stream){.magic = STREAM_MAGIC, .ctx = fake_current(), .blocking = !flags};
	*stream = (CUstream)(void *)s;
	return CUDA_SUCCESS;
}

/* Lenient where CUDA is not: the stream's work runs now (CUDA lets it run
 * to completion after the call), so that the object can go. */
FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream stream)
{
	NEED_CONTEXT();
	struct fake_stream *s;
	CUresult rc = fake_stream_of(stream, &s);
	if (rc != CUDA_SUCCESS || !s)
		return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_HANDLE;
	if (fake_capture_active(s))
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	ops_run(s->ctx, s, false, UINT64_MAX);
	s->magic = 0;
	free(s);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamSynchronize(CUstream stream)
{
	NEED_CONTEXT();
	struct fake_stream *s;
	CUresult rc = fake_stream_of(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (s ? fake_capture_active(s)
	      : fake_capture_conflict(fake_current(), false, "cuStreamSynchronize"))
		return s ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
		         : CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	ops_run(fake_current(), s, false, UINT64_MAX);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamQuery(CUstream stream)
{
	NEED_CONTEXT();
	struct fake_stream *s;
	CUresult rc = fake_stream_of(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (s ? fake_capture_active(s)
	      : fake_capture_conflict(fake_current(), false, "cuStreamQuery"))
		return s ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
		         : CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	return ops_pending(fake_current(), s, UINT64_MAX) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

/* An H100's range: 0 (least) to -5 (greatest). */
#define FAKE_PRIORITY_LEAST    0
#define FAKE_PRIORITY_GREATEST (-5)

FAKE_EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	NEED_CONTEXT();
	if (least)
		*least = FAKE_PRIORITY_LEAST;
	if (greatest)
		*greatest = FAKE_PRIORITY_GREATEST;
	return CUDA_SUCCESS;
}

/* Out of range priorities are clamped, as CUDA does. */
FAKE_EXPORT CUresult cuStreamCreateWithPriority(CUstream *stream, unsigned int flags, int priority)
{
	CUresult rc = cuStreamCreate(stream, flags);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct fake_stream *s = (struct fake_stream *)(void *)*stream;
	s->priority = priority > FAKE_PRIORITY_LEAST      ? FAKE_PRIORITY_LEAST
	              : priority < FAKE_PRIORITY_GREATEST ? FAKE_PRIORITY_GREATEST
	                                                  : priority;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamGetFlags(CUstream stream, unsigned int *flags)
{
	NEED_CONTEXT();
	struct fake_stream *s;
	CUresult rc = fake_stream_of(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	*flags = s && !s->blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamGetPriority(CUstream stream, int *priority)
{
	NEED_CONTEXT();
	struct fake_stream *s;
	CUresult rc = fake_stream_of(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	*priority = s ? s->priority : FAKE_PRIORITY_LEAST;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSynchronize(void)
{
	NEED_CONTEXT();
	INJECT("cuCtxSynchronize");
	/* Waits for every stream: any capture is broken by it. */
	if (fake_capture_conflict(fake_current(), true, "cuCtxSynchronize"))
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	fake_async_drain(fake_current(), false);
	return CUDA_SUCCESS;
}

/* ---- queued work -------------------------------------------------------------- */

static CUresult enqueue(CUstream stream, struct fake_op op)
{
	struct fake_stream *s;
	CUresult rc = fake_stream_of(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!s && fake_capture_conflict(fake_current(), false, "work on the legacy stream"))
		return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	if (op.kind != OP_HOST_FN) {
		pthread_mutex_lock(&fake_lock);
		rc = fake_copy_valid(op.device_side, op.n);
		if (rc == CUDA_SUCCESS && op.device_side2)
			rc = fake_copy_valid(op.device_side2, op.n);
		pthread_mutex_unlock(&fake_lock);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	/* Pageable host memory (neither registered nor cuMemHostAlloc's): CUDA
	 * stages a source at the call, and returns from a copy into it only
	 * once the copy is done (the API's synchronisation rules). */
	bool from_pageable = false, to_pageable = false;
	if (op.kind == OP_COPY && !op.device_side2) {
		uintptr_t host =
		    op.device_side == (uintptr_t)op.dst ? (uintptr_t)op.src : (uintptr_t)op.dst;
		uintptr_t b;
		size_t sz;
		unsigned f;
		bool a;
		bool pageable = !fake_host_lookup(host, &b, &sz, &f, &a);
		from_pageable = pageable && host == (uintptr_t)op.src;
		to_pageable = pageable && host == (uintptr_t)op.dst;
	}
	if (s) {
		/* Inside a capture: a node of the graph, run at its launches. */
		bool taken;
		rc = fake_capture_op(s, &op, &taken);
		if (rc != CUDA_SUCCESS || taken)
			return rc;
	}
	struct fake_op *p = malloc(sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = op;
	if (from_pageable && op.n) {
		if (!(p->staged = malloc(op.n))) {
			free(p);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		memcpy(p->staged, op.src, op.n);
		p->src = p->staged;
	}
	p->ctx = fake_current();
	p->stream = s;
	p->next = NULL;
	pthread_mutex_lock(&async_lock);
	uint64_t seq = p->seq = ++ops_seq;
	*ops_tail = p;
	ops_tail = &p->next;
	pthread_mutex_unlock(&async_lock);
	if (to_pageable)
		ops_run(p->ctx, s, false, seq);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	NEED_CONTEXT();
	return enqueue(s, (struct fake_op){.kind = OP_COPY,
	                                   .device_side = (uintptr_t)dst,
	                                   .dst = (void *)(uintptr_t)dst,
	                                   .src = src,
	                                   .n = n});
}

FAKE_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	NEED_CONTEXT();
	return enqueue(s, (struct fake_op){.kind = OP_COPY,
	                                   .device_side = (uintptr_t)src,
	                                   .dst = dst,
	                                   .src = (const void *)(uintptr_t)src,
	                                   .n = n});
}

FAKE_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s)
{
	NEED_CONTEXT();
	return enqueue(s, (struct fake_op){.kind = OP_MEMSET,
	                                   .device_side = (uintptr_t)dst,
	                                   .dst = (void *)(uintptr_t)dst,
	                                   .n = n,
	                                   .value = value});
}

FAKE_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
	NEED_CONTEXT();
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	return enqueue(s, (struct fake_op){.kind = OP_HOST_FN, .fn = fn, .data = data});
}

CUresult fake_async_copy(CUstream s, void *dst, const void *src, size_t n, uintptr_t dev1,
                         uintptr_t dev2)
{
	NEED_CONTEXT();
	return enqueue(s, (struct fake_op){.kind = OP_COPY,
	                                   .device_side = dev1,
	                                   .device_side2 = dev2,
	                                   .dst = dst,
	                                   .src = src,
	                                   .n = n});
}

CUresult fake_async_memset(CUstream s, uintptr_t dst, uint32_t value, unsigned width, size_t count)
{
	NEED_CONTEXT();
	return enqueue(s, (struct fake_op){.kind = OP_MEMSET,
	                                   .device_side = dst,
	                                   .dst = (void *)dst,
	                                   .n = count * width,
	                                   .value = (unsigned char)value,
	                                   .value_wide = value,
	                                   .width = width});
}

CUresult fake_async_launch(struct fake_stream *s, const struct fake_op *op, struct fake_body *body)
{
	struct fake_op *p = malloc(sizeof(*p));
	if (!p || !fake_op_dup(p, op)) {
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	p->ctx = fake_current();
	p->stream = s;
	p->next = NULL;
	p->body = body;
	pthread_mutex_lock(&async_lock);
	p->seq = ++ops_seq;
	*ops_tail = p;
	ops_tail = &p->next;
	pthread_mutex_unlock(&async_lock);
	return CUDA_SUCCESS;
}

/* ---- events ------------------------------------------------------------------- */

static struct fake_event *event_of(CUevent hevent)
{
	struct fake_event *e = (struct fake_event *)(void *)hevent;
	return e && e->magic == EVENT_MAGIC ? e : NULL;
}

static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_event *events;

FAKE_EXPORT CUresult cuEventCreate(CUevent *event, unsigned int flags)
{
	NEED_CONTEXT();
	INJECT("cuEventCreate");
	(void)flags;
	struct fake_event *e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*e = (struct fake_event){.magic = EVENT_MAGIC, .ctx = fake_current()};
	pthread_mutex_lock(&events_lock);
	e->next = events;
	if (events)
		events->prev = e;
	events = e;
	pthread_mutex_unlock(&events_lock);
	*event = (CUevent)(void *)e;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent event)
{
	NEED_INIT();
	struct fake_event *e = event_of(event);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	e->magic = 0;
	pthread_mutex_lock(&events_lock);
	if (e->prev)
		e->prev->next = e->next;
	else
		events = e->next;
	if (e->next)
		e->next->prev = e->prev;
	pthread_mutex_unlock(&events_lock);
	free(e);
	return CUDA_SUCCESS;
}

/* Captures the work queued on the stream so far; an event never recorded
 * is complete, as in CUDA. */
FAKE_EXPORT CUresult cuEventRecord(CUevent event, CUstream stream)
{
	NEED_CONTEXT();
	INJECT("cuEventRecord");
	struct fake_event *e = event_of(event);
	struct fake_stream *s;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult rc = fake_stream_of(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (e->ctx != fake_current())
		return CUDA_ERROR_INVALID_HANDLE;
	if (!s && fake_capture_conflict(e->ctx, false, "cuEventRecord on the legacy stream"))
		return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	/* Recorded inside a capture: a node of the graph, which no query
	 * may ask about. */
	e->captured = s && fake_capture_active(s);
	e->stream = s;
	pthread_mutex_lock(&async_lock);
	e->seq = ops_seq;
	pthread_mutex_unlock(&async_lock);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventQuery(CUevent event)
{
	NEED_INIT();
	INJECT("cuEventQuery");
	struct fake_event *e = event_of(event);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!e->ctx->active)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	if (e->captured) {
		fake_violation("cuEventQuery of an event recorded inside a capture");
		return CUDA_ERROR_CAPTURED_EVENT;
	}
	return ops_pending(e->ctx, e->stream, e->seq) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventSynchronize(CUevent event)
{
	NEED_INIT();
	struct fake_event *e = event_of(event);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!e->ctx->active)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	if (e->captured) {
		fake_violation("cuEventSynchronize of an event recorded inside a capture");
		return CUDA_ERROR_CAPTURED_EVENT;
	}
	ops_run(e->ctx, e->stream, false, e->seq);
	return CUDA_SUCCESS;
}

/* Work queued on the stream after this waits for the event's work: the fake
 * runs that work now (a device may run queued work at any time), which
 * keeps the order without tracking dependencies between streams. */
FAKE_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)
{
	NEED_CONTEXT();
	struct fake_stream *s;
	CUresult rc = fake_stream_of(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	/* Inside a capture a wait is an edge of the graph: the fake's nodes
	 * run in the order they were captured, so it orders nothing more. */
	struct fake_event *e = event_of(event);
	if ((s && fake_capture_active(s)) || (e && e->captured))
		return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	return cuEventSynchronize(event);
}

/* ---- for tests only ----------------------------------------------------------- */

/* Work queued in this process and not run yet. */
FAKE_EXPORT unsigned fakecuda_pending_work(void)
{
	unsigned n = 0;
	pthread_mutex_lock(&async_lock);
	for (struct fake_op *op = ops_head; op; op = op->next)
		n++;
	pthread_mutex_unlock(&async_lock);
	return n;
}
