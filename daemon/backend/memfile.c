/*
 * memfile.c - sealed memory files (memfile.h): a memfd of a size, sealed so
 * that no process can shrink it under another's mapping.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memfile.h"

int memfile_create(const char *name, uint64_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

uint64_t memfile_page(void)
{
	long page = sysconf(_SC_PAGESIZE);
	return page > 0 ? (uint64_t)page : 4096;
}
