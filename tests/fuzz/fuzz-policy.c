/*
 * fuzz-policy.c - the VRAM policy engine (daemon/policy/policy.h) under
 * fuzzer-chosen operation sequences: registrations and departures on a few
 * devices, proportion, pool, group, mode and limit changes (valid and
 * not), admission with charge and uncharge, the change queue, group info,
 * and chunking.
 *
 * After every operation policy_check() must pass. Besides: a refused call
 * changes nothing that policy_check could not see (same count); passive
 * mode never answers -EDQUOT; an admitted charge stays within the cap
 * (active) and the capacity; headroom never exceeds what the device has
 * left; every queued change names a registered instance; group_info counts
 * the members the harness put there; and chunking returns the fewest chunks
 * that fit, recomputed through the public shape and size functions.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fuzz-input.h"
#include "policy.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SLOTS 16

static const char *const groups[] = {
    "default",
    "a",
    "b",
    "solver",
    "",                                                                  /* invalid: empty */
    "0123456789012345678901234567890123456789012345678901234567890123",  /* 64: the longest */
    "01234567890123456789012345678901234567890123456789012345678901234", /* 65: invalid */
};
#define NGROUPS (int)(sizeof(groups) / sizeof(groups[0]))

static double fuzz_proportion(struct fuzz_input *in)
{
	uint8_t b = fuzz_u8(in);
	static const double odd[] = {0,   -0.0,   1.0,         1.0 + 1e-12, 1e-9,      0.1,
	                             0.3, 0.7,    NAN,         INFINITY,    -INFINITY, -0.5,
	                             2.0, 1e-300, 0.999999999, 0.001};
	if (b < 200)
		return (double)b / 199.0;
	return odd[b % (sizeof(odd) / sizeof(odd[0]))];
}

static uint64_t fuzz_total(struct fuzz_input *in)
{
	uint8_t b = fuzz_u8(in);
	if (b < 240)
		return (uint64_t)(b + 1) << 20;
	static const uint64_t odd[] = {1, 255, 1ull << 40, UINT64_MAX, UINT64_MAX / 3, 1000};
	return odd[b % (sizeof(odd) / sizeof(odd[0]))];
}

static void check(const struct policy *p)
{
	char msg[256] = "";
	if (policy_check(p, msg, sizeof(msg)) < 0)
		FUZZ_FAIL("policy_check: %s", msg);
}

/* Bytes of one chunk of every array at this chunk length, through the
 * public functions; -1 on overflow. */
static int chunk_bytes(const struct policy_array *a, size_t n, uint64_t length, uint64_t granule,
                       uint64_t *out)
{
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		struct policy_array c = a[i];
		uint64_t b;
		policy_chunked_shape(&a[i], length, c.shape);
		if (policy_array_bytes(&c, granule, &b) < 0 ||
		    __builtin_add_overflow(total, b, &total))
			return -1;
	}
	*out = total;
	return 0;
}

static void fuzz_chunking(struct fuzz_input *in)
{
	struct policy_array arrays[4];
	size_t n = 1 + fuzz_u8(in) % 4;
	memset(arrays, 0, sizeof(arrays));
	for (size_t i = 0; i < n; i++) {
		struct policy_array *a = &arrays[i];
		uint8_t h = fuzz_u8(in);
		a->ndim = 1 + h % 4;
		a->axis = (h >> 2) % 5; /* 4 is past ndim sometimes: invalid */
		a->unchunkable = h & 0x80;
		a->elem_size = fuzz_u8(in) % 17; /* 0: invalid */
		for (unsigned d = 0; d < a->ndim; d++)
			a->shape[d] = fuzz_u8(in) & 0x80 ? fuzz_size(in) : fuzz_u8(in);
	}
	uint64_t axis_length = fuzz_u8(in) & 1 ? fuzz_u8(in) : 0;
	uint64_t available = fuzz_size(in);
	uint64_t granule = fuzz_u8(in) & 1 ? 256 : 1;
	struct policy_chunking ch;
	int rc = policy_chunk_parameters(arrays, n, axis_length, available, granule, &ch);
	FUZZ_ASSERT(rc == 0 || rc == -EINVAL || rc == -EOVERFLOW || rc == -ENOMEM, "rc %d", rc);
	if (rc != 0)
		return;
	uint64_t bytes, fewer;
	FUZZ_ASSERT(ch.chunk_length >= 1 && ch.chunk_length <= ch.axis_length, "chunk length %llu",
	            (unsigned long long)ch.chunk_length);
	FUZZ_ASSERT(ch.chunks ==
	                ch.axis_length / ch.chunk_length + (ch.axis_length % ch.chunk_length != 0),
	            "chunks %llu", (unsigned long long)ch.chunks);
	FUZZ_ASSERT(ch.chunk_bytes <= available, "a chunk of %llu bytes does not fit %llu",
	            (unsigned long long)ch.chunk_bytes, (unsigned long long)available);
	FUZZ_ASSERT(chunk_bytes(arrays, n, ch.chunk_length, granule, &bytes) == 0 &&
	                bytes == ch.chunk_bytes,
	            "chunk bytes %llu, recomputed %llu", (unsigned long long)ch.chunk_bytes,
	            (unsigned long long)bytes);
	if (ch.chunks > 1) {
		uint64_t len =
		    ch.axis_length / (ch.chunks - 1) + (ch.axis_length % (ch.chunks - 1) != 0);
		FUZZ_ASSERT(chunk_bytes(arrays, n, len, granule, &fewer) < 0 || fewer > available,
		            "%llu chunks would fit too", (unsigned long long)(ch.chunks - 1));
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_input in = {data, size};
	static struct policy p;
	static struct policy_instance inst[SLOTS];
	bool live[SLOTS] = {false};
	int group_of[SLOTS];
	uint64_t totals[4], next_id = 1;

	int ndev = 1 + fuzz_u8(&in) % 4;
	for (int i = 0; i < ndev; i++)
		totals[i] = fuzz_total(&in);
	uint8_t h = fuzz_u8(&in);
	struct policy_config cfg = {.mode = h & 1 ? POLICY_ACTIVE : POLICY_PASSIVE};
	static const double shares[] = {0, 0.001, 0.01, 0.1, 0.25, 0.3, 0.5, 1.0};
	cfg.min_auto_share = shares[(h >> 1) % 8];
	if (policy_init(&p, &cfg, ndev, totals) < 0)
		FUZZ_FAIL("policy_init");
	memset(inst, 0, sizeof(inst));

	while (fuzz_more(&in)) {
		uint8_t op = fuzz_u8(&in);
		int s = fuzz_u8(&in) % SLOTS;
		struct policy_instance *pi = &inst[s];
		uint64_t count = p.count;
		unsigned warn = 0;
		int rc;
		switch (op % 12) {
		case 0:
		case 1: { /* register */
			if (live[s])
				break;
			int dev = (int)(fuzz_u8(&in) % (ndev + 1)); /* ndev: invalid */
			double prop = fuzz_u8(&in) & 1 ? fuzz_proportion(&in) : 0;
			int g = fuzz_u8(&in) % (NGROUPS + 1);
			rc = policy_add(&p, pi, next_id, dev, prop, g == NGROUPS ? NULL : groups[g],
			                &warn);
			FUZZ_ASSERT(rc == 0 || rc == -EINVAL || rc == -ENOSPC || rc == -EUSERS,
			            "add %d", rc);
			if (rc == 0) {
				live[s] = true;
				group_of[s] = g == NGROUPS ? 0 : g;
				next_id++;
				FUZZ_ASSERT(p.count == count + 1, "count");
				FUZZ_ASSERT(!(prop < 0) && !(prop > 1) && !isnan(prop) &&
				                dev < ndev,
				            "bad registration accepted");
			} else {
				FUZZ_ASSERT(p.count == count, "a refused add changed the count");
			}
			break;
		}
		case 2: /* unregister (dropping its charge) */
			if (live[s]) {
				policy_remove(&p, pi);
				live[s] = false;
				FUZZ_ASSERT(p.count == count - 1, "count");
			}
			break;
		case 3: { /* set_proportion */
			if (!live[s])
				break;
			double prop = fuzz_proportion(&in);
			rc = policy_set_proportion(&p, pi, prop, &warn);
			FUZZ_ASSERT(rc == 0 || rc == -EINVAL || rc == -ENOSPC || rc == -EUSERS,
			            "set %d", rc);
			if (rc == 0)
				FUZZ_ASSERT(pi->proportion == prop && prop > 0 && prop <= 1,
				            "proportion");
			break;
		}
		case 4: /* set_auto */
			if (live[s]) {
				rc = policy_set_auto(&p, pi, &warn);
				FUZZ_ASSERT(rc == 0 || rc == -EUSERS, "set_auto %d", rc);
				if (rc == 0)
					FUZZ_ASSERT(pi->proportion == 0, "not in the auto pool");
			}
			break;
		case 5: { /* set_group */
			int g = fuzz_u8(&in) % NGROUPS;
			if (!live[s])
				break;
			rc = policy_set_group(&p, pi, groups[g]);
			size_t len = strlen(groups[g]);
			FUZZ_ASSERT((rc == 0) == (len >= 1 && len <= POLICY_MAX_NAME),
			            "set_group %d", rc);
			if (rc == 0)
				group_of[s] = g;
			break;
		}
		case 6: { /* set_mode */
			uint8_t m = fuzz_u8(&in) % 3;
			rc =
			    policy_set_mode(&p, m == 2 ? (enum policy_mode)7 : (enum policy_mode)m);
			FUZZ_ASSERT((rc == 0) == (m != 2), "set_mode %d", rc);
			break;
		}
		case 7: {                                               /* set_limit */
			int dev = (int)(fuzz_u8(&in) % (ndev + 2)) - 1; /* -1: all; ndev: invalid */
			uint8_t k = fuzz_u8(&in);
			uint64_t bytes = k & 1 ? fuzz_size(&in) : 0;
			double fraction = k & 2 ? fuzz_proportion(&in) : 0;
			rc = policy_set_limit(&p, dev, bytes, fraction);
			FUZZ_ASSERT(rc == 0 || rc == -EINVAL, "set_limit %d", rc);
			if (rc == 0)
				FUZZ_ASSERT(dev < ndev && !(bytes && fraction != 0),
				            "bad limit accepted");
			break;
		}
		case 8:
		case 9: { /* admit, then charge */
			uint64_t bytes = fuzz_size(&in);
			if (!live[s])
				break;
			struct policy_verdict v;
			rc = policy_admit(&p, pi, bytes, &v);
			FUZZ_ASSERT(rc == 0 || rc == -EDQUOT || rc == -ENOMEM, "admit %d", rc);
			FUZZ_ASSERT(rc != -EDQUOT || p.cfg.mode == POLICY_ACTIVE,
			            "quota in passive mode");
			uint64_t room = policy_headroom(&p, pi);
			FUZZ_ASSERT(room <= policy_device_available(&p, pi->device), "headroom");
			if (rc != 0)
				break;
			FUZZ_ASSERT(bytes <= room, "admitted %llu with headroom %llu",
			            (unsigned long long)bytes, (unsigned long long)room);
			policy_charge(&p, pi, bytes);
			/* (Zero bytes fit anywhere, even where a lowered limit or
			 * cap already left it over.) */
			const struct policy_device *d = &p.dev[pi->device];
			FUZZ_ASSERT(!bytes || d->used <= d->capacity,
			            "device over its capacity after admission");
			FUZZ_ASSERT(!bytes || p.cfg.mode != POLICY_ACTIVE || pi->used <= pi->cap,
			            "instance over its cap after admission");
			break;
		}
		case 10: { /* uncharge part of what it holds */
			uint64_t part = fuzz_size(&in);
			if (live[s] && pi->used)
				policy_uncharge(
				    &p, pi, pi->used == UINT64_MAX ? part : part % (pi->used + 1));
			break;
		}
		case 11: { /* queue, groups, chunking */
			struct policy_instance *c;
			while ((c = policy_take_changed(&p))) {
				FUZZ_ASSERT(c >= inst && c < inst + SLOTS && live[c - inst],
				            "a change for an instance not registered");
			}
			int g = s % NGROUPS;
			struct policy_group_info gi;
			unsigned members = 0;
			for (int i = 0; i < SLOTS; i++)
				members += live[i] && group_of[i] == g;
			rc = policy_group_info(&p, 0, groups[g], &gi);
			FUZZ_ASSERT(rc == 0 ? gi.members == members : members == 0,
			            "group %s: %u/%u", groups[g], rc == 0 ? gi.members : 0,
			            members);
			fuzz_chunking(&in);
			break;
		}
		}
		(void)warn;
		check(&p);
	}
	for (int i = 0; i < SLOTS; i++) {
		if (live[i])
			policy_remove(&p, &inst[i]);
	}
	check(&p);
	FUZZ_ASSERT(p.count == 0, "instances left");
	for (int d = 0; d < ndev; d++)
		FUZZ_ASSERT(p.dev[d].used == 0 && p.dev[d].n_manual == 0 && p.dev[d].n_auto == 0,
		            "device %d not empty", d);
	policy_finish(&p);
	return 0;
}
