/*
 * doc-helpers.c - see doc-helpers.h.
 */
#include "doc-helpers.h"

#include <stdlib.h>

int doc_failures;

char *doc_read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	size_t cap = 1 << 16, len = 0, n;
	char *buf = malloc(cap);
	if (!f || !buf) {
		perror(path);
		exit(1);
	}
	while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (len + 1 == cap && !(buf = realloc(buf, cap *= 2)))
			exit(1);
	}
	fclose(f);
	buf[len] = '\0';
	return buf;
}
