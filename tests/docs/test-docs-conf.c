/*
 * test-docs-conf.c - the documentation of gpubroker.conf against the parser.
 *
 * Usage: test-docs-conf EXAMPLE_CONF CONF_MAN_SCD
 *
 * For every key of daemon/conf/conf.c (conf_keys[]):
 *   - the example configuration has exactly one "#key = value" line, tagged
 *     [reload] or [restart] as conf_key_needs_restart() says, and with all
 *     those lines uncommented it parses to exactly the built-in defaults;
 *   - gpubroker.conf(5) has exactly one "*key* =" entry whose "Default: *v*"
 *     is the built-in default and whose _reload_ / _restart_ tag is right.
 * Neither may document a key the parser does not know.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

#define MAX_LINES 2048

static int failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
	va_list ap;
	fputs("FAIL: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	failures++;
}

struct text {
	char *buf;
	char *line[MAX_LINES];
	int count;
};

static void text_read(const char *path, struct text *t)
{
	FILE *f = fopen(path, "r");
	size_t cap = 1 << 16, len = 0;
	if (!f) {
		perror(path);
		exit(1);
	}
	t->buf = malloc(cap);
	for (size_t n; t->buf && (n = fread(t->buf + len, 1, cap - len - 1, f)) > 0;) {
		len += n;
		if (len + 1 == cap)
			t->buf = realloc(t->buf, cap *= 2);
	}
	fclose(f);
	if (!t->buf) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	t->buf[len] = '\0';
	t->count = 0;
	for (char *p = t->buf; *p && t->count < MAX_LINES;) {
		t->line[t->count++] = p;
		char *nl = strchr(p, '\n');
		if (!nl)
			break;
		*nl = '\0';
		p = nl + 1;
	}
}

/* A key name at s: lowercase letters, digits, underscores. Its length. */
static size_t key_len(const char *s)
{
	size_t n = 0;
	while (islower((unsigned char)s[n]) || isdigit((unsigned char)s[n]) || s[n] == '_')
		n++;
	return n;
}

static int key_lookup(const char *name, size_t len)
{
	for (int k = 0; k < CONF_KEY_COUNT; k++) {
		const char *kn = conf_key_name(k);
		if (strlen(kn) == len && strncmp(kn, name, len) == 0)
			return k;
	}
	return -1;
}

/* Sets key to value on a copy of the defaults; true when that is the default. */
static bool is_default(int k, const char *value)
{
	struct conf def, cfg;
	struct conf_error err;
	conf_defaults(&def);
	cfg = def;
	if (conf_set(&cfg, conf_key_name(k), value, &err) < 0) {
		fail("%s: documented default '%s' is rejected: %s", conf_key_name(k), value,
		     err.message);
		return false;
	}
	return (conf_diff(&def, &cfg) & (1ull << k)) == 0;
}

/* The example file: "#key = value" lines, tagged by the nearest [reload] or
 * [restart] above them. */
static void check_example(const char *path)
{
	struct text t;
	int seen[CONF_KEY_COUNT] = {0};
	char *uncommented = calloc(1, 1 << 16);
	size_t used = 0;

	text_read(path, &t);
	for (int i = 0; i < t.count; i++) {
		const char *l = t.line[i];
		size_t n = l[0] == '#' ? key_len(l + 1) : 0;
		if (n == 0 || strncmp(l + 1 + n, " = ", 3) != 0)
			continue;
		int k = key_lookup(l + 1, n);
		if (k < 0) {
			fail("%s:%d: '%.*s' is not a key of gpubroker.conf", path, i + 1, (int)n,
			     l + 1);
			continue;
		}
		seen[k]++;
		used += (size_t)snprintf(uncommented + used, (1 << 16) - used, "%s\n", l + 1);
		const char *tag = NULL;
		for (int j = i - 1; j >= 0 && !tag; j--) {
			if (strstr(t.line[j], "[reload]"))
				tag = "[reload]";
			else if (strstr(t.line[j], "[restart]"))
				tag = "[restart]";
		}
		const char *want = conf_key_needs_restart(k) ? "[restart]" : "[reload]";
		if (!tag || strcmp(tag, want) != 0)
			fail("%s:%d: %s is marked %s, but it is %s", path, i + 1, conf_key_name(k),
			     tag ? tag : "nothing", want);
	}
	for (int k = 0; k < CONF_KEY_COUNT; k++) {
		if (seen[k] != 1)
			fail("%s: key %s appears %d times (once expected)", path, conf_key_name(k),
			     seen[k]);
	}

	/* Every documented value, uncommented, must be the built-in default. */
	struct conf def, cfg;
	struct conf_error err;
	conf_defaults(&def);
	cfg = def;
	if (conf_parse(uncommented, used, &cfg, &err) < 0) {
		fail("%s uncommented: line %u (%s): %s", path, err.line, err.key, err.message);
	} else {
		uint64_t diff = conf_diff(&def, &cfg);
		for (int k = 0; k < CONF_KEY_COUNT; k++) {
			if (diff & (1ull << k))
				fail("%s: the value shown for %s is not its default", path,
				     conf_key_name(k));
		}
	}
	free(uncommented);
	free(t.buf);
}

/* The man page: "*key* = ..." entries, each with "Default: *value*" and a
 * _reload_ or _restart_ tag before the next entry or heading. */
static void check_man(const char *path)
{
	struct text t;
	int seen[CONF_KEY_COUNT] = {0};

	text_read(path, &t);
	for (int i = 0; i < t.count; i++) {
		const char *l = t.line[i];
		size_t n = l[0] == '*' ? key_len(l + 1) : 0;
		if (n == 0 || strncmp(l + 1 + n, "* =", 3) != 0)
			continue;
		int k = key_lookup(l + 1, n);
		if (k < 0) {
			fail("%s:%d: '%.*s' is not a key of gpubroker.conf", path, i + 1, (int)n,
			     l + 1);
			continue;
		}
		seen[k]++;
		/* The entry's body: indented lines up to the next entry. */
		char body[2048] = "";
		size_t used = 0;
		for (int j = i + 1; j < t.count && (t.line[j][0] == '\t' || !t.line[j][0]); j++)
			used += (size_t)snprintf(body + used, sizeof(body) - used, " %s",
			                         t.line[j] + (t.line[j][0] == '\t'));
		const char *d = strstr(body, "Default: *");
		char value[256];
		if (!d || sscanf(d, "Default: *%255[^*]*", value) != 1) {
			fail("%s:%d: %s has no 'Default: *value*'", path, i + 1, conf_key_name(k));
		} else if (!is_default(k, value)) {
			fail("%s:%d: %s: 'Default: *%s*' is not the built-in default", path, i + 1,
			     conf_key_name(k), value);
		}
		bool restart = strstr(body, "_restart_") != NULL;
		bool reload = strstr(body, "_reload_") != NULL;
		if (restart == reload || restart != conf_key_needs_restart(k))
			fail("%s:%d: %s must be tagged %s only", path, i + 1, conf_key_name(k),
			     conf_key_needs_restart(k) ? "_restart_" : "_reload_");
	}
	for (int k = 0; k < CONF_KEY_COUNT; k++) {
		if (seen[k] != 1)
			fail("%s: key %s is documented %d times (once expected)", path,
			     conf_key_name(k), seen[k]);
	}
	free(t.buf);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s EXAMPLE_CONF CONF_MAN_SCD\n", argv[0]);
		return 2;
	}
	check_example(argv[1]);
	check_man(argv[2]);
	if (failures) {
		printf("%d problem(s): update the example configuration (systemd/gpubroker.conf) "
		       "and gpubroker.conf(5) (man/gpubroker.conf.5.scd) to match "
		       "daemon/conf/conf.c\n",
		       failures);
		return 1;
	}
	printf("%d keys documented, with their defaults and reload behaviour\n", CONF_KEY_COUNT);
	return 0;
}
