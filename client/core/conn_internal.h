/*
 * conn_internal.h - what conn.c and conn_hot.c share (not for the rest of
 * the library: conn.h is the connection's interface).
 */
#ifndef GPB_CLIENT_CONN_INTERNAL_H
#define GPB_CLIENT_CONN_INTERNAL_H

#include "conn.h"

/* The id prefixes of frees that do not wait (client_conn_send_free), of
 * releases of kept slabs, and of a recall's answer (its lease_returns and
 * recall_done): their replies are not waited for either. */
#define CLIENT_CONN_FREE_ID        "f-"
#define CLIENT_CONN_RELEASE_ID     "rel-"
#define CLIENT_CONN_RETURN_ID      "lr-"
#define CLIENT_CONN_RECALL_DONE_ID "rd-"
/* Frees sent without reading between two non-blocking reads of what the
 * daemon sent meanwhile (events, a free's error): the daemon stops reading
 * from a client that leaves too much unread. */
#define CLIENT_CONN_QUIET_PUMP 256

struct proto_grant;

/* Writes all of @buf; the error that killed the connection otherwise. */
int client_conn_write_frame(struct client_conn *c, const char *buf, size_t len);
/* A request id in decimal into @buf (21 bytes). */
void client_conn_format_id(char *buf, uint64_t v);
/* Answers what was read and not answered yet: reclaim events (release),
 * recall events (lease_return, recall_done) and invalidate events
 * (invalidate_done). */
void client_conn_send_acks(struct client_conn *c);
/* What every exchange does first: the connection settled and alive. */
int client_conn_exchange_start(struct client_conn *c, struct proto_reply *rep, int *fd);
/* Sends @frame (request @id) and reads until its reply: 1 with @fast
 * filled (a grant read by the typed codec), 0 with *rep, or an error. */
int client_conn_exchange_frame(struct client_conn *c, const char *frame, size_t len, const char *id,
                               struct proto_reply *rep, int *fd, struct proto_grant *fast);
/* A reclaim event's data: unmaps the slab (on_reclaim) and queues its
 * release. 0, or the error that killed the connection. */
int client_conn_reclaim(struct client_conn *c, const cJSON *data);
/* A recall event's data: queued, answered by client_conn_send_answers().
 * 0, or the error that killed the connection. */
int client_conn_recall(struct client_conn *c, const cJSON *data);
/* Sends the releases queued by client_conn_reclaim() and answers the
 * recalls queued by client_conn_recall() (on_recall, then recall_done):
 * what the frames at hand asked, before anything else is read. */
void client_conn_send_answers(struct client_conn *c);

#endif
