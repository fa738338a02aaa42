/*
 * peer.h - the identity of the process at the other end of a connection:
 * credentials and group membership, for ownership and the admin check.
 */
#ifndef GPB_PEER_H
#define GPB_PEER_H

#include <stdbool.h>
#include <sys/types.h>

/* Supplementary groups kept per peer (for group rules); the admin check sees
 * them all. */
#define PEER_MAX_GROUPS 256

struct peer {
	pid_t pid; /* 0: in a PID namespace this daemon cannot see */
	int pidfd; /* with pid 0, a pidfd of the peer (SO_PEERPIDFD), the caller's to
	              close; else -1 */
	uid_t uid;
	gid_t gid;
	bool admin; /* root, or admin_gid among its groups */
	unsigned ngroups;
	gid_t groups[PEER_MAX_GROUPS]; /* the first ngroups supplementary groups */
};

/* Peer credentials and group membership of a connected Unix socket, as the
 * peer had them at connect(). admin_gid is (gid_t)-1 when no admin group
 * exists. Where the peer's pid is 0 (another PID namespace) and the kernel
 * has SO_PEERPIDFD (Linux 6.5), out->pidfd is a pidfd of the peer, which
 * tells when it exits; else -1. 0 or -errno (nothing to close then). */
int peer_read(int fd, gid_t admin_gid, struct peer *out);

/* The gid of a group name, or (gid_t)-1 when there is no such group. */
gid_t peer_group_gid(const char *name);

#endif
