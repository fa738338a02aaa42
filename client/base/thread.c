/*
 * thread.c - the calling thread's number (thread.h).
 */
#include "thread.h"

unsigned thread_number(void)
{
	static unsigned dealt;
	static __thread unsigned mine; /* 0: not dealt yet; else the number + 1 */

	if (!mine)
		mine = __atomic_fetch_add(&dealt, 1, __ATOMIC_RELAXED) + 1;
	return mine - 1;
}
