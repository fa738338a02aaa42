/*
 * policy.c - proportions, caps, admission, stream groups and chunking.
 *
 * Sums of proportions are always recomputed by walking the instances, never
 * kept as running totals: adding and subtracting doubles drifts, and a
 * drifted sum would refuse (or accept) a proportion that the instances
 * themselves do not justify. Devices hold at most a few thousand instances,
 * so the walks cost nothing next to a round trip on the socket.
 */
#include "policy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool is_manual(const struct policy_instance *pi)
{
	return pi->proportion > 0;
}

static bool proportion_valid(double proportion)
{
	/* Written so that NaN fails. */
	return proportion > 0 && proportion <= 1;
}

static int group_valid(const char *group)
{
	size_t n = group ? strlen(group) : 0;
	return n >= 1 && n <= POLICY_MAX_NAME ? 0 : -EINVAL;
}

/*
 * floor(fraction * n) without leaving [0, n]. long double carries the 64
 * bits of n exactly, where a double would round near 2^64. A product a
 * hair under an integer is taken as that integer: 0.3 is stored as
 * 0.29999999999999998, and 0.3 of 1000 bytes should be 300, not 299. The
 * slack (2^-50 relative) is far below any meaningful proportion and the
 * rebalance trims whatever it could add beyond the capacity.
 */
static uint64_t scale_u64(long double fraction, uint64_t n)
{
	long double x = fraction * (long double)n;
	if (!(x > 0))
		return 0;
	if (x >= (long double)n)
		return n;
	uint64_t f = (uint64_t)x;
	if (1.0L - (x - (long double)f) <= x * 0x1p-50L && f < n)
		f++;
	return f;
}

static uint64_t device_capacity(const struct policy_device *dev)
{
	uint64_t c = dev->total > dev->reserve ? dev->total - dev->reserve : 0;
	if (dev->limit && dev->limit < c)
		c = dev->limit;
	if (dev->limit_fraction > 0) {
		uint64_t f = scale_u64(dev->limit_fraction, dev->total);
		if (f < c)
			c = f;
	}
	return c;
}

int policy_init(struct policy *p, const struct policy_config *cfg, int device_count,
                const uint64_t *totals)
{
	struct policy_config c = {.mode = POLICY_PASSIVE, .min_auto_share = POLICY_MIN_AUTO_SHARE};
	if (cfg)
		c = *cfg;
	if (c.min_auto_share == 0)
		c.min_auto_share = POLICY_MIN_AUTO_SHARE;
	if (device_count < 1 || device_count > POLICY_MAX_DEVICES || !totals ||
	    (c.mode != POLICY_PASSIVE && c.mode != POLICY_ACTIVE) ||
	    !proportion_valid(c.min_auto_share))
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	p->cfg = c;
	p->device_count = device_count;
	for (int i = 0; i < device_count; i++) {
		p->dev[i].total = totals[i];
		p->dev[i].capacity = totals[i];
	}
	list_init(&p->instances);
	list_init(&p->changed);
	return 0;
}

void policy_finish(struct policy *p)
{
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &p->instances) {
		struct policy_instance *pi = list_entry(pos, struct policy_instance, link);
		list_remove(&pi->link);
		if (pi->queued)
			list_remove(&pi->changed_link);
		pi->queued = false;
	}
	p->count = 0;
}

#define for_each_instance(p, pi)                                                                   \
	for (struct list *pos_ = (p)->instances.next;                                              \
	     pos_ != &(p)->instances && ((pi) = list_entry(pos_, struct policy_instance, link));   \
	     pos_ = pos_->next)

/* The manual sum and auto count of a device, leaving out skip. */
static void device_sums(const struct policy *p, int device, const struct policy_instance *skip,
                        double *manual, unsigned *n_auto)
{
	const struct policy_instance *pi;
	*manual = 0;
	*n_auto = 0;
	for_each_instance(p, pi)
	{
		if (pi->device != device || pi == skip)
			continue;
		if (is_manual(pi))
			*manual += pi->proportion;
		else
			(*n_auto)++;
	}
}

/* The rules of policy.h for a device that would have this manual sum and
 * this many auto instances. */
static int policy_validate(const struct policy *p, double manual, unsigned n_auto)
{
	if (manual > 1.0 + POLICY_SUM_TOLERANCE)
		return -ENOSPC;
	if (n_auto > 0 &&
	    1.0 - manual + POLICY_SUM_TOLERANCE < (double)n_auto * p->cfg.min_auto_share)
		return -EUSERS;
	return 0;
}

static unsigned auto_warning(const struct policy *p, int device)
{
	const struct policy_device *dev = &p->dev[device];
	return 1.0 - dev->manual < POLICY_AUTO_WARN ? POLICY_WARN_AUTO_LOW : 0;
}

static void queue_changed(struct policy *p, struct policy_instance *pi)
{
	if (pi->queued)
		return;
	pi->queued = true;
	list_insert_tail(&p->changed, &pi->changed_link);
}

/* A manual instance's cap before any trimming. scale is 1, or 1/sum when
 * the manual sum is over 1 within the tolerance. */
static uint64_t manual_cap(double proportion, long double scale, uint64_t capacity)
{
	return scale_u64((long double)proportion * scale, capacity);
}

/*
 * Recomputes a device's aggregates and every cap on it, and queues the
 * instances whose cap changed (except skip, whose caller reports it).
 */
static void policy_rebalance(struct policy *p, int device, const struct policy_instance *skip)
{
	struct policy_device *dev = &p->dev[device];
	struct policy_instance *pi;
	double manual = 0;
	unsigned n_manual = 0, n_auto = 0;
	for_each_instance(p, pi)
	{
		if (pi->device != device)
			continue;
		if (is_manual(pi)) {
			manual += pi->proportion;
			n_manual++;
		} else {
			n_auto++;
		}
	}
	dev->capacity = device_capacity(dev);
	dev->manual = manual;
	dev->n_manual = n_manual;
	dev->n_auto = n_auto;
	uint64_t capacity = dev->capacity;
	long double scale = manual > 1 ? 1.0L / manual : 1.0L;
	uint64_t manual_bytes = 0;
	/* First pass: manual caps, summed with saturation. */
	for_each_instance(p, pi)
	{
		if (pi->device != device || !is_manual(pi))
			continue;
		uint64_t c = manual_cap(pi->proportion, scale, capacity);
		pi->share = pi->proportion;
		manual_bytes = manual_bytes + c < manual_bytes ? UINT64_MAX : manual_bytes + c;
		pi->next_cap = c;
	}
	/* Rounding can only overshoot by a few bytes; take them back from the
	 * manual caps in registration order, so the caps never sum above the
	 * capacity. */
	uint64_t excess = manual_bytes > capacity ? manual_bytes - capacity : 0;
	for_each_instance(p, pi)
	{
		if (!excess)
			break;
		if (pi->device != device || !is_manual(pi))
			continue;
		uint64_t cut = pi->next_cap < excess ? pi->next_cap : excess;
		pi->next_cap -= cut;
		excess -= cut;
		manual_bytes -= cut;
	}
	uint64_t auto_bytes = capacity > manual_bytes ? capacity - manual_bytes : 0;
	dev->auto_cap = n_auto ? auto_bytes / n_auto : 0;
	double pool = manual < 1 ? 1.0 - manual : 0.0;
	dev->auto_share = n_auto ? pool / n_auto : 0;
	for_each_instance(p, pi)
	{
		if (pi->device != device)
			continue;
		if (!is_manual(pi)) {
			pi->share = dev->auto_share;
			pi->next_cap = dev->auto_cap;
		}
		uint64_t cap = p->cfg.mode == POLICY_ACTIVE ? pi->next_cap : capacity;
		if (cap != pi->cap && pi != skip)
			queue_changed(p, pi);
		pi->cap = cap;
	}
}

static void set_group_name(struct policy_instance *pi, const char *group)
{
	snprintf(pi->group, sizeof(pi->group), "%s", group);
}

int policy_add(struct policy *p, struct policy_instance *pi, uint64_t id, int device,
               double proportion, const char *group, unsigned *warn)
{
	double manual;
	unsigned n_auto;
	if (warn)
		*warn = 0;
	if (!group)
		group = POLICY_DEFAULT_GROUP;
	if (device < 0 || device >= p->device_count || group_valid(group) < 0 ||
	    (proportion != 0 && !proportion_valid(proportion)))
		return -EINVAL;
	device_sums(p, device, NULL, &manual, &n_auto);
	if (proportion > 0)
		manual += proportion;
	else
		n_auto++;
	int rc = policy_validate(p, manual, n_auto);
	if (rc < 0)
		return rc;
	memset(pi, 0, sizeof(*pi));
	pi->id = id;
	pi->device = device;
	pi->proportion = proportion;
	set_group_name(pi, group);
	list_init(&pi->changed_link);
	list_insert_tail(&p->instances, &pi->link);
	p->count++;
	policy_rebalance(p, device, pi);
	if (warn)
		*warn = auto_warning(p, device);
	return 0;
}

void policy_remove(struct policy *p, struct policy_instance *pi)
{
	struct policy_device *dev = &p->dev[pi->device];
	dev->used = dev->used > pi->used ? dev->used - pi->used : 0;
	pi->used = 0;
	list_remove(&pi->link);
	if (pi->queued)
		list_remove(&pi->changed_link);
	pi->queued = false;
	p->count--;
	policy_rebalance(p, pi->device, NULL);
}

int policy_set_proportion(struct policy *p, struct policy_instance *pi, double proportion,
                          unsigned *warn)
{
	double manual;
	unsigned n_auto;
	if (warn)
		*warn = 0;
	if (!proportion_valid(proportion))
		return -EINVAL;
	/* The device as it would be: everyone else, plus pi in the manual pool. */
	device_sums(p, pi->device, pi, &manual, &n_auto);
	int rc = policy_validate(p, manual + proportion, n_auto);
	if (rc < 0)
		return rc;
	pi->proportion = proportion;
	policy_rebalance(p, pi->device, pi);
	if (warn)
		*warn = auto_warning(p, pi->device);
	return 0;
}

int policy_set_auto(struct policy *p, struct policy_instance *pi, unsigned *warn)
{
	double manual;
	unsigned n_auto;
	if (warn)
		*warn = 0;
	if (!is_manual(pi)) {
		if (warn)
			*warn = auto_warning(p, pi->device);
		return 0;
	}
	device_sums(p, pi->device, pi, &manual, &n_auto);
	int rc = policy_validate(p, manual, n_auto + 1);
	if (rc < 0)
		return rc;
	pi->proportion = 0;
	policy_rebalance(p, pi->device, pi);
	if (warn)
		*warn = auto_warning(p, pi->device);
	return 0;
}

int policy_set_group(struct policy *p, struct policy_instance *pi, const char *group)
{
	(void)p;
	if (group_valid(group) < 0)
		return -EINVAL;
	set_group_name(pi, group);
	return 0;
}

void policy_set_space(struct policy_instance *pi, uint64_t space)
{
	pi->space = space;
}

int policy_set_mode(struct policy *p, enum policy_mode mode)
{
	if (mode != POLICY_PASSIVE && mode != POLICY_ACTIVE)
		return -EINVAL;
	p->cfg.mode = mode;
	for (int i = 0; i < p->device_count; i++)
		policy_rebalance(p, i, NULL);
	return 0;
}

int policy_set_limit(struct policy *p, int device, uint64_t bytes, double fraction)
{
	if (device >= p->device_count || (bytes && fraction != 0) ||
	    (fraction != 0 && !proportion_valid(fraction)))
		return -EINVAL;
	for (int i = 0; i < p->device_count; i++) {
		if (device >= 0 && i != device)
			continue;
		p->dev[i].limit = bytes;
		p->dev[i].limit_fraction = fraction;
		policy_rebalance(p, i, NULL);
	}
	return 0;
}

int policy_set_reserve(struct policy *p, int device, uint64_t bytes)
{
	if (device < 0 || device >= p->device_count)
		return -EINVAL;
	p->dev[device].reserve = bytes;
	policy_rebalance(p, device, NULL);
	return 0;
}

int policy_set_total(struct policy *p, int device, uint64_t total)
{
	if (device < 0 || device >= p->device_count)
		return -EINVAL;
	p->dev[device].total = total;
	policy_rebalance(p, device, NULL);
	return 0;
}

const char *policy_mode_name(enum policy_mode mode)
{
	return mode == POLICY_ACTIVE ? "active" : "passive";
}

int policy_mode_parse(const char *name, enum policy_mode *mode)
{
	if (name && strcmp(name, "active") == 0)
		*mode = POLICY_ACTIVE;
	else if (name && strcmp(name, "passive") == 0)
		*mode = POLICY_PASSIVE;
	else
		return -EINVAL;
	return 0;
}

uint64_t policy_device_available(const struct policy *p, int device)
{
	const struct policy_device *dev = &p->dev[device];
	return dev->capacity > dev->used ? dev->capacity - dev->used : 0;
}

uint64_t policy_headroom(const struct policy *p, const struct policy_instance *pi)
{
	uint64_t room = pi->cap > pi->used ? pi->cap - pi->used : 0;
	uint64_t avail = policy_device_available(p, pi->device);
	return room < avail ? room : avail;
}

int policy_admit(const struct policy *p, const struct policy_instance *pi, uint64_t bytes,
                 struct policy_verdict *v)
{
	uint64_t avail = policy_device_available(p, pi->device);
	if (v) {
		v->cap = pi->cap;
		v->used = pi->used;
		v->requested = bytes;
		v->available = avail;
	}
	/* The quota speaks first: it is the instance's own limit, and the
	 * answer an instance can act on. */
	if (p->cfg.mode == POLICY_ACTIVE && (pi->used > pi->cap || bytes > pi->cap - pi->used))
		return -EDQUOT;
	if (bytes > avail)
		return -ENOMEM;
	return 0;
}

void policy_charge(struct policy *p, struct policy_instance *pi, uint64_t bytes)
{
	pi->used += bytes;
	p->dev[pi->device].used += bytes;
}

void policy_uncharge(struct policy *p, struct policy_instance *pi, uint64_t bytes)
{
	struct policy_device *dev = &p->dev[pi->device];
	/* Never more than it holds: the device's sum must stay the sum. */
	if (bytes > pi->used)
		bytes = pi->used;
	pi->used -= bytes;
	dev->used -= bytes;
}

void policy_orphan(struct policy *p, struct policy_instance *pi, uint64_t bytes)
{
	if (bytes > pi->used)
		bytes = pi->used;
	pi->used -= bytes;
	p->dev[pi->device].orphaned += bytes;
}

void policy_orphan_release(struct policy *p, int device, uint64_t bytes)
{
	struct policy_device *dev = &p->dev[device];
	if (bytes > dev->orphaned)
		bytes = dev->orphaned;
	dev->orphaned -= bytes;
	dev->used -= bytes;
}

struct policy_instance *policy_take_changed(struct policy *p)
{
	if (list_empty(&p->changed))
		return NULL;
	struct policy_instance *pi =
	    list_entry(p->changed.next, struct policy_instance, changed_link);
	list_remove(&pi->changed_link);
	pi->queued = false;
	return pi;
}

/* ---- stream groups ---------------------------------------------------- */

bool policy_in_group(const struct policy_instance *pi, uint64_t space, const char *group)
{
	return pi->space == space && strcmp(pi->group, group) == 0;
}

int policy_group_info(const struct policy *p, uint64_t space, const char *group,
                      struct policy_group_info *out)
{
	const struct policy_instance *pi;
	memset(out, 0, sizeof(*out));
	if (!group)
		return -ENOENT;
	for (int d = 0; d < p->device_count; d++) {
		uint64_t room = 0;
		bool present = false;
		for_each_instance(p, pi)
		{
			if (pi->device != d || !policy_in_group(pi, space, group))
				continue;
			present = true;
			out->members++;
			out->used += pi->used;
			if (pi->cap > pi->used)
				room += pi->cap - pi->used;
		}
		if (!present)
			continue;
		/* Headroom is only real as far as the device has room: an
		 * instance over its cap elsewhere shrinks it for everyone. */
		uint64_t avail = policy_device_available(p, d);
		if (p->cfg.mode == POLICY_PASSIVE || room > avail)
			room = avail;
		out->available += room;
	}
	if (!out->members)
		return -ENOENT;
	long double all = (long double)out->used + (long double)out->available;
	if (out->used > 0 && (long double)out->used > POLICY_GROUP_WARN * all)
		out->warn |= POLICY_WARN_GROUP_FULL;
	return 0;
}

bool policy_is_grouped(const struct policy *p, const struct policy_instance *pi)
{
	const struct policy_instance *o;
	if (strcmp(pi->group, POLICY_DEFAULT_GROUP) == 0)
		return false;
	for_each_instance(p, o)
	{
		if (o != pi && policy_in_group(o, pi->space, pi->group))
			return true;
	}
	return false;
}

/* ---- chunking ------------------------------------------------------------ */

static int array_valid(const struct policy_array *a)
{
	if (a->ndim < 1 || a->ndim > POLICY_MAX_DIMS || a->axis >= a->ndim || a->elem_size == 0)
		return -EINVAL;
	for (unsigned i = 0; i < a->ndim; i++) {
		if (a->shape[i] == 0)
			return -EINVAL;
	}
	return 0;
}

static int round_up(uint64_t v, uint64_t granule, uint64_t *out)
{
	if (granule <= 1) {
		*out = v;
		return 0;
	}
	uint64_t r = v % granule;
	if (r && __builtin_add_overflow(v, granule - r, out))
		return -EOVERFLOW;
	if (!r)
		*out = v;
	return 0;
}

/* Bytes of a at `length` along its run axis (its whole shape when
 * unchunkable or length is 0), rounded to the granule. */
static int array_bytes_at(const struct policy_array *a, uint64_t length, uint64_t granule,
                          uint64_t *out)
{
	uint64_t bytes = a->elem_size;
	for (unsigned i = 0; i < a->ndim; i++) {
		uint64_t dim = a->shape[i];
		if (i == a->axis && !a->unchunkable && length && length < dim)
			dim = length;
		if (__builtin_mul_overflow(bytes, dim, &bytes))
			return -EOVERFLOW;
	}
	return round_up(bytes, granule, out);
}

int policy_array_bytes(const struct policy_array *a, uint64_t granule, uint64_t *out)
{
	if (array_valid(a) < 0)
		return -EINVAL;
	return array_bytes_at(a, 0, granule, out);
}

/* Bytes of one chunk of every array at this chunk length. */
static int chunk_total(const struct policy_array *arrays, size_t n, uint64_t length,
                       uint64_t granule, uint64_t *out)
{
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t b;
		int rc = array_bytes_at(&arrays[i], length, granule, &b);
		if (rc < 0)
			return rc;
		if (__builtin_add_overflow(total, b, &total))
			return -EOVERFLOW;
	}
	*out = total;
	return 0;
}

static uint64_t div_ceil(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

/* What both chunkings start with: the arrays checked, the axis length
 * (0: the longest run axis of the chunkable arrays), the whole request. */
static int chunk_start(const struct policy_array *arrays, size_t n, uint64_t axis_length,
                       uint64_t granule, struct policy_chunking *out)
{
	memset(out, 0, sizeof(*out));
	if (n == 0 || !arrays)
		return -EINVAL;
	uint64_t longest = 0;
	for (size_t i = 0; i < n; i++) {
		if (array_valid(&arrays[i]) < 0)
			return -EINVAL;
		if (!arrays[i].unchunkable && arrays[i].shape[arrays[i].axis] > longest)
			longest = arrays[i].shape[arrays[i].axis];
	}
	if (!axis_length)
		axis_length = longest ? longest : 1;
	out->axis_length = axis_length;
	return chunk_total(arrays, n, axis_length, granule, &out->request_bytes);
}

int policy_chunk_fixed(const struct policy_array *arrays, size_t n, uint64_t axis_length,
                       uint64_t chunk_length, uint64_t granule, struct policy_chunking *out)
{
	int rc = chunk_start(arrays, n, axis_length, granule, out);
	if (rc < 0)
		return rc;
	if (!chunk_length)
		return -EINVAL;
	out->chunk_length = chunk_length < out->axis_length ? chunk_length : out->axis_length;
	out->chunks = div_ceil(out->axis_length, out->chunk_length);
	return chunk_total(arrays, n, out->chunk_length, granule, &out->chunk_bytes);
}

int policy_chunk_parameters(const struct policy_array *arrays, size_t n, uint64_t axis_length,
                            uint64_t available, uint64_t granule, struct policy_chunking *out)
{
	int rc = chunk_start(arrays, n, axis_length, granule, out);
	if (rc < 0)
		return rc;
	axis_length = out->axis_length;
	out->available = available;
	/* The warning cubie gives for hopeless requests. */
	if (out->request_bytes / POLICY_CHUNK_WARN > available ||
	    (available == 0 && out->request_bytes > 0))
		out->warn |= POLICY_WARN_OVERSIZED;
	if (out->request_bytes <= available) {
		out->chunk_length = axis_length;
		out->chunks = 1;
		out->chunk_bytes = out->request_bytes;
		return 0;
	}
	/* One run per chunk is the least a chunk can be. */
	uint64_t least;
	rc = chunk_total(arrays, n, 1, granule, &least);
	if (rc < 0)
		return rc;
	if (least > available) {
		out->chunk_bytes = least;
		return -ENOMEM;
	}
	/* The chunk length shrinks as the count grows and the chunk's bytes
	 * shrink with it, so the smallest count that fits is a binary
	 * search: count lo does not fit, count hi does. */
	uint64_t lo = 1, hi = axis_length;
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2, bytes;
		rc = chunk_total(arrays, n, div_ceil(axis_length, mid), granule, &bytes);
		if (rc < 0)
			return rc;
		if (bytes <= available)
			hi = mid;
		else
			lo = mid;
	}
	out->chunk_length = div_ceil(axis_length, hi);
	/* ceil(N / ceil(N / k)) <= k: the last chunk is never empty. */
	out->chunks = div_ceil(axis_length, out->chunk_length);
	return chunk_total(arrays, n, out->chunk_length, granule, &out->chunk_bytes);
}

void policy_chunked_shape(const struct policy_array *a, uint64_t chunk_length,
                          uint64_t shape[POLICY_MAX_DIMS])
{
	for (unsigned i = 0; i < POLICY_MAX_DIMS; i++)
		shape[i] = i < a->ndim ? a->shape[i] : 0;
	if (!a->unchunkable && a->axis < a->ndim && chunk_length && chunk_length < shape[a->axis])
		shape[a->axis] = chunk_length;
}

/* ---- invariants -------------------------------------------------------------- */

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			if (msg && msg_len)                                                        \
				snprintf(msg, msg_len, __VA_ARGS__);                               \
			return -EFAULT;                                                            \
		}                                                                                  \
	} while (0)

static int check_device(const struct policy *p, int d, char *msg, unsigned msg_len)
{
	const struct policy_device *dev = &p->dev[d];
	const struct policy_instance *pi;
	double manual = 0;
	unsigned n_manual = 0, n_auto = 0;
	uint64_t used = 0, caps = 0, manual_caps = 0;
	long double scale;
	CHECK(dev->capacity == device_capacity(dev),
	      "device %d: capacity %" PRIu64 ", limits say %" PRIu64, d, dev->capacity,
	      device_capacity(dev));
	CHECK(dev->capacity <= dev->total, "device %d: capacity above the device's memory", d);
	for_each_instance(p, pi)
	{
		if (pi->device != d)
			continue;
		used += pi->used;
		if (is_manual(pi)) {
			CHECK(proportion_valid(pi->proportion),
			      "instance %" PRIu64 ": proportion %.17g outside (0, 1]", pi->id,
			      pi->proportion);
			CHECK(pi->share == pi->proportion,
			      "instance %" PRIu64 ": share %.17g is not its proportion", pi->id,
			      pi->share);
			manual += pi->proportion;
			n_manual++;
			manual_caps += pi->next_cap;
		} else {
			CHECK(pi->share == dev->auto_share,
			      "instance %" PRIu64 ": share %.17g, auto share %.17g", pi->id,
			      pi->share, dev->auto_share);
			CHECK(pi->next_cap == dev->auto_cap,
			      "instance %" PRIu64 ": auto cap %" PRIu64 ", device's %" PRIu64,
			      pi->id, pi->next_cap, dev->auto_cap);
			n_auto++;
		}
		if (p->cfg.mode == POLICY_ACTIVE)
			CHECK(pi->cap == pi->next_cap,
			      "instance %" PRIu64 ": cap %" PRIu64
			      " in active mode, computed %" PRIu64,
			      pi->id, pi->cap, pi->next_cap);
		else
			CHECK(pi->cap == dev->capacity,
			      "instance %" PRIu64 ": cap %" PRIu64
			      " in passive mode, capacity %" PRIu64,
			      pi->id, pi->cap, dev->capacity);
		caps += pi->next_cap;
		CHECK(group_valid(pi->group) == 0, "instance %" PRIu64 ": bad group name", pi->id);
	}
	CHECK(used + dev->orphaned == dev->used,
	      "device %d: used %" PRIu64 ", instances hold %" PRIu64 ", orphaned %" PRIu64, d,
	      dev->used, used, dev->orphaned);
	CHECK(manual == dev->manual && n_manual == dev->n_manual && n_auto == dev->n_auto,
	      "device %d: aggregates %.17g/%u/%u, instances say %.17g/%u/%u", d, dev->manual,
	      dev->n_manual, dev->n_auto, manual, n_manual, n_auto);
	CHECK(policy_validate(p, manual, n_auto) == 0,
	      "device %d: manual sum %.17g with %u auto instances breaks the rules", d, manual,
	      n_auto);
	CHECK(caps <= dev->capacity, "device %d: caps sum to %" PRIu64 " over capacity %" PRIu64, d,
	      caps, dev->capacity);
	CHECK(dev->auto_cap == (n_auto ? (dev->capacity - manual_caps) / n_auto : 0),
	      "device %d: auto cap %" PRIu64 " is not an equal part of the auto pool", d,
	      dev->auto_cap);
	/* Manual caps never exceed their proportion of the capacity. */
	scale = manual > 1 ? 1.0L / manual : 1.0L;
	for_each_instance(p, pi)
	{
		if (pi->device == d && is_manual(pi))
			CHECK(pi->next_cap <= manual_cap(pi->proportion, scale, dev->capacity),
			      "instance %" PRIu64 ": cap above its proportion", pi->id);
	}
	return 0;
}

int policy_check(const struct policy *p, char *msg, unsigned msg_len)
{
	const struct policy_instance *pi;
	uint64_t count = 0, queued = 0;
	CHECK(p->cfg.mode == POLICY_PASSIVE || p->cfg.mode == POLICY_ACTIVE, "bad mode %d",
	      (int)p->cfg.mode);
	for_each_instance(p, pi)
	{
		CHECK(pi->device >= 0 && pi->device < p->device_count,
		      "instance %" PRIu64 ": device %d", pi->id, pi->device);
		count++;
		if (pi->queued)
			queued++;
	}
	CHECK(count == p->count, "%" PRIu64 " instances listed, %" PRIu64 " counted", count,
	      p->count);
	const struct list *pos;
	uint64_t in_queue = 0;
	list_for_each(pos, &p->changed) {
		pi = list_entry(pos, const struct policy_instance, changed_link);
		CHECK(pi->queued, "instance %" PRIu64 " in the change queue but not marked",
		      pi->id);
		CHECK(in_queue++ < count, "the change queue is longer than the instance list");
	}
	CHECK(in_queue == queued, "%" PRIu64 " instances marked queued, %" PRIu64 " in the queue",
	      queued, in_queue);
	for (int d = 0; d < p->device_count; d++) {
		int rc = check_device(p, d, msg, msg_len);
		if (rc < 0)
			return rc;
	}
	return 0;
}
