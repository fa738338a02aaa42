/*
 * thread.h - the calling thread's number, for the layers that give each
 * thread a share of their own (the lease allocator's arenas, a framework
 * allocator's pointer tables), so that threads do not wait on each other.
 */
#ifndef GPB_CLIENT_THREAD_H
#define GPB_CLIENT_THREAD_H

/* 0, 1, 2...: dealt in the order the threads first ask, process-wide, so
 * that N threads taken modulo N shares never share one. */
unsigned thread_number(void);

/* Bytes apart that what two threads write must be: two cache lines, since
 * x86 fetches lines in pairs (the adjacent-line prefetcher). Arenas one
 * line apart held two threads at 0.31 of one's pairs each, two lines apart
 * at 0.97 (bench P8b, this 2-CPU guest). */
#define THREAD_APART 128

#endif
