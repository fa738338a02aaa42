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

#endif
