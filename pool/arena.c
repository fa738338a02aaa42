/*
 * arena.c - fixed-size objects in 64 KiB chunks (see arena.h).
 *
 * Slots are numbered within their chunk. A free slot holds, in its first
 * four bytes, the number of the next free slot of its chunk (0 ends the
 * list: slot 0 holds the chunk's head, never an object). Slots from `bump`
 * up have never been used and are not on the list, so a fresh chunk costs
 * nothing per slot, and only the pages actually used become resident.
 */
#include "arena.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if ARENA_POISONS
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

void arena_init(struct arena *a, size_t size, unsigned index_bits)
{
	memset(a, 0, sizeof(*a));
	if (size < 8)
		size = 8;
	a->size = (uint32_t)((size + 7) & ~(size_t)7);
	a->recip = (uint32_t)(((1ull << 32) + a->size - 1) / a->size);
	a->first = (uint32_t)((sizeof(struct arena_chunk) + a->size - 1) / a->size);
	a->end = ARENA_CHUNK / a->size;
	while ((1u << a->shift) < a->end)
		a->shift++;
	if (index_bits > 32)
		index_bits = 32;
	a->index_bits = index_bits;
	a->max_no = index_bits > a->shift ? (uint32_t)(1ull << (index_bits - a->shift)) : 1;
	a->avail = ARENA_NONE;
}

static void chunk_unmap(char *c)
{
	/* Poison must not outlive the mapping: the address may come back
	 * as anything. */
	UNPOISON(c, ARENA_CHUNK);
	munmap(c, ARENA_CHUNK);
}

void arena_finish(struct arena *a)
{
	for (uint32_t i = 0; i < a->cap; i++) {
		if (a->chunks[i])
			chunk_unmap(a->chunks[i]);
	}
	free(a->chunks);
	free(a->meta);
	arena_init(a, a->size, a->index_bits);
}

/* A 64 KiB mapping aligned to 64 KiB: map twice that, cut off the ends. */
static char *map_aligned(void)
{
	char *p = mmap(NULL, 2 * (size_t)ARENA_CHUNK, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t head;

	if (p == MAP_FAILED)
		return NULL;
	head = (ARENA_CHUNK - ((uintptr_t)p & (ARENA_CHUNK - 1))) & (ARENA_CHUNK - 1);
	if (head)
		munmap(p, head);
	munmap(p + head + ARENA_CHUNK, ARENA_CHUNK - head);
	return p + head;
}

static void avail_push(struct arena *a, uint32_t no)
{
	struct arena_meta *m = &a->meta[no];

	m->prev = ARENA_NONE;
	m->next = a->avail;
	if (a->avail != ARENA_NONE)
		a->meta[a->avail].prev = no;
	a->avail = no;
	m->listed = 1;
}

void arena_unlist(struct arena *a, uint32_t no)
{
	struct arena_meta *m = &a->meta[no];

	if (m->prev != ARENA_NONE)
		a->meta[m->prev].next = m->next;
	else
		a->avail = m->next;
	if (m->next != ARENA_NONE)
		a->meta[m->next].prev = m->prev;
	m->prev = m->next = ARENA_NONE;
	m->listed = 0;
}

static int grow(struct arena *a)
{
	uint32_t cap = a->cap ? 2 * a->cap : 16;
	struct arena_meta *meta;
	char **chunks;

	if (cap > a->max_no)
		cap = a->max_no;
	chunks = realloc(a->chunks, cap * sizeof(*chunks));
	if (!chunks)
		return -ENOMEM;
	a->chunks = chunks;
	meta = realloc(a->meta, cap * sizeof(*meta));
	if (!meta)
		return -ENOMEM;
	a->meta = meta;
	memset(chunks + a->cap, 0, (cap - a->cap) * sizeof(*chunks));
	memset(meta + a->cap, 0, (cap - a->cap) * sizeof(*meta));
	a->cap = cap;
	return 0;
}

static int chunk_add(struct arena *a)
{
	struct arena_chunk *head;
	uint32_t no = 0;
	char *c;

	while (no < a->cap && a->chunks[no])
		no++;
	if (no >= a->max_no)
		return -ENOMEM;
	if (no == a->cap && grow(a))
		return -ENOMEM;
	c = map_aligned();
	if (!c)
		return -ENOMEM;
	head = (struct arena_chunk *)c;
	*head = (struct arena_chunk){.arena = a, .no = no};
	POISON(c + (size_t)a->first * a->size, (size_t)(a->end - a->first) * a->size);
	a->chunks[no] = c;
	a->meta[no] = (struct arena_meta){.bump = a->first};
	a->nchunks++;
	a->nfree += a->end - a->first;
	a->empty++;
	avail_push(a, no);
	return 0;
}

int arena_reserve(struct arena *a, unsigned n)
{
	while (a->nfree < n) {
		int err = chunk_add(a);

		if (err)
			return err;
	}
	return 0;
}

void *arena_alloc(struct arena *a, uint32_t *index)
{
	struct arena_meta *m;
	uint32_t no, slot;
	char *p;

	if (a->avail == ARENA_NONE && chunk_add(a))
		return NULL;
	no = a->avail;
	m = &a->meta[no];
	if (m->free) {
		slot = m->free;
		p = a->chunks[no] + (size_t)slot * a->size;
		UNPOISON(p, a->size);
		memcpy(&m->free, p, sizeof(m->free));
	} else {
		slot = m->bump++;
		p = a->chunks[no] + (size_t)slot * a->size;
		UNPOISON(p, a->size);
	}
	if (m->used++ == 0)
		a->empty--;
	if (!m->free && m->bump == a->end)
		arena_unlist(a, no);
	a->live++;
	a->nfree--;
	memset(p, 0, a->size);
	if (index)
		*index = no << a->shift | slot;
	return p;
}

void arena_free_index(struct arena *a, uint32_t index, void *p)
{
	uint32_t no = index >> a->shift;
	struct arena_meta *m = &a->meta[no];

	/* Full chunks are off the list: back on at the head, so the next
	 * allocations reuse what is warm. */
	if (!m->listed)
		avail_push(a, no);
	memcpy(p, &m->free, sizeof(m->free));
	POISON(p, a->size);
	m->free = index & ((1u << a->shift) - 1);
	a->live--;
	a->nfree++;
	if (--m->used)
		return;
	if (a->empty++ == 0)
		return; /* the one empty chunk kept */
	arena_unlist(a, no);
	chunk_unmap(a->chunks[no]);
	a->chunks[no] = NULL;
	a->nchunks--;
	a->nfree -= a->end - a->first;
	a->empty--;
}

void arena_free(struct arena *a, void *p)
{
	if (p)
		arena_free_index(a, arena_index(a, p), p);
}

int arena_check(const struct arena *a)
{
	uint64_t live = 0, nfree = 0, listed = 0, want_listed = 0;
	uint32_t chunks = 0, empty = 0, prev = ARENA_NONE;

	for (uint32_t no = 0; no < a->cap; no++) {
		const struct arena_meta *m = &a->meta[no];
		const char *c = a->chunks[no];
		uint32_t n = 0, slot;

		if (!c)
			continue;
		if (((const struct arena_chunk *)c)->arena != a ||
		    ((const struct arena_chunk *)c)->no != no ||
		    ((uintptr_t)c & (ARENA_CHUNK - 1)) || m->bump < a->first || m->bump > a->end)
			return -EFAULT;
		for (slot = m->free; slot; n++) {
			const char *p = c + (size_t)slot * a->size;
			uint32_t next;

			if (slot < a->first || slot >= m->bump || n > m->bump - a->first)
				return -EFAULT;
			UNPOISON(p, sizeof(next));
			memcpy(&next, p, sizeof(next));
			POISON(p, sizeof(next));
			slot = next;
		}
		if (m->used + n != m->bump - a->first)
			return -EFAULT;
		/* On the list exactly when it has a free slot. */
		if (m->listed != (m->free || m->bump < a->end))
			return -EFAULT;
		want_listed += m->listed;
		live += m->used;
		nfree += n + a->end - m->bump;
		empty += !m->used;
		chunks++;
	}
	for (uint32_t no = a->avail; no != ARENA_NONE; prev = no, no = a->meta[no].next) {
		if (++listed > chunks || no >= a->cap || !a->chunks[no] || !a->meta[no].listed ||
		    a->meta[no].prev != prev)
			return -EFAULT;
	}
	if (listed != want_listed || live != a->live || nfree != a->nfree || chunks != a->nchunks ||
	    empty != a->empty || empty > 1)
		return -EFAULT;
	return 0;
}
