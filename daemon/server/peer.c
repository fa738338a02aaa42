/*
 * peer.c - who is at the other end of a connection.
 */
#include "peer.h"

#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"

gid_t peer_group_gid(const char *name)
{
	struct group grp, *result = NULL;
	char buf[4096];
	if (!name[0] || getgrnam_r(name, &grp, buf, sizeof(buf), &result) != 0 || !result)
		return (gid_t)-1;
	return result->gr_gid;
}

/* Whether gid is among n groups. */
static bool peer_has_group(const gid_t *groups, size_t n, gid_t gid)
{
	for (size_t i = 0; i < n; i++) {
		if (groups[i] == gid)
			return true;
	}
	return false;
}

/* SO_PEERPIDFD is Linux 6.5's: older headers lack the number. */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* A pidfd of the peer of socket fd, or -1 (a kernel before 6.5). Taken only
 * where its pid is 0: the peer is in a PID namespace the daemon cannot see,
 * and the pidfd is the one way left to know when it exits. */
static int peer_pidfd(int fd)
{
	int pidfd = -1;
	socklen_t len = sizeof(pidfd);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0) {
		log_debug("a peer in another PID namespace: no SO_PEERPIDFD (%s)", strerror(errno));
		return -1;
	}
	return pidfd;
}

int peer_read(int fd, gid_t admin_gid, struct peer *out)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	out->pid = cred.pid;
	out->pidfd = -1;
	out->uid = cred.uid;
	out->gid = cred.gid;
	out->ngroups = 0;
	out->admin = cred.uid == 0 || (admin_gid != (gid_t)-1 && cred.gid == admin_gid);
	len = sizeof(out->groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, out->groups, &len) == 0) {
		out->ngroups = len / sizeof(gid_t);
		if (admin_gid != (gid_t)-1 && peer_has_group(out->groups, out->ngroups, admin_gid))
			out->admin = true;
	} else if (errno == ERANGE) {
		/* More groups than we keep (len now says how many): the admin
		 * check sees them all, the session keeps the first ones. */
		gid_t *all = malloc(len);
		if (!all)
			return -ENOMEM;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, all, &len) < 0) {
			int e = errno;
			free(all);
			return -e;
		}
		out->ngroups = PEER_MAX_GROUPS;
		memcpy(out->groups, all, sizeof(out->groups));
		if (admin_gid != (gid_t)-1 && peer_has_group(all, len / sizeof(gid_t), admin_gid))
			out->admin = true;
		free(all);
	} else if (!out->admin && admin_gid != (gid_t)-1) {
		/* No supplementary groups to tell an admin by (a kernel before
		 * 4.13): refused rather than guessed. */
		return -errno;
	}
	if (cred.pid == 0)
		out->pidfd = peer_pidfd(fd);
	return 0;
}
