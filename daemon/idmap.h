/*
 * idmap.h - a hash map from non-zero 64-bit ids to pointers.
 *
 * Open addressing with linear probing and backward-shift deletion: no
 * tombstones, so lookups stay short however many inserts and removes a
 * long-running daemon sees. Keys are mixed before use because some ids are
 * sequential.
 */
#ifndef GPB_IDMAP_H
#define GPB_IDMAP_H

#include <stddef.h>
#include <stdint.h>

struct idmap_slot {
	uint64_t key; /* 0 = empty */
	void *value;
};

struct idmap {
	struct idmap_slot *slots;
	size_t mask; /* capacity - 1 (capacity is a power of two), or 0 */
	size_t count;
};

void idmap_init(struct idmap *map);
void idmap_finish(struct idmap *map);
/* Inserts or replaces. key must be non-zero. 0 or -ENOMEM. */
int idmap_put(struct idmap *map, uint64_t key, void *value);
void *idmap_get(const struct idmap *map, uint64_t key);
/* Removes and returns the value, or NULL when absent. */
void *idmap_remove(struct idmap *map, uint64_t key);

#endif
