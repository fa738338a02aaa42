/*
 * dispatch.h - turns one request frame into one reply frame.
 *
 * No I/O: the server hands in a frame and sends back what comes out, with
 * the descriptor to attach when there is one.
 */
#ifndef GPB_DISPATCH_H
#define GPB_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "broker.h"

struct dispatch_reply {
	char *frame; /* malloc'd, newline-terminated; NULL = could not encode (close) */
	size_t len;
	int fd;        /* descriptor to send with the frame (not owned), or -1 */
	bool deferred; /* no reply now: it goes out later through broker_send */
};

/* Answers one frame from session s. Never fails without a reply except when
 * host memory runs out (frame NULL). */
void dispatch_frame(struct broker *b, struct session *s, const char *frame, size_t len,
                    struct dispatch_reply *out);

/* An error reply that is not an answer to a parsed request (frame too large,
 * too many clients). */
void dispatch_error(int code, const char *message, struct dispatch_reply *out);

/*
 * The deferred reply to a waiting alloc (broker_wait.c calls it): the grant
 * when rc is 0, else the error alloc would have answered (-ETIMEDOUT is the
 * timeout error). Sent through broker_send; if the reply cannot be encoded
 * the allocation is freed again, so the client is never charged for memory
 * it was not told about.
 */
void dispatch_wait_done(struct broker *b, const struct broker_wait *w, int rc,
                        const struct broker_grant *g);

#endif
