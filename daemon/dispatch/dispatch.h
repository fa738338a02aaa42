/*
 * dispatch.h - turns one request frame into one reply frame, and the
 * broker's events into event frames.
 *
 * No I/O: the server hands in a frame and sends back what comes out, with
 * the descriptor to attach when there is one. What goes out at other times
 * (events, deferred replies) leaves through the sender the server installs.
 */
#ifndef GPB_DISPATCH_H
#define GPB_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "broker.h"
#include "metrics.h"
#include "proto.h"

struct dispatch_reply {
	char *frame; /* malloc'd, newline-terminated; NULL = could not encode (close) */
	size_t len;
	int fd;        /* descriptor to send with the frame, or -1 */
	bool fd_owned; /* fd is the caller's to close once it has sent (or dropped) the
	                  frame: the daemon keeps no copy (host memory) */
	bool deferred; /* no reply now: it goes out later through the sender */
};

/*
 * How dispatch reaches a client outside the reply to its current request:
 * pushed events and deferred replies. Takes ownership of frame (a complete,
 * newline-terminated frame); fd (not owned) rides along when >= 0. The server
 * installs it; without one (unit tests) frames are dropped.
 */
typedef void (*dispatch_send_fn)(void *ctx, struct session *s, char *frame, size_t len, int fd);

/* Ends a session's connection once what was queued for it is written (the
 * server installs it, with the sender's ctx). */
typedef void (*dispatch_close_fn)(void *ctx, struct session *s, const char *why);

/*
 * Re-reads the daemon's configuration and applies what can change live
 * (the server installs it). Fills result with {"applied": [keys],
 * "needs_restart": [keys]}; returns 0 or -EINVAL with message set (the old
 * configuration stays in force).
 */
typedef int (*dispatch_reload_fn)(void *ctx, cJSON *result, char *message, size_t size);

/* The request layer's state: the broker it drives, the request metrics and
 * the hooks of the server above it. */
struct dispatch {
	struct broker *b;
	struct metrics metrics;
	dispatch_send_fn send;
	dispatch_close_fn close;
	void *send_ctx;
	dispatch_reload_fn reload;
	void *reload_ctx;
};

/* Binds d to b and becomes the receiver of b's events (broker_set_events).
 * d must outlive its use by b: dispatch_finish() unbinds it. */
void dispatch_init(struct dispatch *d, struct broker *b);
void dispatch_finish(struct dispatch *d);

void dispatch_set_sender(struct dispatch *d, dispatch_send_fn send, dispatch_close_fn close,
                         void *ctx);
void dispatch_set_reload(struct dispatch *d, dispatch_reload_fn fn, void *ctx);

/* Answers one frame from session s. Never fails without a reply except when
 * host memory runs out (frame NULL). */
void dispatch_frame(struct dispatch *d, struct session *s, const char *frame, size_t len,
                    struct dispatch_reply *out);

/* An error reply that is not an answer to a parsed request (frame too large,
 * too many clients). */
void dispatch_error(int code, const char *message, struct dispatch_reply *out);

/* Encodes and sends an event; data is consumed (NULL: no data). */
void dispatch_send_event(struct dispatch *d, struct session *s, const char *name, cJSON *data);

#endif
