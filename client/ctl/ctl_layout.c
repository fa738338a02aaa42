/*
 * ctl_layout.c - `gpubrokerctl layout FILE`: reads a kernel's buffer
 * description (JSON, docs/layout.md), computes its layout with libgpubroker's
 * planner and prints where every buffer goes, each component's sizes and
 * each kernel's block size. No daemon is involved.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "gpubroker.h"
#include "proto.h"

#define LAYOUT_MAX_FILE        (16u << 20) /* far beyond GPB_LAYOUT_MAX_BUFFERS of text */
#define LAYOUT_DEFAULT_THREADS 256u

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* What the file sets for every kernel. */
struct layout_launch {
	uint32_t budget, max_budget, threads;
	unsigned precision; /* the buffers' default */
};

static __attribute__((format(printf, 3, 4))) int layout_fail(const char *file, const char *where,
                                                             const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "gpubrokerctl: %s: ", file);
	if (where)
		fprintf(stderr, "%s: ", where);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_ERROR;
}

/* The whole of @path ("-": standard input), NUL-terminated. */
static int layout_read(const char *path, char **text, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	size_t cap = 4096, n = 0;
	char *buf = NULL, *p;

	if (!f)
		return layout_fail(path, NULL, "%s", strerror(errno));
	for (;;) {
		if (!(p = realloc(buf, cap + 1))) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = p;
		n += fread(buf + n, 1, cap - n, f);
		if (n < cap || cap >= LAYOUT_MAX_FILE)
			break;
		cap *= 2;
	}
	if (!buf || ferror(f) || n >= LAYOUT_MAX_FILE) {
		int err = ferror(f) ? errno : 0;

		if (f != stdin)
			fclose(f);
		free(buf);
		if (err)
			return layout_fail(path, NULL, "%s", strerror(err));
		return buf ? layout_fail(path, NULL, "larger than %u bytes", LAYOUT_MAX_FILE)
		           : ctl_oom();
	}
	if (f != stdin)
		fclose(f);
	buf[n] = '\0';
	*text = buf;
	*len = n;
	return EXIT_OK;
}

/* Refuses members other than @keys: a misspelt "persistant" must not be
 * silently ignored. */
static int layout_keys(const char *file, const char *where, const cJSON *obj,
                       const char *const *keys, size_t n)
{
	const cJSON *m;

	if (!cJSON_IsObject(obj))
		return layout_fail(file, where, "not an object");
	cJSON_ArrayForEach(m, obj)
	{
		size_t i = 0;

		while (i < n && strcmp(m->string, keys[i]) != 0)
			i++;
		if (i == n)
			return layout_fail(file, where, "unknown member '%s'", m->string);
	}
	return EXIT_OK;
}

/* An unsigned integer: a JSON number up to 2^53, or a decimal string (the
 * protocol's form for 64-bit quantities). */
static int layout_u64(const cJSON *v, uint64_t max, uint64_t *out)
{
	if (cJSON_IsNumber(v)) {
		double d = v->valuedouble;

		if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d)
			return -EINVAL;
		*out = (uint64_t)d;
	} else if (!cJSON_IsString(v) || proto_parse_u64(v->valuestring, out) < 0) {
		return -EINVAL;
	}
	return *out <= max ? 0 : -ERANGE;
}

static int layout_u32_member(const char *file, const cJSON *root, const char *key, uint32_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
	uint64_t n;

	if (!v)
		return EXIT_OK;
	if (layout_u64(v, UINT32_MAX, &n) < 0)
		return layout_fail(file, key, "not a whole number up to %u", UINT32_MAX);
	*out = (uint32_t)n;
	return EXIT_OK;
}

/* "float32", "float64", 4 or 8. */
static int layout_precision(const cJSON *v, unsigned *out)
{
	uint64_t n;

	if (cJSON_IsString(v) && strcmp(v->valuestring, "float32") == 0)
		*out = 4;
	else if (cJSON_IsString(v) && strcmp(v->valuestring, "float64") == 0)
		*out = 8;
	else if (cJSON_IsNumber(v) && layout_u64(v, 8, &n) == 0 && (n == 4 || n == 8))
		*out = (unsigned)n;
	else
		return -EINVAL;
	return 0;
}

static const char *layout_string(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* One member of "buffers" (@where names it in messages). */
static int layout_load_buffer(gpb_layout *l, const char *file, const char *where, const char *comp,
                              const cJSON *b, unsigned precision)
{
	static const char *const keys[] = {"name",       "size",      "location",
	                                   "persistent", "precision", "alias"};
	struct gpb_layout_buffer d = {.component = comp, .precision = precision};
	const cJSON *v;
	int rc = layout_keys(file, where, b, keys, ARRAY_SIZE(keys));

	if (rc != EXIT_OK)
		return rc;
	if (!(d.name = layout_string(b, "name")))
		return layout_fail(file, where, "'name' must be a string");
	v = cJSON_GetObjectItemCaseSensitive(b, "size");
	if (layout_u64(v, UINT64_MAX, &d.size) < 0)
		return layout_fail(file, where,
		                   "'size' must be a number of elements (or a decimal string)");
	v = cJSON_GetObjectItemCaseSensitive(b, "location");
	if (cJSON_IsString(v) && strcmp(v->valuestring, "shared") == 0)
		d.location = GPB_LAYOUT_SHARED;
	else if (cJSON_IsString(v) && strcmp(v->valuestring, "local") == 0)
		d.location = GPB_LAYOUT_LOCAL;
	else
		return layout_fail(file, where, "'location' must be \"shared\" or \"local\"");
	v = cJSON_GetObjectItemCaseSensitive(b, "persistent");
	if (v && !cJSON_IsBool(v))
		return layout_fail(file, where, "'persistent' must be true or false");
	d.persistent = cJSON_IsTrue(v);
	v = cJSON_GetObjectItemCaseSensitive(b, "precision");
	if (v && layout_precision(v, &d.precision) < 0)
		return layout_fail(file, where, "'precision' must be \"float32\" or \"float64\"");
	v = cJSON_GetObjectItemCaseSensitive(b, "alias");
	if (v && !cJSON_IsNull(v) && !(d.alias = layout_string(b, "alias")))
		return layout_fail(file, where, "'alias' must be a buffer name or null");
	rc = gpb_layout_add_buffer(l, &d);
	if (rc < 0)
		return layout_fail(file, where, "%s", gpb_last_error());
	return EXIT_OK;
}

/* One member of "components", with its buffers. */
static int layout_load_component(gpb_layout *l, const char *file, size_t ci, const cJSON *c,
                                 unsigned precision)
{
	static const char *const keys[] = {"name", "parent", "buffers"};
	const cJSON *parent = cJSON_GetObjectItemCaseSensitive(c, "parent");
	const cJSON *bufs = cJSON_GetObjectItemCaseSensitive(c, "buffers"), *b;
	const char *name;
	char where[128];
	size_t bi = 0;
	int rc;

	snprintf(where, sizeof(where), "components[%zu]", ci);
	rc = layout_keys(file, where, c, keys, ARRAY_SIZE(keys));
	if (rc != EXIT_OK)
		return rc;
	if (!(name = layout_string(c, "name")))
		return layout_fail(file, where, "'name' must be a string");
	snprintf(where, sizeof(where), "components[%zu] ('%.64s')", ci, name);
	if (parent && !cJSON_IsNull(parent) && !cJSON_IsString(parent))
		return layout_fail(file, where, "'parent' must be a component name or null");
	if (gpb_layout_add_component(l, name, cJSON_IsString(parent) ? parent->valuestring : NULL) <
	    0)
		return layout_fail(file, where, "%s", gpb_last_error());
	if (bufs && !cJSON_IsArray(bufs))
		return layout_fail(file, where, "'buffers' must be an array");
	cJSON_ArrayForEach(b, bufs)
	{
		const char *bname = layout_string(b, "name");

		snprintf(where, sizeof(where), "components[%zu].buffers[%zu] ('%.64s')", ci, bi++,
		         bname ? bname : "?");
		rc = layout_load_buffer(l, file, where, name, b, precision);
		if (rc != EXIT_OK)
			return rc;
	}
	return EXIT_OK;
}

/* The top-level object: settings, then the components in order (parents
 * first). */
static int layout_load(gpb_layout *l, const char *file, const cJSON *root,
                       struct layout_launch *launch)
{
	static const char *const keys[] = {"precision",  "budget",     "max_budget",
	                                   "block_size", "components", "description"};
	const cJSON *comps = cJSON_GetObjectItemCaseSensitive(root, "components"), *c;
	const cJSON *prec = cJSON_GetObjectItemCaseSensitive(root, "precision");
	size_t ci = 0;
	int rc = layout_keys(file, "the top level", root, keys, ARRAY_SIZE(keys));

	if (rc != EXIT_OK)
		return rc;
	if (prec && layout_precision(prec, &launch->precision) < 0)
		return layout_fail(file, "precision", "must be \"float32\" or \"float64\"");
	if (layout_u32_member(file, root, "budget", &launch->budget) != EXIT_OK ||
	    layout_u32_member(file, root, "max_budget", &launch->max_budget) != EXIT_OK ||
	    layout_u32_member(file, root, "block_size", &launch->threads) != EXIT_OK)
		return EXIT_ERROR;
	if (!cJSON_IsArray(comps) || !cJSON_GetArraySize(comps))
		return layout_fail(file, "components", "must be a non-empty array");
	cJSON_ArrayForEach(c, comps)
	{
		rc = layout_load_component(l, file, ci++, c, launch->precision);
		if (rc != EXIT_OK)
			return rc;
	}
	if (gpb_layout_compute(l) < 0)
		return layout_fail(file, NULL, "%s", gpb_last_error());
	return EXIT_OK;
}

static const char *const layout_space_names[] = {
    [GPB_LAYOUT_SPACE_SHARED] = "shared",
    [GPB_LAYOUT_SPACE_LOCAL] = "local",
    [GPB_LAYOUT_SPACE_PERSISTENT_LOCAL] = "persistent_local",
};

static cJSON *layout_buffer_row(const struct gpb_layout_buffer *d,
                                const struct gpb_layout_placement *p)
{
	cJSON *row = cJSON_CreateObject();

	if (!row || !cJSON_AddStringToObject(row, "component", d->component) ||
	    !cJSON_AddStringToObject(row, "name", d->name) ||
	    !cJSON_AddStringToObject(row, "location",
	                             d->location == GPB_LAYOUT_SHARED ? "shared" : "local") ||
	    !cJSON_AddBoolToObject(row, "persistent", d->persistent) ||
	    !cJSON_AddStringToObject(row, "precision", d->precision == 8 ? "float64" : "float32") ||
	    proto_add_u64(row, "size", d->size) < 0 ||
	    !cJSON_AddStringToObject(row, "space", layout_space_names[p->space]) ||
	    proto_add_u64(row, "offset", p->offset) < 0 ||
	    proto_add_u64(row, "bytes", p->bytes) < 0 ||
	    !(d->alias ? cJSON_AddStringToObject(row, "alias", d->alias)
	               : cJSON_AddNullToObject(row, "alias")) ||
	    !(p->aliased_with ? cJSON_AddStringToObject(row, "aliased_with", p->aliased_with)
	                      : cJSON_AddNullToObject(row, "aliased_with"))) {
		cJSON_Delete(row);
		return NULL;
	}
	return row;
}

static cJSON *layout_component_row(const struct gpb_layout_component_info *c)
{
	cJSON *row = cJSON_CreateObject();

	if (!row || !cJSON_AddStringToObject(row, "name", c->name) ||
	    !(c->parent ? cJSON_AddStringToObject(row, "parent", c->parent)
	                : cJSON_AddNullToObject(row, "parent")) ||
	    proto_add_u64(row, "shared", c->sizes.shared) < 0 ||
	    proto_add_u64(row, "local", c->sizes.local) < 0 ||
	    proto_add_u64(row, "persistent_local", c->sizes.persistent_local) < 0 ||
	    proto_add_u64(row, "shared_offset", c->sizes.shared_offset) < 0 ||
	    proto_add_u64(row, "local_offset", c->sizes.local_offset) < 0 ||
	    proto_add_u64(row, "persistent_local_offset", c->sizes.persistent_local_offset) < 0) {
		cJSON_Delete(row);
		return NULL;
	}
	return row;
}

/* A kernel (root) row: its block size, or null threads when not even a
 * warp fits (*@no_fit then holds the library's message). */
static cJSON *layout_kernel_row(const gpb_layout *l, const struct gpb_layout_component_info *c,
                                const struct layout_launch *launch, char *no_fit, size_t len)
{
	uint32_t budget = launch->budget ? launch->budget : GPB_LAYOUT_DEFAULT_BUDGET;
	uint32_t max = launch->max_budget ? launch->max_budget : GPB_LAYOUT_DEFAULT_BUDGET;
	cJSON *row = cJSON_CreateObject();
	uint32_t threads = 0;
	int rc = gpb_layout_block_size(l, c->name, budget, max, launch->threads, &threads);
	bool ok;

	if (rc < 0 && !no_fit[0])
		snprintf(no_fit, len, "%s", gpb_last_error());
	ok = row && cJSON_AddStringToObject(row, "kernel", c->name) &&
	     cJSON_AddNumberToObject(row, "budget", budget) &&
	     cJSON_AddNumberToObject(row, "max_budget", max) &&
	     cJSON_AddNumberToObject(row, "requested", launch->threads) &&
	     (rc == 0 ? cJSON_AddNumberToObject(row, "threads", threads) != NULL
	              : cJSON_AddNullToObject(row, "threads") != NULL) &&
	     (rc == 0 ? proto_add_u64(row, "shared_per_block", c->sizes.shared * threads) == 0
	              : cJSON_AddNullToObject(row, "shared_per_block") != NULL);
	if (!ok) {
		cJSON_Delete(row);
		return NULL;
	}
	return row;
}

/* {"buffers": [...], "components": [...], "kernels": [...]}; NULL when out
 * of memory. @no_fit receives the message of a kernel that fits no warp. */
static cJSON *layout_result(const gpb_layout *l, const struct layout_launch *launch, char *no_fit,
                            size_t len)
{
	struct gpb_layout_component_info c;
	struct gpb_layout_buffer d;
	struct gpb_layout_placement p;
	cJSON *res = cJSON_CreateObject(), *bufs, *comps, *kernels;

	if (!res || !(bufs = cJSON_AddArrayToObject(res, "buffers")) ||
	    !(comps = cJSON_AddArrayToObject(res, "components")) ||
	    !(kernels = cJSON_AddArrayToObject(res, "kernels")))
		goto fail;
	for (size_t i = 0; gpb_layout_buffer_at(l, i, &d, &p) == 0; i++) {
		if (!cJSON_AddItemToArray(bufs, layout_buffer_row(&d, &p)))
			goto fail;
	}
	for (size_t i = 0; gpb_layout_component_at(l, i, &c) == 0; i++) {
		if (!cJSON_AddItemToArray(comps, layout_component_row(&c)))
			goto fail;
		if (!c.parent &&
		    !cJSON_AddItemToArray(kernels, layout_kernel_row(l, &c, launch, no_fit, len)))
			goto fail;
	}
	return res;
fail:
	cJSON_Delete(res);
	return NULL;
}

/* Tables: buffers, components, kernels. CSV: the buffer rows only (the json
 * output has the rest), as `status` does with its device rows. */
static int layout_print(const cJSON *res, const struct ctl_options *o)
{
	static const struct ctl_column buffer_cols[] = {
	    {"component", "COMPONENT", CTL_TEXT},
	    {"name", "BUFFER", CTL_TEXT},
	    {"location", "LOCATION", CTL_TEXT},
	    {"persistent", "PERSISTENT", CTL_TEXT},
	    {"precision", "TYPE", CTL_TEXT},
	    {"size", "ELEMENTS", CTL_NUM},
	    {"offset", "OFFSET", CTL_NUM},
	    {"bytes", "BYTES", CTL_NUM},
	    {"aliased_with", "ALIASED_WITH", CTL_TEXT},
	};
	static const struct ctl_column component_cols[] = {
	    {"name", "COMPONENT", CTL_TEXT},
	    {"parent", "PARENT", CTL_TEXT},
	    {"shared", "SHARED", CTL_NUM},
	    {"local", "LOCAL", CTL_NUM},
	    {"persistent_local", "PERSISTENT_LOCAL", CTL_NUM},
	};
	static const struct ctl_column kernel_cols[] = {
	    {"kernel", "KERNEL", CTL_TEXT},
	    {"budget", "BUDGET", CTL_NUM},
	    {"requested", "REQUESTED", CTL_NUM},
	    {"threads", "THREADS", CTL_NUM},
	    {"shared_per_block", "SHARED_PER_BLOCK", CTL_NUM},
	};
	int rc =
	    print_rows(res, "buffers", buffer_cols, ARRAY_SIZE(buffer_cols), o->format, o->header);

	if (rc != EXIT_OK || o->format == CTL_CSV)
		return rc;
	printf("\nper thread, bytes:\n");
	rc = print_rows(res, "components", component_cols, ARRAY_SIZE(component_cols), o->format,
	                o->header);
	if (rc != EXIT_OK)
		return rc;
	putchar('\n');
	return print_rows(res, "kernels", kernel_cols, ARRAY_SIZE(kernel_cols), o->format,
	                  o->header);
}

/* Line and column of @at in @text, for parse errors. */
static void layout_position(const char *text, const char *at, unsigned *line, unsigned *col)
{
	*line = *col = 1;
	for (const char *p = text; p < at && *p; p++) {
		if (*p == '\n') {
			(*line)++;
			*col = 1;
		} else {
			(*col)++;
		}
	}
}

int ctl_layout(const struct ctl_options *o)
{
	struct layout_launch launch = {.threads = LAYOUT_DEFAULT_THREADS, .precision = 4};
	const char *file, *end = NULL;
	char no_fit[320] = "", *text = NULL;
	gpb_layout *l = NULL;
	cJSON *root, *res;
	size_t len = 0;
	int rc;

	if (o->nargs != 1)
		return usage_error(o->nargs ? "unexpected argument '%s'"
		                            : "layout needs a FILE (see --help)%s",
		                   o->nargs ? o->args[1] : "");
	if (o->interval > 0 || o->device >= 0 || o->device_uuid || o->textfile)
		return usage_error("layout reads a file: -l, --device and --textfile do not apply");
	file = o->args[0];
	rc = layout_read(file, &text, &len);
	if (rc != EXIT_OK)
		return rc;
	/* A NUL-terminated copy, parsed to its end: cJSON over-reads otherwise
	 * (design.md). */
	root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
	if (!root) {
		unsigned line, col;

		layout_position(text, end ? end : cJSON_GetErrorPtr(), &line, &col);
		free(text);
		return layout_fail(file, NULL, "line %u, column %u: not valid JSON", line, col);
	}
	free(text);
	if (gpb_layout_create(&l) < 0) {
		cJSON_Delete(root);
		return ctl_oom();
	}
	rc = layout_load(l, file, root, &launch);
	cJSON_Delete(root);
	res = rc == EXIT_OK ? layout_result(l, &launch, no_fit, sizeof(no_fit)) : NULL;
	gpb_layout_destroy(l);
	if (rc != EXIT_OK)
		return rc;
	if (!res)
		return ctl_oom();
	if (o->format == CTL_JSON) {
		char *s = cJSON_PrintUnformatted(res);

		if (s)
			printf("%s\n", s);
		rc = s ? EXIT_OK : ctl_oom();
		cJSON_free(s);
	} else {
		rc = layout_print(res, o);
	}
	cJSON_Delete(res);
	if (rc == EXIT_OK && no_fit[0])
		rc = layout_fail(file, NULL, "%s", no_fit);
	return rc;
}
