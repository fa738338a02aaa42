/*
 * idmap.c - linear-probing hash map from ids to pointers.
 */
#include "idmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t idmap_hash(uint64_t key)
{
	/* splitmix64 finaliser: sequential ids spread over the table. */
	key ^= key >> 30;
	key *= 0xbf58476d1ce4e5b9ull;
	key ^= key >> 27;
	key *= 0x94d049bb133111ebull;
	key ^= key >> 31;
	return (size_t)key;
}

void idmap_init(struct idmap *map)
{
	memset(map, 0, sizeof(*map));
}

void idmap_finish(struct idmap *map)
{
	free(map->slots);
	memset(map, 0, sizeof(*map));
}

static int idmap_grow(struct idmap *map)
{
	size_t cap = map->slots ? (map->mask + 1) * 2 : 16;
	struct idmap_slot *slots = calloc(cap, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	struct idmap_slot *old = map->slots;
	size_t old_cap = old ? map->mask + 1 : 0;
	map->slots = slots;
	map->mask = cap - 1;
	for (size_t i = 0; i < old_cap; i++) {
		if (!old[i].key)
			continue;
		size_t j = idmap_hash(old[i].key) & map->mask;
		while (slots[j].key)
			j = (j + 1) & map->mask;
		slots[j] = old[i];
	}
	free(old);
	return 0;
}

int idmap_put(struct idmap *map, uint64_t key, void *value)
{
	/* Keep the load under 3/4 so probe runs stay short. */
	if (!map->slots || (map->count + 1) * 4 > (map->mask + 1) * 3) {
		int rc = idmap_grow(map);
		if (rc < 0)
			return rc;
	}
	size_t i = idmap_hash(key) & map->mask;
	while (map->slots[i].key && map->slots[i].key != key)
		i = (i + 1) & map->mask;
	if (!map->slots[i].key)
		map->count++;
	map->slots[i].key = key;
	map->slots[i].value = value;
	return 0;
}

void *idmap_get(const struct idmap *map, uint64_t key)
{
	if (!map->slots || !key)
		return NULL;
	for (size_t i = idmap_hash(key) & map->mask; map->slots[i].key; i = (i + 1) & map->mask) {
		if (map->slots[i].key == key)
			return map->slots[i].value;
	}
	return NULL;
}

void *idmap_remove(struct idmap *map, uint64_t key)
{
	if (!map->slots || !key)
		return NULL;
	size_t i = idmap_hash(key) & map->mask;
	while (map->slots[i].key != key) {
		if (!map->slots[i].key)
			return NULL;
		i = (i + 1) & map->mask;
	}
	void *value = map->slots[i].value;
	/* Backward-shift: pull later members of the run into the hole when
	 * their home slot is at or before it. */
	size_t hole = i;
	for (size_t j = (i + 1) & map->mask; map->slots[j].key; j = (j + 1) & map->mask) {
		size_t home = idmap_hash(map->slots[j].key) & map->mask;
		if (((j - home) & map->mask) >= ((j - hole) & map->mask)) {
			map->slots[hole] = map->slots[j];
			hole = j;
		}
	}
	map->slots[hole].key = 0;
	map->slots[hole].value = NULL;
	map->count--;
	return value;
}
