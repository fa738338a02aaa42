/*
 * exitwatch.h - the server's side of the broker's exit watch: a pidfd per
 * evicted process, polled by the loop (exitwatch.c).
 */
#ifndef GPB_EXITWATCH_H
#define GPB_EXITWATCH_H

#include <uv.h>

#include "broker.h"
#include "list.h"

struct exitwatch {
	uv_loop_t *loop;
	struct broker *broker;
	struct list entries; /* struct exitwatch_entry */
};

/* Installs itself as the broker's exit watch (broker_set_exit_watch). */
void exitwatch_init(struct exitwatch *w, uv_loop_t *loop, struct broker *b);
/* Uninstalls itself and closes every watch (their handles close with the
 * loop's next turn); the broker keeps the ghosts until it is destroyed. */
void exitwatch_finish(struct exitwatch *w);

#endif
