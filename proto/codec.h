/*
 * codec.h - typed codecs for the hot path's frames (alloc, free and the
 * grant that answers an alloc), without the cJSON tree.
 *
 * Why: building, printing, parsing and freeing a cJSON tree was most of
 * both sides' instructions per alloc+free (bench/results/2026-11-21-sim.md).
 * These codecs read and write the documented JSON directly, from the
 * message lists of schema.h (PROTO_ALLOC_PARAMS, PROTO_FREE_PARAMS,
 * PROTO_GRANT_RESULT).
 *
 * The decoders take only the canonical form: one flat object per level,
 * no blanks, no escapes, printable ASCII, every member of the message's
 * list at most once and nothing else, every value well-formed. Anything
 * else is -EAGAIN: the caller decodes the frame the general way (cJSON),
 * which accepts every valid frame and words every refusal. So a frame
 * means the same on both paths; the fast one only skips work. The encoders
 * write exactly the bytes cJSON_PrintUnformatted() writes for the same
 * object (test-proto-fast checks both).
 *
 * No cJSON here: the daemon's and the library's hot paths link this alone.
 */
#ifndef GPB_PROTO_CODEC_H
#define GPB_PROTO_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "params.h"
#include "schema.h"

/* An alloc or free request, decoded into the params structs that the
 * general decoder fills (params.h): the method's is @alloc or @free. Its
 * bounds are not checked: the caller runs proto_alloc_params_check() or
 * proto_free_params_check(), as proto_params_decode() does. */
struct proto_fast_req {
	int op; /* PROTO_OP_ALLOC or PROTO_OP_FREE */
	char id[PROTO_MAX_ID + 1];
	struct proto_alloc_params alloc;
	struct proto_free_params free;
};

/* 0, or -EAGAIN: not in the canonical form (decode it the general way). */
int proto_fast_request(const char *frame, size_t len, struct proto_fast_req *out);

/* A grant, as the reply to alloc, attach, open and claim carries it
 * (PROTO_GRANT_RESULT; a claim adds the array's label and instance). */
struct proto_grant {
	uint64_t id;
	int device;
	uint64_t slab, slab_size, offset, size;
	const unsigned char *handle; /* PROTO_HANDLE_SIZE bytes, or NULL */
	const char *device_uuid;     /* with handle */
	bool fd, pool, vmm, keep;
	uint64_t pool_id;  /* with fd and pool */
	const char *label; /* a claim's, or NULL */
	uint64_t instance; /* with label */
};

/* Room enough for the grant reply to @id: 512 bytes for the members and
 * figures, and the strings escaped at worst (six bytes a byte). Sized to
 * the request, so that a common grant stays a small allocation. */
size_t proto_grant_reply_room(const char *id, const struct proto_grant *g);

/*
 * Writes the success reply to request @id carrying @g, newline included
 * and NUL-terminated, into @buf (@cap bytes): the one encoder of a grant,
 * byte for byte what cJSON_PrintUnformatted() writes for the same object.
 * Returns its length (without the NUL), or 0 when it does not fit.
 */
size_t proto_grant_reply(char *buf, size_t cap, const char *id, const struct proto_grant *g);

/*
 * Reads a success reply to request @want_id that carries a grant in a slab
 * the connection holds already (no handle; the frame without its newline).
 * 0 with *out filled (handle NULL), or -EAGAIN: another frame (an event, an
 * error, another id, a grant handing a slab over) or not canonical (decode
 * it the general way).
 */
int proto_grant_parse(const char *frame, size_t len, const char *want_id, struct proto_grant *out);

/* The request frames the library sends on the hot path, newline included
 * and NUL-terminated, into @buf: their length, or 0 when they do not fit. */
size_t proto_fast_alloc_request(char *buf, size_t cap, const char *id, uint64_t instance,
                                uint64_t size, uint64_t alignment, uint32_t wait_ms);
size_t proto_fast_free_request(char *buf, size_t cap, const char *id, uint64_t alloc_id,
                               bool reply);

#endif
