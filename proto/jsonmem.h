/*
 * jsonmem.h - cJSON's allocations, counted.
 *
 * A JSON tree that is never freed costs nothing a leak checker sees when it
 * stays reachable (a list, a cache) or when the process ends first.
 * jsonmem_install() routes every cJSON allocation of the process
 * (cJSON_InitHooks, process wide) through a counter, so that the daemon at a
 * clean exit and every test program at its end can require zero
 * outstanding. Call it before anything allocates JSON; memory cJSON hands
 * out must then be released with cJSON_Delete/cJSON_free, never free().
 */
#ifndef GPB_JSONMEM_H
#define GPB_JSONMEM_H

/* Installs the counting hooks (idempotent). */
void jsonmem_install(void);
/* Blocks cJSON allocated and has not freed since jsonmem_install(); not 0
 * means a leaked node (> 0) or a mismatched free (either sign). */
long jsonmem_outstanding(void);
/* For tests of the out-of-memory paths: after n more cJSON allocations the
 * next one fails, once (a transient shortage, which the code must survive
 * as well as a lasting one); n < 0 (the start) cancels it. */
void jsonmem_fail_once(long n);

#endif
