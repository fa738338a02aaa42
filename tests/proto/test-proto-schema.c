/*
 * test-proto-schema.c - proto/PROTOCOL.md against proto/schema.h.
 *
 * Usage: test-proto-schema PROTOCOL_MD SCHEMA_H
 *
 * Every name of the schema is documented, and the document names nothing
 * the schema lacks:
 *   - methods: one "### name" heading each ("### a / b" for several),
 *     marked "(admin)" exactly when the op table says PROTO_OPF_ADMIN;
 *   - events: one row each in the events table, whose data column lists
 *     exactly the event's members, in order;
 *   - error codes: one row each in the error table, with the code's name;
 *   - member names: every key of a JSON example (an indented "> {...}"
 *     line) or of a `{...}` code span (`{"cap", "used"}`, `{device,
 *     total}`) is a PROTO_F_ name, and every PROTO_F_ name is such a key or
 *     a `name` code span somewhere;
 *   - the alloc and free message lists: each member is named in the
 *     method's section;
 *   - values: each PROTO_V_ value is quoted ("pinned") somewhere;
 *   - a `word` code span is a name of the schema (a limit's included: their
 *     table is test-schema-copies') or one of the few non-protocol words
 *     listed below (functions, configuration keys).
 * And the tables of schema.c list every PROTO_M_, PROTO_F_, PROTO_EV_ and
 * PROTO_V_ macro of schema.h, each name once.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc-helpers.h"
#include "schema.h"

#define MAX_NAMES  4096
#define MAX_EVENTS 64

/* Words PROTOCOL.md puts in code spans that are not protocol names: its
 * notation, JSON literals, the C library, a configuration key, metric
 * labels, and the names of cubie's and CuPy's functions it maps. */
static const char *const not_names[] = {
    "id64",
    "u64",
    "k",
    "true",
    "null",
    "errno",
    "recall_timeout_ms", /* a setting of gpubroker.conf(5) */
    "libgpubroker",
    "max_host_memory",
    "cuda_transport",
    "instance_id",
    "deferred",
    "set_manual_proportion",
    "set_manual_limit_mode",
    "set_auto_limit_mode",
    "get_chunk_parameters",
    "compute_chunked_shapes",
    "total_bytes",
    "used_bytes",
    "free_bytes",
    "n_free_blocks",
};

/* ---- what the document names --------------------------------------------- */

/* A name found in PROTOCOL.md: a key of a JSON object or brace list, or
 * a `word` code span (mention). */
struct found {
	char name[64];
	int line;
	bool key;
};

static struct found found[MAX_NAMES];
static int found_count;
static const char *doc;
static size_t doc_len;
static int cell_line; /* the line of a table cell being scanned from a copy */

static int line_of(const char *p)
{
	int line = 1;
	if (p < doc || p > doc + doc_len)
		return cell_line;
	for (const char *q = doc; q < p; q++)
		line += *q == '\n';
	return line;
}

static bool is_ident(const char *s, size_t n)
{
	if (!n || n >= sizeof(found[0].name) || !(islower((unsigned char)*s) || *s == '_'))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '_')
			return false;
	}
	return true;
}

static void add_found(const char *s, size_t n, const char *where, bool key)
{
	if (!is_ident(s, n))
		return;
	if (found_count == MAX_NAMES) {
		fprintf(stderr, "more than %d names in PROTOCOL.md: raise MAX_NAMES\n", MAX_NAMES);
		exit(1);
	}
	struct found *f = &found[found_count++];
	snprintf(f->name, sizeof(f->name), "%.*s", (int)n, s);
	f->line = line_of(where);
	f->key = key;
}

static const char *skip_space(const char *p, const char *end)
{
	while (p < end && isspace((unsigned char)*p))
		p++;
	return p;
}

/* Past the string at p ('"'). */
static const char *skip_string(const char *p, const char *end)
{
	for (p++; p < end; p++) {
		if (*p == '\\')
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return end;
}

/* Past the parenthesised note at p ('('), nested ones included. */
static const char *skip_note(const char *p, const char *end)
{
	int depth = 0;
	for (; p < end; p++) {
		if (*p == '(')
			depth++;
		else if (*p == ')' && --depth == 0)
			return p + 1;
	}
	return end;
}

static const char *scan_value(const char *p, const char *end, int depth);

/*
 * The keys of the members at p, up to a '}' or end: "key": value, key:
 * value, or the shorthand lists "a", "b" and a (a note), b of PROTOCOL.md's
 * prose. Returns the end of the object.
 */
static const char *scan_members(const char *p, const char *end, int depth)
{
	while (p < end) {
		p = skip_space(p, end);
		if (p < end && *p == '}')
			return p + 1;
		const char *name = p, *name_end;
		if (p < end && *p == '"') {
			p = skip_string(p, end);
			name++;
			name_end = p - 1;
		} else {
			while (p < end && (isalnum((unsigned char)*p) || *p == '_'))
				p++;
			name_end = p;
		}
		p = skip_space(p, end);
		if (p < end && *p == '(')
			p = skip_space(skip_note(p, end), end);
		if (name_end > name && p < end && (*p == ':' || *p == ',' || *p == '}'))
			add_found(name, (size_t)(name_end - name), name, true);
		if (p < end && *p == ':')
			p = scan_value(skip_space(p + 1, end), end, depth);
		/* Whatever else ("...", a note) up to the next member. */
		while (p < end && *p != ',' && *p != '}') {
			if (*p == '{' || *p == '[')
				p = scan_value(p, end, depth);
			else if (*p == '"')
				p = skip_string(p, end);
			else if (*p == '(')
				p = skip_note(p, end);
			else
				p++;
		}
		if (p < end && *p == ',')
			p++;
	}
	return end;
}

static const char *scan_value(const char *p, const char *end, int depth)
{
	if (p >= end || depth > 16)
		return end;
	if (*p == '{')
		return scan_members(p + 1, end, depth + 1);
	if (*p == '"')
		return skip_string(p, end);
	if (*p != '[') {
		while (p < end && *p != ',' && *p != '}' && *p != ']')
			p++;
		return p;
	}
	for (p++; p < end && *p != ']';) {
		p = skip_space(scan_value(skip_space(p, end), end, depth + 1), end);
		if (p < end && *p != ']')
			p++;
	}
	return p < end ? p + 1 : end;
}

/* The keys of every object in [p, end). */
static void scan_objects(const char *p, const char *end)
{
	while (p < end && (p = memchr(p, '{', (size_t)(end - p))) != NULL)
		p = scan_members(p + 1, end, 0);
}

/*
 * Every code span: a `word` is a mention, the keys of `{...}` (and of a
 * span of members alone, `"fd": true`) are keys. Then the JSON examples:
 * indented lines that start with '>', '<' or '{'.
 */
static void scan_doc(void)
{
	for (const char *p = doc; (p = strchr(p, '`')) != NULL;) {
		const char *end = strchr(p + 1, '`');
		if (!end)
			break;
		size_t n = (size_t)(end - p - 1);
		if (is_ident(p + 1, n))
			add_found(p + 1, n, p + 1, false);
		else if (memchr(p + 1, '{', n))
			scan_objects(p + 1, end);
		else if (memchr(p + 1, ':', n))
			scan_members(p + 1, end, 0);
		p = end + 1;
	}
	for (const char *line = doc; *line;) {
		const char *end = strchrnul(line, '\n');
		if (strncmp(line, "    ", 4) == 0 && line[4] && strchr("<>{", line[4]))
			scan_objects(line, end);
		line = *end ? end + 1 : end;
	}
}

static bool in_list(const char *name, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(list[i], name) == 0)
			return true;
	}
	return false;
}

static bool is_field(const char *name)
{
	return in_list(name, proto_fields, proto_field_count);
}

static bool is_limit(const char *name)
{
	for (unsigned i = 0; i < proto_limit_count; i++) {
		if (strcmp(proto_limits[i].name, name) == 0)
			return true;
	}
	return false;
}

static bool is_event(const char *name)
{
	for (unsigned i = 0; i < proto_event_count; i++) {
		if (strcmp(proto_events[i].name, name) == 0)
			return true;
	}
	return false;
}

/* Found as a key or a mention in lines [from, to). */
static bool found_in(const char *name, int from, int to)
{
	for (int i = 0; i < found_count; i++) {
		if (found[i].line >= from && found[i].line < to && strcmp(found[i].name, name) == 0)
			return true;
	}
	return false;
}

/* ---- the document's structure -------------------------------------------- */

#define MAX_LINES 2048

static const char *lines[MAX_LINES + 1];
static int line_count;

static void split_lines(void)
{
	for (const char *p = doc; *p && line_count < MAX_LINES;) {
		lines[line_count++] = p;
		p = strchrnul(p, '\n');
		p += *p == '\n';
	}
	if (line_count == MAX_LINES) {
		fprintf(stderr, "more than %d lines in PROTOCOL.md: raise MAX_LINES\n", MAX_LINES);
		exit(1);
	}
	lines[line_count] = doc + strlen(doc);
}

/* The line number (1-based) of the next heading of any level after line i. */
static int section_end(int i)
{
	for (i++; i <= line_count && lines[i - 1][0] != '#'; i++)
		;
	return i;
}

/* Cell c (0-based) of the table row at line i, trimmed, into out. */
static bool table_cell(int i, int c, char *out, size_t size)
{
	const char *p = lines[i - 1], *end = strchrnul(p, '\n');
	if (*p != '|')
		return false;
	for (p++; c > 0 && p < end; c--) {
		p = memchr(p, '|', (size_t)(end - p));
		if (!p)
			return false;
		p++;
	}
	const char *q = memchr(p, '|', (size_t)(end - p));
	if (c > 0 || !q)
		return false;
	while (p < q && *p == ' ')
		p++;
	while (q > p && q[-1] == ' ')
		q--;
	snprintf(out, size, "%.*s", (int)(q - p), p);
	return true;
}

/* The line of "## title", or 0. */
static int section_line(const char *title)
{
	size_t n = strlen(title);
	for (int i = 1; i <= line_count; i++) {
		if (strncmp(lines[i - 1], "## ", 3) == 0 &&
		    strncmp(lines[i - 1] + 3, title, n) == 0)
			return i;
	}
	fail("PROTOCOL.md has no section '## %s'", title);
	return 0;
}

/* ---- checks -------------------------------------------------------------- */

static int op_line[PROTO_OP_COUNT]; /* of its ### heading */

/* Every "### a / b (admin)" heading names methods, and every method has one. */
static void check_methods(void)
{
	for (int i = 1; i <= line_count; i++) {
		char text[160], *save = NULL;
		if (strncmp(lines[i - 1], "### ", 4) != 0)
			continue;
		snprintf(text, sizeof(text), "%.*s",
		         (int)(strchrnul(lines[i - 1], '\n') - lines[i - 1] - 4), lines[i - 1] + 4);
		char *admin = strstr(text, " (admin)");
		if (admin)
			*admin = '\0';
		for (char *name = strtok_r(text, " /", &save); name;
		     name = strtok_r(NULL, " /", &save)) {
			int op = proto_op_lookup(name);
			if (op < 0) {
				fail("PROTOCOL.md:%d: '### %s' is not a method of proto/schema.h "
				     "(PROTO_OPS)",
				     i, name);
				continue;
			}
			if (op_line[op])
				fail("PROTOCOL.md:%d: a second heading for %s (line %d)", i, name,
				     op_line[op]);
			op_line[op] = i;
			if (!admin != !(proto_ops[op].flags & PROTO_OPF_ADMIN))
				fail("PROTOCOL.md:%d: %s is %san admin operation in proto/schema.h "
				     "but %s "
				     "'(admin)' here",
				     i, name, admin ? "not " : "", admin ? "marked" : "not marked");
		}
	}
	for (int op = 0; op < PROTO_OP_COUNT; op++) {
		if (!op_line[op])
			fail("method %s of proto/schema.h has no '### %s' heading in PROTOCOL.md",
			     proto_ops[op].name, proto_ops[op].name);
	}
}

/* The alloc and free message lists: each member named in its method's section. */
static void check_messages(void)
{
	for (unsigned m = 0; m < proto_message_count; m++) {
		const struct proto_message_info *msg = &proto_messages[m];
		int op = proto_op_lookup(msg->method), from = op >= 0 ? op_line[op] : 0;
		if (!from)
			continue; /* check_methods said so */
		for (const struct proto_member *f = msg->members; f->name; f++) {
			if (!found_in(f->name, from, section_end(from)))
				fail("PROTOCOL.md:%d: the section of %s does not name its %s "
				     "member %s",
				     from, msg->method, msg->part, f->name);
		}
	}
}

/* Every event has a row in the events table whose data lists its members. */
static void check_events(void)
{
	bool seen[MAX_EVENTS] = {false};
	int start = section_line("Events"), end = section_end(start);
	for (int i = start + 1; start && i < end; i++) {
		char name[64], data[512];
		if (strncmp(lines[i - 1], "| `", 3) != 0 || !table_cell(i, 0, name, sizeof(name)) ||
		    !table_cell(i, 1, data, sizeof(data)))
			continue;
		size_t n = strlen(name);
		memmove(name, name + 1, n);
		name[n > 2 ? n - 2 : 0] = '\0';
		unsigned e = 0;
		while (e < proto_event_count && strcmp(proto_events[e].name, name) != 0)
			e++;
		if (e == proto_event_count) {
			fail("PROTOCOL.md:%d: event %s is not in proto/schema.h (PROTO_EVENTS)", i,
			     name);
			continue;
		}
		seen[e] = true;
		/* The data column's keys, in order: data, then an array's elements. */
		int first = found_count;
		cell_line = i;
		scan_objects(data, data + strlen(data));
		const struct proto_member *lists[] = {proto_events[e].data, proto_events[e].items};
		int k = first;
		for (int l = 0; l < 2; l++) {
			for (const struct proto_member *f = lists[l]; f->name; f++, k++) {
				if (k >= found_count || strcmp(found[k].name, f->name) != 0)
					fail("PROTOCOL.md:%d: event %s: data member %d is %s in "
					     "proto/schema.h, %s here",
					     i, name, k - first + 1, f->name,
					     k < found_count ? found[k].name : "missing");
			}
		}
		if (k < found_count)
			fail("PROTOCOL.md:%d: event %s: data member %s is not in proto/schema.h", i,
			     name, found[k].name);
	}
	for (unsigned e = 0; e < proto_event_count; e++) {
		if (!seen[e])
			fail("event %s of proto/schema.h has no row in PROTOCOL.md's events table",
			     proto_events[e].name);
	}
}

/* Every error code has a row "| code | name |" in the error table. */
static void check_codes(void)
{
#define CODE_(id, code, name) {code, name},
	static const struct {
		int code;
		const char *name;
	} codes[] = {PROTO_CODES(CODE_)};
#undef CODE_
	bool seen[sizeof(codes) / sizeof(codes[0])] = {false};
	int start = section_line("Error codes"), end = section_end(start);
	for (int i = start + 1; start && i < end; i++) {
		char code[16], name[64];
		if (strncmp(lines[i - 1], "| -", 3) != 0 || !table_cell(i, 0, code, sizeof(code)) ||
		    !table_cell(i, 1, name, sizeof(name)))
			continue;
		size_t c = 0;
		while (c < sizeof(codes) / sizeof(codes[0]) && codes[c].code != atoi(code))
			c++;
		if (c == sizeof(codes) / sizeof(codes[0])) {
			fail("PROTOCOL.md:%d: error code %s is not in proto/schema.h (PROTO_CODES)",
			     i, code);
			continue;
		}
		seen[c] = true;
		if (strcmp(codes[c].name, name) != 0)
			fail("PROTOCOL.md:%d: error code %s is %s in proto/schema.h, %s here", i,
			     code, codes[c].name, name);
	}
	for (size_t c = 0; c < sizeof(codes) / sizeof(codes[0]); c++) {
		if (!seen[c])
			fail("error code %d (%s) of proto/schema.h has no row in PROTOCOL.md's "
			     "error "
			     "table",
			     codes[c].code, codes[c].name);
	}
}

/* Every key is a member name, every `word` a name of the schema (or a
 * known non-protocol word), and every member name is documented. */
static void check_names(void)
{
	for (int i = 0; i < found_count; i++) {
		const char *name = found[i].name;
		if (found[i].key) {
			if (!is_field(name))
				fail("PROTOCOL.md:%d: member \"%s\" is not in proto/schema.h (no "
				     "PROTO_F_ "
				     "name)",
				     found[i].line, name);
			continue;
		}
		/* Metric series (the metrics section) are not JSON names. */
		if (is_field(name) || proto_op_lookup(name) >= 0 || is_event(name) ||
		    is_limit(name) || in_list(name, proto_values, proto_value_count) ||
		    in_list(name, not_names, sizeof(not_names) / sizeof(not_names[0])) ||
		    strncmp(name, "gpubroker_", 10) == 0 || name[0] == '_')
			continue;
		fail("PROTOCOL.md:%d: `%s` is no method, member, event or value of proto/schema.h "
		     "(nor a non-protocol word listed in %s)",
		     found[i].line, name, __FILE__);
	}
	for (unsigned f = 0; f < proto_field_count; f++) {
		if (!found_in(proto_fields[f], 0, MAX_LINES + 2))
			fail("member %s of proto/schema.h is not in PROTOCOL.md (as `%s` or as a "
			     "key)",
			     proto_fields[f], proto_fields[f]);
	}
	for (unsigned v = 0; v < proto_value_count; v++) {
		char quoted[80];
		snprintf(quoted, sizeof(quoted), "\"%s\"", proto_values[v]);
		if (!strstr(doc, quoted))
			fail("value %s of proto/schema.h is not in PROTOCOL.md (as \"%s\")",
			     proto_values[v], proto_values[v]);
	}
}

/* The tables of schema.c against the macros of schema.h: every
 * "#define PREFIX_X "name"" listed once. */
static void check_header(const char *header, const char *prefix, const char *const *names,
                         size_t count)
{
	size_t n = strlen(prefix), defined = 0;
	for (const char *p = header; (p = strstr(p, "#define ")) != NULL; p++) {
		const char *q = p + 8, *s, *e;
		if (strncmp(q, prefix, n) != 0 || !(s = strpbrk(q, "\"\n")) || *s != '"')
			continue;
		e = strchr(s + 1, '"');
		char name[64];
		snprintf(name, sizeof(name), "%.*s", (int)(e - s - 1), s + 1);
		defined++;
		if (!in_list(name, names, count))
			fail(
			    "proto/schema.h defines %.*s \"%s\", which its table in schema.c lacks",
			    (int)strcspn(q, " \t"), q, name);
	}
	if (defined != count)
		fail("proto/schema.h has %zu %s macros, its table %zu names", defined, prefix,
		     count);
	for (size_t i = 0; i < count; i++) {
		if (in_list(names[i], names, i))
			fail("proto/schema.h: %s%s is defined twice", prefix, names[i]);
	}
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s PROTOCOL_MD SCHEMA_H\n", argv[0]);
		return 2;
	}
	doc = doc_read_file(argv[1]);
	doc_len = strlen(doc);
	char *header = doc_read_file(argv[2]);
	const char *ops[PROTO_OP_COUNT], *events[MAX_EVENTS];
	if (proto_event_count > MAX_EVENTS) {
		fprintf(stderr, "more than %d events: raise MAX_EVENTS\n", MAX_EVENTS);
		return 1;
	}
	for (int i = 0; i < PROTO_OP_COUNT; i++)
		ops[i] = proto_ops[i].name;
	for (unsigned i = 0; i < proto_event_count; i++)
		events[i] = proto_events[i].name;
	check_header(header, "PROTO_M_", ops, PROTO_OP_COUNT);
	check_header(header, "PROTO_F_", proto_fields, proto_field_count);
	check_header(header, "PROTO_EV_", events, proto_event_count);
	check_header(header, "PROTO_V_", proto_values, proto_value_count);
	split_lines();
	scan_doc();
	check_methods();
	check_messages();
	check_events();
	check_codes();
	check_names();
	/* SCHEMA_DUMP=1: what was read from PROTOCOL.md, to see why a check failed. */
	if (getenv("SCHEMA_DUMP"))
		for (int i = 0; i < found_count; i++)
			printf("%d %s %s\n", found[i].line, found[i].key ? "key" : "word",
			       found[i].name);
	if (doc_failures) {
		printf("%d mismatches: proto/schema.h and proto/PROTOCOL.md must name the same "
		       "methods, members, events and values\n",
		       doc_failures);
		return 1;
	}
	printf("%d methods, %u members, %u events, %u values and %d names in PROTOCOL.md agree\n",
	       PROTO_OP_COUNT, proto_field_count, proto_event_count, proto_value_count,
	       found_count);
	free(header);
	free((char *)doc);
	return 0;
}
