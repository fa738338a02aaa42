/*
 * fakecuda_graph.c - stream capture, graphs and user objects of the fake
 * libcuda.so.1: enough of them to hold gpubroker's frees to CUDA's rules
 * of capture.
 *
 * Work queued on a capturing stream is not run: it becomes a node of the
 * stream's graph, run at each launch of an executable graph made from it.
 * What CUDA refuses during a capture, the fake refuses and counts as a
 * violation (the library must never do it): the legacy default stream used
 * while a blocking stream of its context captures (a record, queued work,
 * a synchronous call: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), cuCtxSynchronize
 * while any stream captures (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), and a
 * query or wait of an event recorded inside a capture
 * (CUDA_ERROR_CAPTURED_EVENT, fakecuda_async.c). The first two
 * invalidate the capture, as in CUDA: cuStreamEndCapture then answers
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED with no graph.
 *
 * User objects (cuUserObjectCreate) are what CUDA offers to keep a
 * resource while a graph may use it: a graph retains references, each
 * executable graph made from it holds them too, and a launch holds them
 * until it has run; the last release runs the destructor. Here a graph's
 * nodes and references are one body, counted by its graph, its executable
 * graphs and the launched nodes not yet run; the destructor runs at the
 * last release, in the releasing thread (CUDA runs it on a thread of its
 * own, later: a destructor may make no CUDA call either way).
 *
 * Simplified: one capture per stream, no cross-stream capture (a wait on
 * an event is an edge that orders nothing more, the nodes run in capture
 * order), no child graphs (a launch on a capturing stream is refused), the
 * capture mode is taken and not enforced.
 */
#include "fakecuda_async.h"

#include <stdlib.h>
#include <string.h>

#define GRAPH_MAGIC 0x6a4a9000u
#define EXEC_MAGIC  0xe8ec9000u
#define UOBJ_MAGIC  0x0b1ec700u

struct fake_uobj {
	uint32_t magic;
	void *ptr;
	CUhostFn destroy;
	unsigned refs;
};

struct fake_body {
	unsigned refs; /* its graph, executable graphs, launched nodes not run */
	struct fake_op *nodes, **tail;
	struct fake_owned {
		struct fake_uobj *o;
		unsigned n;
	} * owned;
	unsigned nowned, owned_cap;
};

struct fake_graph {
	uint32_t magic;
	struct fake_body *body;
	struct fake_stream *capturing; /* during its capture */
};

struct fake_exec {
	uint32_t magic;
	struct fake_body *body;
};

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_stream *captures;
static uint64_t capture_ids;

bool fake_op_dup(struct fake_op *to, const struct fake_op *from)
{
	*to = *from;
	to->next = NULL;
	to->body = NULL;
	to->staged = NULL;
	if (from->staged && from->n) {
		if (!(to->staged = malloc(from->n)))
			return false;
		memcpy(to->staged, from->staged, from->n);
		to->src = to->staged;
	}
	return true;
}

/* Lock held: drops n references of o; true when that was the last. */
static bool uobj_release_locked(struct fake_uobj *o, unsigned n)
{
	o->refs -= n;
	return o->refs == 0;
}

static void uobj_destroy(struct fake_uobj *o)
{
	o->magic = 0;
	o->destroy(o->ptr);
	free(o);
}

void fake_body_put(struct fake_body *b)
{
	pthread_mutex_lock(&graph_lock);
	bool last = --b->refs == 0;
	unsigned dead = 0;
	if (last) {
		for (unsigned i = 0; i < b->nowned; i++) {
			if (uobj_release_locked(b->owned[i].o, b->owned[i].n))
				b->owned[dead++].o = b->owned[i].o;
		}
	}
	pthread_mutex_unlock(&graph_lock);
	if (!last)
		return;
	for (unsigned i = 0; i < dead; i++)
		uobj_destroy(b->owned[i].o);
	while (b->nodes) {
		struct fake_op *op = b->nodes;
		b->nodes = op->next;
		free(op->staged);
		free(op);
	}
	free(b->owned);
	free(b);
}

static struct fake_graph *graph_of(CUgraph h)
{
	struct fake_graph *g = (struct fake_graph *)(void *)h;
	return g && g->magic == GRAPH_MAGIC ? g : NULL;
}

/* ---- capture -------------------------------------------------------------- */

bool fake_capture_active(const struct fake_stream *s)
{
	pthread_mutex_lock(&graph_lock);
	bool on = s->capture != NULL;
	pthread_mutex_unlock(&graph_lock);
	return on;
}

CUresult fake_capture_op(struct fake_stream *s, const struct fake_op *op, bool *taken)
{
	CUresult rc = CUDA_SUCCESS;
	struct fake_op *node = malloc(sizeof(*node));

	pthread_mutex_lock(&graph_lock);
	*taken = s->capture != NULL;
	if (!*taken) {
		free(node);
	} else if (s->capture_invalid) {
		rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		free(node);
	} else if (!node || !fake_op_dup(node, op)) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		free(node);
	} else {
		struct fake_body *b = s->capture->body;
		*b->tail = node;
		b->tail = &node->next;
	}
	pthread_mutex_unlock(&graph_lock);
	return rc;
}

bool fake_capture_conflict(struct fake_ctx *ctx, bool all, const char *what)
{
	bool found = false;
	pthread_mutex_lock(&graph_lock);
	for (struct fake_stream *s = captures; s; s = s->next_capture) {
		if (s->ctx == ctx && (all || s->blocking)) {
			s->capture_invalid = true;
			found = true;
		}
	}
	pthread_mutex_unlock(&graph_lock);
	if (found)
		fake_violation("%s while a stream captures (the capture is invalidated)", what);
	return found;
}

FAKE_EXPORT CUresult cuStreamBeginCapture(CUstream hstream, CUstreamCaptureMode mode)
{
	NEED_CONTEXT();
	struct fake_stream *s;
	CUresult rc = fake_stream_of(hstream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!s)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture */
	if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_graph *g = calloc(1, sizeof(*g));
	struct fake_body *b = calloc(1, sizeof(*b));
	if (!g || !b) {
		free(g);
		free(b);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	b->refs = 1;
	b->tail = &b->nodes;
	*g = (struct fake_graph){.magic = GRAPH_MAGIC, .body = b, .capturing = s};
	pthread_mutex_lock(&graph_lock);
	if (s->capture) {
		pthread_mutex_unlock(&graph_lock);
		free(g);
		free(b);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	s->capture = g;
	s->capture_invalid = false;
	s->capture_id = ++capture_ids;
	s->next_capture = captures;
	captures = s;
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamEndCapture(CUstream hstream, CUgraph *out)
{
	NEED_CONTEXT();
	struct fake_stream *s;
	CUresult rc = fake_stream_of(hstream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	struct fake_graph *g = s ? s->capture : NULL;
	if (!g) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	for (struct fake_stream **pp = &captures; *pp; pp = &(*pp)->next_capture) {
		if (*pp == s) {
			*pp = s->next_capture;
			break;
		}
	}
	bool invalid = s->capture_invalid;
	s->capture = NULL;
	s->capture_invalid = false;
	g->capturing = NULL;
	pthread_mutex_unlock(&graph_lock);
	*out = NULL;
	if (invalid) {
		g->magic = 0;
		fake_body_put(g->body);
		free(g);
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	}
	*out = (CUgraph)(void *)g;
	return CUDA_SUCCESS;
}

/* The capture status of a stream; the legacy stream answers
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while a blocking stream of the
 * current context captures. A stream handle needs no current context. */
static CUresult capture_status(CUstream hstream, CUstreamCaptureStatus *st, uint64_t *id,
                               struct fake_graph **graph)
{
	struct fake_stream *s = (struct fake_stream *)(void *)hstream;
	CUresult rc = CUDA_SUCCESS;

	if (hstream == CU_STREAM_LEGACY || !hstream) {
		NEED_CONTEXT();
		s = NULL;
	} else if (s->magic != STREAM_MAGIC) {
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (!st)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	*st = CU_STREAM_CAPTURE_STATUS_NONE;
	if (!s) {
		for (struct fake_stream *c = captures; c; c = c->next_capture)
			if (c->ctx == fake_current() && c->blocking)
				rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	} else if (s->capture) {
		*st = s->capture_invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
		                         : CU_STREAM_CAPTURE_STATUS_ACTIVE;
		if (id)
			*id = s->capture_id;
		if (graph)
			*graph = s->capture;
	}
	pthread_mutex_unlock(&graph_lock);
	return rc;
}

FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream hstream, CUstreamCaptureStatus *st)
{
	NEED_INIT();
	INJECT("cuStreamIsCapturing");
	return capture_status(hstream, st, NULL, NULL);
}

FAKE_EXPORT CUresult cuStreamGetCaptureInfo(CUstream hstream, CUstreamCaptureStatus *st,
                                            cuuint64_t *id, CUgraph *graph,
                                            const CUgraphNode **deps, const CUgraphEdgeData **edges,
                                            size_t *ndeps)
{
	NEED_INIT();
	INJECT("cuStreamGetCaptureInfo");
	struct fake_graph *g = NULL;
	uint64_t cid = 0;
	if (edges && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = capture_status(hstream, st, &cid, &g);
	if (rc != CUDA_SUCCESS || *st != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		return rc;
	if (id)
		*id = cid;
	if (graph)
		*graph = (CUgraph)(void *)g;
	/* The fake's nodes have no handles: no dependencies to show. */
	if (deps)
		*deps = NULL;
	if (edges)
		*edges = NULL;
	if (ndeps)
		*ndeps = 0;
	return CUDA_SUCCESS;
}

/* ---- graphs and their launches --------------------------------------------- */

FAKE_EXPORT CUresult cuGraphDestroy(CUgraph hgraph)
{
	NEED_INIT();
	pthread_mutex_lock(&graph_lock);
	struct fake_graph *g = graph_of(hgraph);
	bool capturing = g && g->capturing;
	if (g && !capturing)
		g->magic = 0;
	pthread_mutex_unlock(&graph_lock);
	if (!g)
		return CUDA_ERROR_INVALID_VALUE;
	if (capturing) /* the capture's to end, not the caller's to destroy */
		return CUDA_ERROR_ILLEGAL_STATE;
	fake_body_put(g->body);
	free(g);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph hgraph,
                                                 unsigned long long flags)
{
	NEED_CONTEXT();
	(void)flags;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_exec *x = calloc(1, sizeof(*x));
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&graph_lock);
	struct fake_graph *g = graph_of(hgraph);
	if (!g || g->capturing) {
		pthread_mutex_unlock(&graph_lock);
		free(x);
		return CUDA_ERROR_INVALID_VALUE;
	}
	g->body->refs++;
	*x = (struct fake_exec){.magic = EXEC_MAGIC, .body = g->body};
	pthread_mutex_unlock(&graph_lock);
	*out = (CUgraphExec)(void *)x;
	return CUDA_SUCCESS;
}

static struct fake_exec *exec_of(CUgraphExec h)
{
	struct fake_exec *x = (struct fake_exec *)(void *)h;
	return x && x->magic == EXEC_MAGIC ? x : NULL;
}

FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec hexec, CUstream hstream)
{
	NEED_CONTEXT();
	struct fake_exec *x = exec_of(hexec);
	struct fake_stream *s;
	if (!x)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = fake_stream_of(hstream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (s && fake_capture_active(s))
		return CUDA_ERROR_NOT_SUPPORTED; /* no child graphs in the fake */
	if (!s &&
	    fake_capture_conflict(fake_current(), false, "cuGraphLaunch on the legacy stream"))
		return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	/* Each node queued holds the body until it has run. The nodes do not
	 * change once captured, and the executable graph holds them. */
	for (const struct fake_op *n = x->body->nodes; n && rc == CUDA_SUCCESS; n = n->next) {
		pthread_mutex_lock(&graph_lock);
		x->body->refs++;
		pthread_mutex_unlock(&graph_lock);
		rc = fake_async_launch(s, n, x->body);
		if (rc != CUDA_SUCCESS)
			fake_body_put(x->body);
	}
	return rc;
}

FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hexec)
{
	NEED_INIT();
	struct fake_exec *x = exec_of(hexec);
	if (!x)
		return CUDA_ERROR_INVALID_VALUE;
	x->magic = 0;
	fake_body_put(x->body);
	free(x);
	return CUDA_SUCCESS;
}

/* ---- user objects ------------------------------------------------------------ */

FAKE_EXPORT CUresult cuUserObjectCreate(CUuserObject *out, void *ptr, CUhostFn destroy,
                                        unsigned int refs, unsigned int flags)
{
	NEED_INIT();
	INJECT("cuUserObjectCreate");
	if (!out || !destroy || !refs || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_uobj *o = malloc(sizeof(*o));
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*o = (struct fake_uobj){.magic = UOBJ_MAGIC, .ptr = ptr, .destroy = destroy, .refs = refs};
	*out = (CUuserObject)(void *)o;
	return CUDA_SUCCESS;
}

static struct fake_uobj *uobj_of(CUuserObject h)
{
	struct fake_uobj *o = (struct fake_uobj *)(void *)h;
	return o && o->magic == UOBJ_MAGIC ? o : NULL;
}

FAKE_EXPORT CUresult cuUserObjectRelease(CUuserObject obj, unsigned int count)
{
	NEED_INIT();
	pthread_mutex_lock(&graph_lock);
	struct fake_uobj *o = uobj_of(obj);
	bool bad = !o || !count || o->refs < count;
	bool last = !bad && uobj_release_locked(o, count);
	pthread_mutex_unlock(&graph_lock);
	if (bad) {
		if (o && count)
			fake_violation("cuUserObjectRelease of references not held");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (last)
		uobj_destroy(o);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphRetainUserObject(CUgraph hgraph, CUuserObject obj, unsigned int count,
                                             unsigned int flags)
{
	NEED_INIT();
	INJECT("cuGraphRetainUserObject");
	if (!count || (flags & ~(unsigned)CU_GRAPH_USER_OBJECT_MOVE))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&graph_lock);
	struct fake_graph *g = graph_of(hgraph);
	struct fake_uobj *o = uobj_of(obj);
	struct fake_body *b = g ? g->body : NULL;
	if (!g || !o || ((flags & CU_GRAPH_USER_OBJECT_MOVE) && o->refs < count)) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else if (b->nowned == b->owned_cap) {
		unsigned cap = b->owned_cap ? 2 * b->owned_cap : 4;
		struct fake_owned *n = realloc(b->owned, cap * sizeof(*n));
		if (!n)
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		else
			b->owned = n, b->owned_cap = cap;
	}
	if (rc == CUDA_SUCCESS) {
		/* Moved: the caller's references become the graph's. */
		if (!(flags & CU_GRAPH_USER_OBJECT_MOVE))
			o->refs += count;
		b->owned[b->nowned++] = (struct fake_owned){o, count};
	}
	pthread_mutex_unlock(&graph_lock);
	return rc;
}
