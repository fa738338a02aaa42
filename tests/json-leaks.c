/*
 * json-leaks.c - linked into every test program: counts cJSON's allocations
 * (proto/jsonmem.h) from before main() and fails the program at exit when a
 * JSON node was never freed, even one still reachable, which neither ASan's
 * leak checker nor valgrind reports.
 *
 * Only the process that installed the hooks checks: a forked child that
 * exits does not judge its parent's trees.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "jsonmem.h"

static pid_t json_leaks_owner;

__attribute__((constructor)) static void json_leaks_start(void)
{
	jsonmem_install();
	json_leaks_owner = getpid();
}

__attribute__((destructor)) static void json_leaks_check(void)
{
	long n = jsonmem_outstanding();
	if (n == 0 || getpid() != json_leaks_owner)
		return;
	fflush(NULL);
	fprintf(stderr, "json-leaks: %ld cJSON allocations outstanding at exit (%s)\n", n,
	        n > 0 ? "JSON never freed" : "freed with cJSON_free but not allocated by cJSON");
	_exit(1);
}
