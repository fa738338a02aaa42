/*
 * doc-helpers.h - what the checks of schema.h's copies (test-proto-schema,
 * test-schema-copies) share: reading a file whole, and counting mismatches
 * that are all reported before the program fails.
 */
#ifndef GPB_TESTS_DOC_HELPERS_H
#define GPB_TESTS_DOC_HELPERS_H

#include <stdio.h>

extern int doc_failures;

/* Reports one mismatch (the program goes on, to report them all). */
#define fail(...) (printf("FAIL: "), printf(__VA_ARGS__), putchar('\n'), doc_failures++)

/* The file's bytes, NUL-terminated (malloc'd); exits on an error. */
char *doc_read_file(const char *path);

#endif
