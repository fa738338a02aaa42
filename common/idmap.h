/*
 * idmap.h - open-addressing hash table from 64-bit ids to pointers.
 *
 * Linear probing with backward-shift deletion (no tombstones), so lookups,
 * inserts and removals stay O(1) on average however many allocations a
 * connection accumulates and frees. Values must not be NULL: an empty slot is
 * one whose value is NULL, which leaves every key (0 included) usable.
 * Not thread-safe: the owner serialises access. Shared by the daemon and
 * the client library.
 */
#ifndef GPB_IDMAP_H
#define GPB_IDMAP_H

#include <stddef.h>
#include <stdint.h>

struct idmap_slot {
	uint64_t key;
	void *value;
};

struct idmap {
	struct idmap_slot *slots;
	size_t cap; /* 0 or a power of two */
	size_t count;
};

void idmap_init(struct idmap *m);
/* Frees the table (not the values). */
void idmap_finish(struct idmap *m);
void *idmap_get(const struct idmap *m, uint64_t key);
/*
 * Grows the table so that @extra more inserts cannot fail. Lets callers
 * take every allocation before an operation that cannot be undone.
 * 0 or -ENOMEM.
 */
int idmap_reserve(struct idmap *m, size_t extra);
/* Inserts a key that is not present. 0 or -ENOMEM. */
int idmap_put(struct idmap *m, uint64_t key, void *value);
/* Removes a key; returns its value, or NULL when absent. May shrink the
 * table, undoing an earlier idmap_reserve(). */
void *idmap_remove(struct idmap *m, uint64_t key);
/*
 * Iterates: start with *pos = 0; returns the next value (and its key in
 * *key if not NULL) or NULL at the end. The table must not change meanwhile.
 */
void *idmap_next(const struct idmap *m, size_t *pos, uint64_t *key);

#endif
