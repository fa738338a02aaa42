/*
 * test-schema-copies.c - the copies of proto/schema.h outside C: the table
 * of limits in proto/PROTOCOL.md and python/gpubroker/_schema.py (written
 * by tools/gen-pyschema.py), against the header as compiled.
 *
 * Usage: test-schema-copies PROTOCOL_MD SCHEMA_H SCHEMA_PY
 *
 *   - schema.h: every integer macro but PROTO_VERSION is in PROTO_LIMITS
 *     (a new limit cannot miss the table, the Python module and the docs);
 *   - PROTOCOL.md: the "Limits" section has one row per limit, with its
 *     value, and no other; each "name":number of a JSON example that names
 *     a limit gives its value;
 *   - _schema.py: VERSION, each limit, each error code and its name, and
 *     every PROTO_M_, PROTO_F_, PROTO_EV_ and PROTO_V_ macro (aliases
 *     resolved) with its value, nothing else; and the compiled tables'
 *     names (proto_ops, proto_fields, proto_events, proto_values) are
 *     among those values.
 * test-proto-schema checks the names of PROTOCOL.md and schema.c's tables.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc-helpers.h"
#include "schema.h"

#define MAX_ENTRIES 1024

/* A NAME = value line of a file (_schema.py), or a macro of schema.h. */
struct entry {
	char name[64];
	char text[128]; /* a string's contents, or a number's digits */
	bool string;
	bool seen;
};

static struct entry py[MAX_ENTRIES], macros[MAX_ENTRIES];
static int py_count, macro_count;

static struct entry *find(struct entry *list, int n, const char *name)
{
	for (int i = 0; i < n; i++) {
		if (strcmp(list[i].name, name) == 0)
			return &list[i];
	}
	return NULL;
}

static void add(struct entry *list, int *n, const char *name, size_t name_len, const char *text,
                size_t text_len, bool string)
{
	if (*n == MAX_ENTRIES) {
		fprintf(stderr, "more than %d names: raise MAX_ENTRIES\n", MAX_ENTRIES);
		exit(1);
	}
	struct entry *e = &list[(*n)++];
	snprintf(e->name, sizeof(e->name), "%.*s", (int)name_len, name);
	snprintf(e->text, sizeof(e->text), "%.*s", (int)text_len, text);
	e->string = string;
	e->seen = false;
}

/* The value after a name: "text" (a string) or -?digits; false for others. */
static bool value_at(const char *p, const char **text, size_t *len, bool *string)
{
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p == '"') {
		*text = p + 1;
		*len = strcspn(p + 1, "\"\n");
		*string = true;
		return p[1 + *len] == '"';
	}
	*text = p;
	*len = (size_t)(*p == '-') + strspn(p + (*p == '-'), "0123456789");
	*string = false;
	return *len > (size_t)(*p == '-');
}

/* _schema.py's top-level "NAME = value" lines. */
static void read_py(const char *text)
{
	for (const char *line = text; *line;) {
		const char *end = strchrnul(line, '\n'), *v;
		size_t n = strspn(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"), len;
		bool string;
		if (n && strncmp(line + n, " = ", 3) == 0 && line[n + 3] != '{') {
			if (value_at(line + n + 3, &v, &len, &string) && v + len + string == end)
				add(py, &py_count, line, n, v, len, string);
			else
				fail("_schema.py: %.*s: not a string or integer", (int)(end - line),
				     line);
		}
		line = *end ? end + 1 : end;
	}
}

/* schema.h's "#define PROTO_X value" lines, PROTO_ left off; an alias
 * (#define PROTO_X PROTO_Y) takes Y's value. */
static void read_header(const char *text)
{
	for (const char *p = text; (p = strstr(p, "#define PROTO_")) != NULL; p++) {
		const char *name = p + 14, *v;
		size_t n = strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"), len;
		bool string;
		if (name[n] != ' ' && name[n] != '\t')
			continue; /* a function-like macro */
		if (value_at(name + n, &v, &len, &string)) {
			add(macros, &macro_count, name, n, v, len, string);
			continue;
		}
		v = name + n + strspn(name + n, " \t");
		if (strncmp(v, "PROTO_", 6) == 0) {
			char alias[64];
			snprintf(alias, sizeof(alias), "%.*s",
			         (int)strspn(v + 6, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"),
			         v + 6);
			struct entry *to = find(macros, macro_count, alias);
			if (to)
				add(macros, &macro_count, name, n, to->text, strlen(to->text),
				    to->string);
		}
	}
}

#define LIMIT_ID_(id, name) #id,
static const char *const limit_ids[] = {PROTO_LIMITS(LIMIT_ID_)};
#undef LIMIT_ID_

static void check_header(void)
{
	for (int i = 0; i < macro_count; i++) {
		const struct entry *m = &macros[i];
		bool listed = false;
		if (m->string || strcmp(m->name, "VERSION") == 0)
			continue;
		for (unsigned l = 0; l < proto_limit_count; l++)
			listed |= strcmp(limit_ids[l], m->name) == 0;
		if (!listed)
			fail("schema.h: PROTO_%s is an integer but not in PROTO_LIMITS", m->name);
	}
}

static const struct proto_limit_info *limit_named(const char *name, size_t n)
{
	for (unsigned l = 0; l < proto_limit_count; l++) {
		if (strlen(proto_limits[l].name) == n &&
		    strncmp(proto_limits[l].name, name, n) == 0)
			return &proto_limits[l];
	}
	return NULL;
}

static void check_doc(const char *doc)
{
	const char *sec = strstr(doc, "\n## Limits\n"), *end;
	bool seen[64] = {false};
	if (!sec) {
		fail("PROTOCOL.md has no \"## Limits\" section");
		return;
	}
	end = strstr(sec + 1, "\n## ");
	end = end ? end : sec + strlen(sec);
	for (const char *line = sec + 1; line < end;) {
		const char *eol = strchrnul(line, '\n');
		if (strncmp(line, "| `", 3) == 0) {
			const char *name = line + 3;
			size_t n = strcspn(name, "`\n");
			const struct proto_limit_info *l = limit_named(name, n);
			unsigned long v =
			    strtoul(name + n + 1 + strspn(name + n + 1, " |"), NULL, 10);
			if (!l)
				fail("PROTOCOL.md's limits: %.*s is not in PROTO_LIMITS", (int)n,
				     name);
			else if (seen[l - proto_limits])
				fail("PROTOCOL.md's limits: %s has two rows", l->name);
			else if (v != l->value)
				fail("PROTOCOL.md's limits: %s is %lu there, %lu in schema.h",
				     l->name, v, l->value);
			if (l)
				seen[l - proto_limits] = true;
		}
		line = *eol ? eol + 1 : eol;
	}
	for (unsigned l = 0; l < proto_limit_count; l++) {
		if (!seen[l])
			fail("PROTOCOL.md's limits: no row for %s", proto_limits[l].name);
	}
	/* "max_frame":65536 in the examples (hello's limits). */
	for (const char *p = doc; (p = strchr(p, '"')) != NULL; p++) {
		size_t n = strcspn(p + 1, "\"\n");
		const struct proto_limit_info *l = limit_named(p + 1, n);
		if (l && p[n + 1] == '"' && p[n + 2] == ':' && isdigit((unsigned char)p[n + 3]) &&
		    strtoul(p + n + 3, NULL, 10) != l->value)
			fail("PROTOCOL.md: an example gives %s as %lu, schema.h %lu", l->name,
			     strtoul(p + n + 3, NULL, 10), l->value);
		p += n;
	}
}

static void expect_py(const char *name, const char *text, bool string)
{
	struct entry *e = find(py, py_count, name);
	if (!e)
		fail("_schema.py lacks %s (%s)", name, text);
	else if (e->string != string || strcmp(e->text, text) != 0)
		fail("_schema.py: %s is %s, schema.h says %s", name, e->text, text);
	else
		e->seen = true;
}

static bool py_has_value(const char *prefix, const char *value)
{
	for (int i = 0; i < py_count; i++) {
		if (py[i].string && strncmp(py[i].name, prefix, strlen(prefix)) == 0 &&
		    strcmp(py[i].text, value) == 0)
			return true;
	}
	return false;
}

static void check_py(void)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%d", PROTO_VERSION);
	expect_py("VERSION", buf, false);
	for (unsigned l = 0; l < proto_limit_count; l++) {
		char name[64];
		for (size_t i = 0; i <= strlen(proto_limits[l].name); i++)
			name[i] = (char)toupper((unsigned char)proto_limits[l].name[i]);
		snprintf(buf, sizeof(buf), "%lu", proto_limits[l].value);
		expect_py(name, buf, false);
	}
#define CODE_(id, code, name)                                                                      \
	snprintf(buf, sizeof(buf), "%d", code);                                                    \
	expect_py("CODE_" #id, buf, false);
	PROTO_CODES(CODE_)
#undef CODE_
	for (int i = 0; i < macro_count; i++) {
		const struct entry *m = &macros[i];
		if (m->string &&
		    (strncmp(m->name, "M_", 2) == 0 || strncmp(m->name, "F_", 2) == 0 ||
		     strncmp(m->name, "EV_", 3) == 0 || strncmp(m->name, "V_", 2) == 0))
			expect_py(m->name, m->text, true);
	}
	for (int i = 0; i < py_count; i++) {
		if (!py[i].seen)
			fail("_schema.py: %s is not in schema.h", py[i].name);
	}
	for (int i = 0; i < PROTO_OP_COUNT; i++) {
		if (!py_has_value("M_", proto_ops[i].name))
			fail("_schema.py: no M_ for method %s", proto_ops[i].name);
	}
	for (unsigned i = 0; i < proto_field_count; i++) {
		if (!py_has_value("F_", proto_fields[i]))
			fail("_schema.py: no F_ for member %s", proto_fields[i]);
	}
	for (unsigned i = 0; i < proto_event_count; i++) {
		if (!py_has_value("EV_", proto_events[i].name))
			fail("_schema.py: no EV_ for event %s", proto_events[i].name);
	}
	for (unsigned i = 0; i < proto_value_count; i++) {
		if (!py_has_value("V_", proto_values[i]))
			fail("_schema.py: no V_ for value %s", proto_values[i]);
	}
}

/* CODE_NAMES' entries: each "CODE_X: "name"," line names the code's name. */
static void check_py_code_names(const char *text)
{
#define CODE_(id, code, name)                                                                      \
	if (!strstr(text, "\n    CODE_" #id ": \"" name "\",\n"))                                  \
		fail("_schema.py: CODE_NAMES lacks CODE_%s: \"%s\"", #id, name);
	PROTO_CODES(CODE_)
#undef CODE_
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s PROTOCOL_MD SCHEMA_H SCHEMA_PY\n", argv[0]);
		return 2;
	}
	char *doc = doc_read_file(argv[1]), *header = doc_read_file(argv[2]),
	     *pyfile = doc_read_file(argv[3]);
	if (proto_limit_count > 64) {
		fprintf(stderr, "more than 64 limits: raise seen[] in check_doc\n");
		return 1;
	}
	read_header(header);
	read_py(pyfile);
	check_header();
	check_doc(doc);
	check_py();
	check_py_code_names(pyfile);
	free(doc);
	free(header);
	free(pyfile);
	if (doc_failures) {
		printf("%d mismatches: run tools/gen-pyschema.py after changing proto/schema.h, "
		       "and keep PROTOCOL.md's table of limits in step\n",
		       doc_failures);
		return 1;
	}
	printf("%u limits, %d names of _schema.py and PROTOCOL.md's limits agree with schema.h\n",
	       proto_limit_count, py_count);
	return 0;
}
