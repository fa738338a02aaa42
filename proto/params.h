/*
 * params.h - every request's params as a typed struct, decoded and checked
 * once, here, from the member lists of schema.h.
 *
 * Why: each handler used to read its own members with proto_get_* calls,
 * restating types and bounds, and the hot path (codec.c) restated alloc's
 * and free's. Now a method's list (PROTO_<SUFFIX>_PARAMS in schema.h) makes
 * its struct, proto_<name>_params, with a has_<member> flag beside each
 * member; proto_params_decode() fills it from a cJSON tree and the hot path
 * from its canonical frame (codec.h), and both check the bounds with the
 * same proto_<name>_params_check(). The daemon's handlers take the struct
 * and read no JSON.
 *
 * Strings point into the tree (or the frame) they were decoded from: the
 * struct is valid as long as that is.
 */
#ifndef GPB_PROTO_PARAMS_H
#define GPB_PROTO_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "schema.h"

struct proto_error;
struct cJSON;

/* A device as a request names it: by index, or by UUID (index -1). The
 * daemon resolves it against its devices. */
struct proto_device {
	int index;
	const char *uuid;
};

struct proto_devices {
	unsigned count;
	struct proto_device dev[PROTO_MAX_DEVICES];
};

/* A string that is not PROTO_TOKEN_HEX hex digits is a token too, one that
 * opens nothing: the daemon refuses every wrong token in the same words. */
struct proto_token {
	bool valid;
	unsigned char bytes[PROTO_TOKEN_SIZE];
};

struct proto_shape {
	unsigned ndim;
	uint64_t dim[PROTO_MAX_DIMS];
};

/* The C type of each kind of parameter. */
#define PROTO_CTYPE_ID64      uint64_t
#define PROTO_CTYPE_U64       uint64_t
#define PROTO_CTYPE_ALIGN     uint64_t
#define PROTO_CTYPE_BYTES     uint64_t
#define PROTO_CTYPE_INT       int64_t
#define PROTO_CTYPE_SHARE     double
#define PROTO_CTYPE_STRING    const char *
#define PROTO_CTYPE_PNAME     const char *
#define PROTO_CTYPE_BOOL      bool
#define PROTO_CTYPE_MEMORY    int /* enum proto_memory */
#define PROTO_CTYPE_MODE      int /* enum proto_mode */
#define PROTO_CTYPE_ALLOCATOR int /* enum proto_allocator */
#define PROTO_CTYPE_TOKEN     struct proto_token
#define PROTO_CTYPE_DEVICE    struct proto_device
#define PROTO_CTYPE_DEVICES   struct proto_devices
#define PROTO_CTYPE_VERSIONS  bool /* the list holds PROTO_VERSION */
#define PROTO_CTYPE_SHAPE     struct proto_shape
#define PROTO_CTYPE_QUEUE     struct proto_queue

#define PROTO_PARAM_FIELD_(id, cname, kind, presence, lo, hi, expected)                            \
	PROTO_CTYPE_##kind cname;                                                                  \
	bool has_##cname;

/* One element of "requests" (PROTO_QUEUE_ITEM). */
struct proto_queue_item {
	PROTO_QUEUE_ITEM(PROTO_PARAM_FIELD_)
};

struct proto_queue {
	unsigned count;
	struct proto_queue_item item[PROTO_MAX_REQUESTS];
};

/* struct proto_<name>_params for every method (an unused byte in those of
 * methods without params: C has no empty structs). */
#define PROTO_PARAMS_STRUCT_(id, name, flags)                                                      \
	struct proto_##name##_params {                                                             \
		PROTO_##id##_PARAMS(PROTO_PARAM_FIELD_) char none_;                                \
	};
PROTO_OPS(PROTO_PARAMS_STRUCT_)
#undef PROTO_PARAMS_STRUCT_

/* Any method's params: the member named like the method. */
union proto_params {
#define PROTO_PARAMS_MEMBER_(id, name, flags) struct proto_##name##_params name;
	PROTO_OPS(PROTO_PARAMS_MEMBER_)
#undef PROTO_PARAMS_MEMBER_
};

/*
 * Checks the bounds of a decoded struct (what the list's lo, hi and kind
 * say beyond the JSON type): 0, or -EINVAL with *err set to the -32602
 * error for the first member out of bounds, in the list's order. Both
 * paths run these, so a value is refused alike whichever decoded it.
 */
#define PROTO_PARAMS_CHECK_(id, name, flags)                                                       \
	int proto_##name##_params_check(const struct proto_##name##_params *p,                     \
	                                struct proto_error *err);
PROTO_OPS(PROTO_PARAMS_CHECK_)
#undef PROTO_PARAMS_CHECK_

/*
 * Decodes the params object of a request for @op (enum proto_op) into
 * out->name (the method's member of the union; the rest is untouched),
 * checking each member's presence, type and bounds in the list's order.
 * Members the list does not name are ignored (a newer client's). 0, or
 * -EINVAL with *err set (-32602, err->field the member at fault).
 */
int proto_params_decode(int op, const struct cJSON *params, union proto_params *out,
                        struct proto_error *err);

#endif
