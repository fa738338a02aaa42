/*
 * ctl_output.h - gpubrokerctl's rendering of result rows as an aligned
 * table (human-readable sizes) or CSV (exact values).
 */
#ifndef GPB_CTL_OUTPUT_H
#define GPB_CTL_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

enum ctl_format {
	CTL_TABLE,
	CTL_JSON,
	CTL_CSV,
};

enum ctl_kind {
	CTL_TEXT, /* left-aligned as sent */
	CTL_NUM,  /* right-aligned integer (JSON number or decimal string) */
	CTL_SIZE, /* bytes: "1.5 GiB" in tables, exact in CSV */
};

struct ctl_column {
	const char *key;   /* member of each row object; also the CSV header */
	const char *title; /* table header */
	enum ctl_kind kind;
};

struct ctl_table {
	const struct ctl_column *cols;
	size_t ncols;
	enum ctl_format format;
	char **cells; /* nrows * ncols, row-major */
	size_t nrows;
	size_t cap; /* rows allocated */
};

void ctl_table_init(struct ctl_table *t, const struct ctl_column *cols, size_t ncols,
                    enum ctl_format format);
void ctl_table_finish(struct ctl_table *t);
/* Adds one row per object of @rows (a JSON array). 0, -EINVAL (not an array
 * of objects) or -ENOMEM. */
int ctl_table_add_rows(struct ctl_table *t, const cJSON *rows);
/* Prints the table (CTL_TABLE or CTL_CSV), with its header line unless
 * @header is false. */
void ctl_table_print(const struct ctl_table *t, FILE *out, bool header);

/* "256 B", "1.0 KiB", "1.5 GiB": binary units with one decimal above bytes. */
void ctl_format_size(uint64_t bytes, char *buf, size_t len);
/* "3d 4h 5m 6s", leading zero units omitted. */
void ctl_format_duration(uint64_t seconds, char *buf, size_t len);
/* A device's limit as the operator set it, from the `policy` and `status`
 * members limit (u64 string or null), limit_fraction (number or null) and
 * capacity (u64 string): "-" for none, "8.0 GiB", or "50% (8.0 GiB)" (a
 * fraction, with the capacity it leaves). */
void ctl_format_limit(const cJSON *limit, const cJSON *fraction, const cJSON *capacity, char *buf,
                      size_t len);
/* Formats one JSON value as a cell of @kind in @format; malloc'd or NULL. */
char *ctl_format_value(const cJSON *v, enum ctl_kind kind, enum ctl_format format);

/* Prints the rows of @result[@key] (an array of objects) with @cols, in
 * @format (CTL_TABLE or CTL_CSV). Returns an exit code. */
int print_rows(const cJSON *result, const char *key, const struct ctl_column *cols, size_t ncols,
               enum ctl_format format, bool header);
/* Under a table (CTL_TABLE only), the line of @result's "others" totals
 * (`clients`, `policy`: what a caller who is not an administrator may not
 * see of other users), counted by @count_key; nothing when there are none. */
void print_others(const cJSON *result, const char *count_key, enum ctl_format format);
/* Prints the rows of @arr (an array of objects, the reply's member @key)
 * each as @map(row, @arg) makes it (a copy that reads better, or NULL when
 * out of memory), with @cols. Returns an exit code. */
int print_rows_mapped(const cJSON *arr, const char *key, cJSON *(*map)(const cJSON *, const char *),
                      const char *arg, const struct ctl_column *cols, size_t ncols,
                      enum ctl_format format, bool header);

#endif
