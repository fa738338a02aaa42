/*
 * ctl_output.c - tables and CSV for gpubrokerctl.
 */
#include "ctl_output.h"
#include "ctl_error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

void ctl_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	uint64_t tenths;
	double v = (double)bytes;
	size_t u = 0;

	if (bytes < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", bytes);
		return;
	}
	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	/* Round to tenths in integers so that 1023.96 KiB becomes 1 MiB
	 * rather than "1024.0 KiB". */
	tenths = (uint64_t)(v * 10 + 0.5);
	if (tenths >= 10240 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
		tenths = (uint64_t)(v * 10 + 0.5);
	}
	snprintf(buf, len, "%" PRIu64 ".%" PRIu64 " %s", tenths / 10, tenths % 10, units[u]);
}

void ctl_format_duration(uint64_t s, char *buf, size_t len)
{
	uint64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;

	if (d)
		snprintf(buf, len, "%" PRIu64 "d %" PRIu64 "h %" PRIu64 "m %" PRIu64 "s", d, h, m,
		         s % 60);
	else if (h)
		snprintf(buf, len, "%" PRIu64 "h %" PRIu64 "m %" PRIu64 "s", h, m, s % 60);
	else if (m)
		snprintf(buf, len, "%" PRIu64 "m %" PRIu64 "s", m, s % 60);
	else
		snprintf(buf, len, "%" PRIu64 "s", s);
}

void ctl_format_limit(const cJSON *limit, const cJSON *fraction, const cJSON *capacity, char *buf,
                      size_t len)
{
	char size[32];
	uint64_t n;

	if (cJSON_IsNumber(fraction) && cJSON_IsString(capacity) &&
	    proto_parse_u64(capacity->valuestring, &n) == 0) {
		ctl_format_size(n, size, sizeof(size));
		snprintf(buf, len, "%.4g%% (%s)", fraction->valuedouble * 100, size);
	} else if (cJSON_IsString(limit) && proto_parse_u64(limit->valuestring, &n) == 0) {
		ctl_format_size(n, buf, len);
	} else {
		snprintf(buf, len, "-");
	}
}

char *ctl_format_value(const cJSON *v, enum ctl_kind kind, enum ctl_format format)
{
	char buf[64];
	uint64_t n;

	if (!v || cJSON_IsNull(v))
		return strdup(format == CTL_CSV ? "" : "-");
	if (cJSON_IsBool(v))
		return strdup(cJSON_IsTrue(v) ? "true" : "false");
	if (cJSON_IsNumber(v)) {
		double d = v->valuedouble;

		/* Integral values within 2^53 print exactly; anything else
		 * (a proportion, say) as the shortest round-trip form. */
		if (d >= 0 && d <= 9007199254740992.0 && d == (double)(uint64_t)d) {
			n = (uint64_t)d;
			if (kind == CTL_SIZE && format == CTL_TABLE)
				ctl_format_size(n, buf, sizeof(buf));
			else
				snprintf(buf, sizeof(buf), "%" PRIu64, n);
		} else {
			snprintf(buf, sizeof(buf), "%.17g", d);
		}
		return strdup(buf);
	}
	if (cJSON_IsString(v)) {
		if (kind == CTL_SIZE && format == CTL_TABLE &&
		    proto_parse_u64(v->valuestring, &n) == 0) {
			ctl_format_size(n, buf, sizeof(buf));
			return strdup(buf);
		}
		return strdup(v->valuestring);
	}
	/* Objects and arrays: their JSON text. */
	{
		char *text = cJSON_PrintUnformatted(v);
		char *copy = text ? strdup(text) : NULL;

		cJSON_free(text);
		return copy;
	}
}

void ctl_table_init(struct ctl_table *t, const struct ctl_column *cols, size_t ncols,
                    enum ctl_format format)
{
	memset(t, 0, sizeof(*t));
	t->cols = cols;
	t->ncols = ncols;
	t->format = format;
}

void ctl_table_finish(struct ctl_table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap = 0;
}

static int ctl_table_add(struct ctl_table *t, const cJSON *row)
{
	char **cells;

	if (t->nrows == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 8;

		cells = realloc(t->cells, cap * t->ncols * sizeof(*cells));
		if (!cells)
			return -ENOMEM;
		t->cells = cells;
		t->cap = cap;
	}
	cells = t->cells + t->nrows * t->ncols;
	for (size_t c = 0; c < t->ncols; c++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, t->cols[c].key);

		cells[c] = ctl_format_value(v, t->cols[c].kind, t->format);
		if (!cells[c]) {
			while (c--)
				free(cells[c]);
			return -ENOMEM;
		}
	}
	t->nrows++;
	return 0;
}

int ctl_table_add_rows(struct ctl_table *t, const cJSON *rows)
{
	const cJSON *row;

	if (!cJSON_IsArray(rows))
		return -EINVAL;
	cJSON_ArrayForEach(row, rows)
	{
		int rc;

		if (!cJSON_IsObject(row))
			return -EINVAL;
		rc = ctl_table_add(t, row);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void csv_field(FILE *out, const char *s)
{
	if (!strpbrk(s, ",\"\r\n")) {
		fputs(s, out);
		return;
	}
	fputc('"', out);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', out);
		fputc(*s, out);
	}
	fputc('"', out);
}

static void ctl_print_csv(const struct ctl_table *t, FILE *out, bool header)
{
	if (header) {
		for (size_t c = 0; c < t->ncols; c++) {
			if (c)
				fputc(',', out);
			csv_field(out, t->cols[c].key);
		}
		fputc('\n', out);
	}
	for (size_t r = 0; r < t->nrows; r++) {
		for (size_t c = 0; c < t->ncols; c++) {
			if (c)
				fputc(',', out);
			csv_field(out, t->cells[r * t->ncols + c]);
		}
		fputc('\n', out);
	}
}

static void ctl_print_cell(FILE *out, const char *s, size_t width, bool right, bool last)
{
	int pad = (int)(width - strlen(s));

	if (right)
		fprintf(out, "%*s%s", pad, "", s);
	else if (last)
		fputs(s, out); /* no trailing blanks */
	else
		fprintf(out, "%s%*s", s, pad, "");
}

void ctl_table_print(const struct ctl_table *t, FILE *out, bool header)
{
	size_t *width;

	if (t->format == CTL_CSV) {
		ctl_print_csv(t, out, header);
		return;
	}
	width = calloc(t->ncols ? t->ncols : 1, sizeof(*width));
	if (!width)
		return;
	for (size_t c = 0; c < t->ncols; c++) {
		width[c] = header ? strlen(t->cols[c].title) : 0;
		for (size_t r = 0; r < t->nrows; r++) {
			size_t n = strlen(t->cells[r * t->ncols + c]);

			if (n > width[c])
				width[c] = n;
		}
	}
	if (header) {
		for (size_t c = 0; c < t->ncols; c++) {
			if (c)
				fputs("  ", out);
			ctl_print_cell(out, t->cols[c].title, width[c], t->cols[c].kind != CTL_TEXT,
			               c + 1 == t->ncols);
		}
		fputc('\n', out);
	}
	for (size_t r = 0; r < t->nrows; r++) {
		for (size_t c = 0; c < t->ncols; c++) {
			if (c)
				fputs("  ", out);
			ctl_print_cell(out, t->cells[r * t->ncols + c], width[c],
			               t->cols[c].kind != CTL_TEXT, c + 1 == t->ncols);
		}
		fputc('\n', out);
	}
	free(width);
}

/* Prints the rows of result[@key] with @cols. */
int print_rows(const cJSON *result, const char *key, const struct ctl_column *cols, size_t ncols,
               enum ctl_format format, bool header)
{
	struct ctl_table t;
	int rc;

	ctl_table_init(&t, cols, ncols, format);
	rc = ctl_table_add_rows(&t, cJSON_GetObjectItemCaseSensitive(result, key));
	if (rc == 0)
		ctl_table_print(&t, stdout, header);
	ctl_table_finish(&t);
	if (rc == -ENOMEM)
		return ctl_oom();
	if (rc < 0)
		return ctl_bad_reply(key);
	return EXIT_OK;
}

void print_others(const cJSON *result, const char *count_key, enum ctl_format format)
{
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_OTHERS);
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, count_key);
	const cJSON *v;

	/* CSV is rows only, and an administrator's "others" is all zeros. */
	if (format != CTL_TABLE || !cJSON_IsNumber(n) || !(n->valuedouble > 0))
		return;
	printf("\nother users: %.0f %s", n->valuedouble, count_key);
	cJSON_ArrayForEach(v, o)
	{
		uint64_t bytes;
		char buf[32];

		if (v == n)
			continue;
		if (strcmp(v->string, PROTO_F_USED) == 0 &&
		    proto_get_u64(o, PROTO_F_USED, 0, UINT64_MAX, &bytes) == 0) {
			ctl_format_size(bytes, buf, sizeof(buf));
			printf(", %s used", buf);
		} else if (cJSON_IsNumber(v)) {
			printf(", %.0f %s", v->valuedouble, v->string);
		}
	}
	printf(" (totals only: other users' details are for administrators)\n");
}

int print_rows_mapped(const cJSON *arr, const char *key, cJSON *(*map)(const cJSON *, const char *),
                      const char *arg, const struct ctl_column *cols, size_t ncols,
                      enum ctl_format format, bool header)
{
	cJSON *rows = cJSON_CreateObject(), *out;
	const cJSON *it;
	int rc;

	if (!rows || !(out = cJSON_AddArrayToObject(rows, key))) {
		cJSON_Delete(rows);
		return ctl_oom();
	}
	if (!cJSON_IsArray(arr)) {
		cJSON_Delete(rows);
		return ctl_bad_reply(key);
	}
	cJSON_ArrayForEach(it, arr)
	{
		cJSON *row = map(it, arg);

		if (!row || !cJSON_AddItemToArray(out, row)) {
			cJSON_Delete(row);
			cJSON_Delete(rows);
			return ctl_oom();
		}
	}
	rc = print_rows(rows, key, cols, ncols, format, header);
	cJSON_Delete(rows);
	return rc;
}
