/*
 * fakecuda_async.h - what fakecuda_async.c (streams, events, queued work)
 * and fakecuda_graph.c (stream capture, graphs, user objects) share.
 * Internal to the fake, as fakecuda_internal.h is.
 */
#ifndef GPUBROKER_FAKECUDA_ASYNC_H
#define GPUBROKER_FAKECUDA_ASYNC_H

#include "fakecuda_internal.h"

#define STREAM_MAGIC 0x57eea400u

struct fake_graph;
struct fake_body;

struct fake_stream {
	uint32_t magic;
	struct fake_ctx *ctx;
	bool blocking; /* not CU_STREAM_NON_BLOCKING: the legacy stream waits for it */
	int priority;  /* cuStreamCreateWithPriority's, clamped to the range */
	/* Capture (fakecuda_graph.c, under its lock): the graph its work
	 * goes into rather than the queue, and whether a rule of capture was
	 * broken (then cuStreamEndCapture gives no graph). */
	struct fake_graph *capture;
	bool capture_invalid;
	uint64_t capture_id;
	struct fake_stream *next_capture; /* the process's capturing streams */
};

enum fake_op_kind { OP_COPY, OP_MEMSET, OP_HOST_FN };

struct fake_op {
	struct fake_op *next;
	uint64_t seq;
	struct fake_ctx *ctx;
	struct fake_stream *stream; /* NULL: the legacy default stream */
	enum fake_op_kind kind;
	uintptr_t device_side;  /* the device memory it touches (0: none) */
	uintptr_t device_side2; /* a copy's other side, when device memory too (0: none) */
	void *dst;
	const void *src;
	size_t n;
	unsigned char value;
	uint32_t value_wide; /* cuMemsetD16/D32: n elements of `width` bytes */
	unsigned width;
	void *staged; /* a copy from pageable memory: src, taken at the call (freed with op) */
	CUhostFn fn;
	void *data;
	/* A graph launch's node: the graph's body it came from, which lives
	 * (its user objects unreleased) until the launch has run. */
	struct fake_body *body;
};

/* The stream a handle names (NULL: the legacy default stream, for NULL
 * and CU_STREAM_LEGACY), checked to be of the current context. */
CUresult fake_stream_of(CUstream hstream, struct fake_stream **out);
/* Queues a copy of op on stream s (a graph launch's node), holding body. */
CUresult fake_async_launch(struct fake_stream *s, const struct fake_op *op, struct fake_body *body);

/* ---- fakecuda_graph.c ------------------------------------------------------ */

/* Work for stream s while it captures: a copy of op becomes a node of its
 * graph (*taken true), or the capture's error; *taken false: not capturing. */
CUresult fake_capture_op(struct fake_stream *s, const struct fake_op *op, bool *taken);
/* The legacy default stream used in ctx (@what) while a blocking stream
 * of it captures: those captures are invalidated, a violation counted
 * (gpubroker must never do it), and true (the call answers
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). @all: any capturing stream counts
 * (cuCtxSynchronize: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED). */
bool fake_capture_conflict(struct fake_ctx *ctx, bool all, const char *what);
/* Whether s is capturing (its own capture, not the legacy stream's). */
bool fake_capture_active(const struct fake_stream *s);
/* Drops a reference to a graph's body: the last releases its user
 * objects (their destructors run) and frees its nodes. */
void fake_body_put(struct fake_body *b);
/* A copy of op's staged source, for a node or a launch; false: no memory. */
bool fake_op_dup(struct fake_op *to, const struct fake_op *from);

#endif
