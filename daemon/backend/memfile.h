/*
 * memfile.h - sealed memory files: the shared memory a client maps.
 *
 * The sim backend's slabs and every pinned or mapped host allocation are
 * one of these: a memfd of a fixed size (sparse, zero-filled by the kernel,
 * so nothing of another user can be in it) whose size is sealed, so a
 * client that holds the descriptor cannot truncate it under another
 * process's mapping or the daemon's accounting.
 */
#ifndef GPB_MEMFILE_H
#define GPB_MEMFILE_H

#include <stdint.h>

/* A new sealed memfd of size bytes, named name in /proc (close-on-exec).
 * The descriptor, or -errno (-EMFILE, -ENOMEM, -EFBIG...). */
int memfile_create(const char *name, uint64_t size);

/* The size memory files are rounded up to (the page size). */
uint64_t memfile_page(void);

#endif
