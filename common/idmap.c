/*
 * idmap.c - open-addressing hash table from 64-bit ids to pointers.
 */
#include "idmap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* Tables this small are not worth shrinking. */
#define IDMAP_MIN_SHRINK 64

/* Slab ids are small sequential numbers: mix them (splitmix64's finaliser)
 * so they do not cluster in neighbouring slots. */
static size_t idmap_hash(uint64_t key, size_t cap)
{
	key ^= key >> 30;
	key *= 0xbf58476d1ce4e5b9ULL;
	key ^= key >> 27;
	key *= 0x94d049bb133111ebULL;
	key ^= key >> 31;
	return (size_t)key & (cap - 1);
}

void idmap_init(struct idmap *m)
{
	m->slots = NULL;
	m->cap = 0;
	m->count = 0;
}

void idmap_finish(struct idmap *m)
{
	free(m->slots);
	idmap_init(m);
}

/* Finds the slot holding @key, or the empty slot where it would go. */
static struct idmap_slot *idmap_find(const struct idmap *m, uint64_t key)
{
	size_t i = idmap_hash(key, m->cap);

	while (m->slots[i].value && m->slots[i].key != key)
		i = (i + 1) & (m->cap - 1);
	return &m->slots[i];
}

void *idmap_get(const struct idmap *m, uint64_t key)
{
	if (!m->count)
		return NULL;
	return idmap_find(m, key)->value;
}

static int idmap_resize(struct idmap *m, size_t cap)
{
	struct idmap_slot *old = m->slots;
	size_t old_cap = m->cap;

	m->slots = calloc(cap, sizeof(*m->slots));
	if (!m->slots) {
		m->slots = old;
		return -ENOMEM;
	}
	m->cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (old[i].value)
			*idmap_find(m, old[i].key) = old[i];
	}
	free(old);
	return 0;
}

int idmap_reserve(struct idmap *m, size_t extra)
{
	size_t need = m->count + extra;
	size_t cap = m->cap ? m->cap : 16;

	/* Keep the load factor at or below 3/4: linear probing with a mixed
	 * hash still finds a key in ~2.5 probes on average there (~8.5 for
	 * an absent one, most within one or two cache lines), and the table
	 * costs at most 43 bytes an entry right after it grows (64 at 1/2):
	 * the daemon keeps one entry per live allocation. */
	while (cap - cap / 4 < need) {
		if (cap > SIZE_MAX / 2 / sizeof(struct idmap_slot))
			return -ENOMEM;
		cap *= 2;
	}
	if (cap == m->cap)
		return 0;
	return idmap_resize(m, cap);
}

int idmap_put(struct idmap *m, uint64_t key, void *value)
{
	struct idmap_slot *slot;
	int rc = idmap_reserve(m, 1);

	if (rc < 0)
		return rc;
	slot = idmap_find(m, key);
	if (!slot->value)
		m->count++;
	slot->key = key;
	slot->value = value;
	return 0;
}

void *idmap_remove(struct idmap *m, uint64_t key)
{
	struct idmap_slot *slot;
	size_t hole, i, home;
	void *value;

	if (!m->count)
		return NULL;
	slot = idmap_find(m, key);
	value = slot->value;
	if (!value)
		return NULL;
	m->count--;
	/* Backward shift: pull later members of the probe run into the hole
	 * unless that would move them before their home slot. */
	hole = (size_t)(slot - m->slots);
	i = hole;
	for (;;) {
		bool movable;

		i = (i + 1) & (m->cap - 1);
		if (!m->slots[i].value)
			break;
		home = idmap_hash(m->slots[i].key, m->cap);
		/* Movable when home lies cyclically outside (hole, i]. */
		if (hole <= i)
			movable = home <= hole || home > i;
		else
			movable = home <= hole && home > i;
		if (movable) {
			m->slots[hole] = m->slots[i];
			hole = i;
		}
	}
	m->slots[hole].value = NULL;
	m->slots[hole].key = 0;
	/* Give memory back after a burst (100k allocations freed), with
	 * hysteresis against resizing back and forth. Failing to shrink only
	 * keeps the larger table. */
	if (m->cap > IDMAP_MIN_SHRINK && m->count < m->cap / 8)
		idmap_resize(m, m->cap / 2);
	return value;
}

void *idmap_next(const struct idmap *m, size_t *pos, uint64_t *key)
{
	while (*pos < m->cap) {
		const struct idmap_slot *slot = &m->slots[(*pos)++];

		if (slot->value) {
			if (key)
				*key = slot->key;
			return slot->value;
		}
	}
	return NULL;
}
