/*
 * fuzz-input.h - reading a fuzz input as a stream of small numbers, for the
 * harnesses that turn bytes into operation sequences. Past the end every
 * read yields 0, so an input of any length is a valid program.
 */
#ifndef GPB_FUZZ_INPUT_H
#define GPB_FUZZ_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct fuzz_input {
	const uint8_t *p;
	size_t left;
};

static inline bool fuzz_more(const struct fuzz_input *in)
{
	return in->left > 0;
}

static inline uint8_t fuzz_u8(struct fuzz_input *in)
{
	if (!in->left)
		return 0;
	in->left--;
	return *in->p++;
}

static inline uint64_t fuzz_bytes(struct fuzz_input *in, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)fuzz_u8(in) << (8 * i);
	return v;
}

/* A size that is often small, sometimes huge: 16 bits of mantissa shifted
 * by 0..63, and now and then one of the edge values. */
static inline uint64_t fuzz_size(struct fuzz_input *in)
{
	uint8_t sel = fuzz_u8(in);
	uint64_t v = fuzz_bytes(in, 2);
	switch (sel & 0xc0) {
	case 0x00:
		return v;
	case 0x40:
		return v << (sel & 31);
	case 0x80:
		return (sel & 0x3f) < 63 ? v << (sel & 0x3f) : v;
	default: {
		static const uint64_t edge[] = {0,
		                                1,
		                                255,
		                                256,
		                                257,
		                                UINT64_MAX,
		                                UINT64_MAX - 255,
		                                UINT64_MAX / 2,
		                                1ull << 32,
		                                (1ull << 21) - 1,
		                                1ull << 21,
		                                (1ull << 21) + 1};
		return edge[v % (sizeof(edge) / sizeof(edge[0]))];
	}
	}
}

#define FUZZ_FAIL(...)                                                                             \
	do {                                                                                       \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                    \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		abort();                                                                           \
	} while (0)

#define FUZZ_ASSERT(cond, ...)                                                                     \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: assertion failed: %s: ", __FILE__, __LINE__,       \
			        #cond);                                                            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#endif
