/*
 * gpbs_util.c - the pure parts of the gpubroker SPANK plugin (see
 * gpbs_util.h). Runs inside slurmstepd as root: no exit(), nothing kept
 * between calls, every descriptor closed on every path.
 */
#include "gpbs_util.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int copy_value(char *dst, size_t len, const char *value)
{
	size_t n = strlen(value);

	if (n == 0 || n >= len)
		return -1;
	memcpy(dst, value, n + 1);
	return 0;
}

int gpbs_conf_parse(struct gpbs_conf *conf, int argc, char *const argv[], char *err, size_t errlen)
{
	memset(conf, 0, sizeof(*conf));
	snprintf(conf->statedir, sizeof(conf->statedir), "%s", GPBS_DEFAULT_STATEDIR);
	snprintf(conf->gres, sizeof(conf->gres), "%s", GPBS_DEFAULT_GRES);
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		int bad = 0;

		if (strncmp(a, "socket=", 7) == 0)
			bad = copy_value(conf->socket, sizeof(conf->socket), a + 7) || a[7] != '/';
		else if (strncmp(a, "statedir=", 9) == 0)
			bad = copy_value(conf->statedir, sizeof(conf->statedir), a + 9) ||
			      a[9] != '/';
		else if (strcmp(a, "gres=") == 0)
			conf->gres[0] = '\0'; /* the job's GRES is not read */
		else if (strncmp(a, "gres=", 5) == 0)
			bad = copy_value(conf->gres, sizeof(conf->gres), a + 5);
		else if (strcmp(a, "fail_open") == 0)
			conf->fail_open = 1;
		else if (strcmp(a, "fail_closed") == 0)
			conf->fail_open = 0;
		else
			bad = 1;
		if (bad) {
			snprintf(err, errlen,
			         "bad plugstack argument '%s' (expected socket=/PATH, "
			         "statedir=/PATH, gres=NAME, fail_open or fail_closed)",
			         a);
			return -1;
		}
	}
	return 0;
}

int gpbs_size_parse(const char *text, uint64_t *out)
{
	uint64_t v;

	/* The daemon's own size syntax (daemon/conf/util.c), but not 0. */
	if (!text || util_parse_size(text, &v) < 0 || v == 0)
		return -1;
	*out = v;
	return 0;
}

/* One decimal index of at most 6 digits, advancing *p. */
static int read_index(const char **p)
{
	int v = 0, n = 0;

	while (isdigit((unsigned char)**p)) {
		if (++n > 6)
			return -1;
		v = v * 10 + (**p - '0');
		(*p)++;
	}
	return n ? v : -1;
}

int gpbs_devices_parse(const char *text, int *devices, int max)
{
	const char *p = text;
	int n = 0;

	if (!text || !*text)
		return 0;
	for (;;) {
		int lo = read_index(&p), hi = lo;

		if (lo < 0)
			return -1;
		if (*p == '-') {
			p++;
			hi = read_index(&p);
			if (hi < lo)
				return -1;
		}
		for (int d = lo; d <= hi; d++) {
			if (n >= max || gpbs_devices_index(devices, n, d) >= 0)
				return -1;
			devices[n++] = d;
		}
		if (*p == '\0')
			return n;
		if (*p++ != ',')
			return -1;
	}
}

/*
 * The entry of GRES @name in @detail (entries are separated by commas outside
 * parentheses: "gpu:2(IDX:0,2),gpumem(CNT:5)"), from *@p on: sets *@start
 * and *@end (its comma or the string's end) and moves *@p past it. Returns
 * 1, or 0 when no further entry is @name ("gpu" or "gpu:type", not "gpus").
 */
static int gres_entry_next(const char **p, const char *name, const char **start, const char **end)
{
	size_t nlen = strlen(name);

	while (**p) {
		const char *s = *p, *e = s;
		int depth = 0;

		for (; *e && (depth || *e != ','); e++)
			depth += (*e == '(') - (*e == ')');
		*p = *e ? e + 1 : e;
		if (strncmp(s, name, nlen) == 0 && (s[nlen] == '(' || s[nlen] == ':')) {
			*start = s;
			*end = e;
			return 1;
		}
	}
	return 0;
}

/* The text of "(KEY" + ":" ... ")" inside [start, end), or NULL. */
static const char *entry_field(const char *start, const char *end, const char *key, size_t *len)
{
	const char *f = strstr(start, key), *close;

	if (!f || f >= end)
		return NULL;
	f += strlen(key);
	close = memchr(f, ')', (size_t)(end - f));
	if (!close)
		return NULL;
	*len = (size_t)(close - f);
	return f;
}

int gpbs_gres_count(const char *detail, const char *name, uint64_t *out)
{
	const char *p = detail, *start, *end, *cnt;
	size_t len;

	if (!detail || !*name || !gres_entry_next(&p, name, &start, &end))
		return 0;
	cnt = entry_field(start, end, "(CNT:", &len);
	if (!cnt || !len || len > 20)
		return -1;
	for (size_t i = 0; i < len; i++)
		if (!isdigit((unsigned char)cnt[i]))
			return -1;
	errno = 0;
	*out = strtoull(cnt, NULL, 10);
	return errno ? -1 : 1;
}

int gpbs_gres_devices(const char *detail, const char *name, int *devices, int max)
{
	const char *p = detail, *start, *end, *idx;
	int n = 0;

	if (!detail || !*name)
		return 0;
	/* Each type of the GRES ("gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)") adds its own. */
	while (gres_entry_next(&p, name, &start, &end)) {
		int got[GPBS_MAX_DEVICES], k;
		char list[512];
		size_t len;

		/* No IDX: GPUs without device files (gres.conf without File=),
		 * counted but not numbered; Slurm names none in the step. */
		idx = strstr(start, "(IDX:");
		if (!idx || idx >= end)
			continue;
		idx = entry_field(start, end, "(IDX:", &len);
		if (!idx || len >= sizeof(list))
			return -1;
		memcpy(list, idx, len);
		list[len] = '\0';
		k = gpbs_devices_parse(list, got, GPBS_MAX_DEVICES);
		if (k < 0)
			return -1;
		for (int i = 0; i < k; i++) {
			if (gpbs_devices_index(devices, n, got[i]) >= 0)
				continue;
			if (n >= max)
				return -1;
			devices[n++] = got[i];
		}
	}
	return n;
}

int gpbs_devices_index(const int *devices, int n, int device)
{
	for (int i = 0; i < n; i++)
		if (devices[i] == device)
			return i;
	return -1;
}

void gpbs_partition_name(uint32_t job_id, char *buf, size_t len)
{
	snprintf(buf, len, "slurm-%" PRIu32, job_id);
}

static int state_path(char *buf, size_t len, const char *statedir, uint32_t job_id,
                      const char *suffix)
{
	int n = snprintf(buf, len, "%s/%" PRIu32 "%s", statedir, job_id, suffix);

	if (n < 0 || (size_t)n >= len) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

/* The state folder, made 0700 when missing; refused when others may write it. */
static int state_dir(const char *statedir)
{
	struct stat st;

	if (mkdir(statedir, 0700) < 0 && errno != EEXIST)
		return -1;
	if (stat(statedir, &st) < 0)
		return -1;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 0022)) {
		errno = EPERM;
		return -1;
	}
	return 0;
}

int gpbs_token_write(const char *statedir, uint32_t job_id, const char *token)
{
	char path[512], tmp[520];
	size_t n = strlen(token);
	int fd, saved;

	if (state_dir(statedir) < 0 || state_path(path, sizeof(path), statedir, job_id, ".token"))
		return -1;
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	if (write(fd, token, n) != (ssize_t)n || fsync(fd) < 0) {
		saved = errno ? errno : EIO;
		close(fd);
		unlink(tmp);
		errno = saved;
		return -1;
	}
	if (close(fd) < 0 || rename(tmp, path) < 0) {
		saved = errno;
		unlink(tmp);
		errno = saved;
		return -1;
	}
	return 0;
}

int gpbs_token_read(const char *statedir, uint32_t job_id, char token[65])
{
	char path[512];
	ssize_t n;
	int fd;

	if (state_path(path, sizeof(path), statedir, job_id, ".token"))
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	n = read(fd, token, 65);
	close(fd);
	if (n != 64) {
		errno = EINVAL;
		return -1;
	}
	token[64] = '\0';
	for (int i = 0; i < 64; i++)
		if (!isxdigit((unsigned char)token[i])) {
			errno = EINVAL;
			return -1;
		}
	return 0;
}

int gpbs_token_remove(const char *statedir, uint32_t job_id)
{
	char path[512];
	int rc = 0;

	if (state_path(path, sizeof(path), statedir, job_id, ".token"))
		return -1;
	if (unlink(path) < 0 && errno != ENOENT)
		rc = -1;
	if (state_path(path, sizeof(path), statedir, job_id, ".lock") == 0 && unlink(path) < 0 &&
	    errno != ENOENT)
		rc = -1;
	return rc;
}

int gpbs_lock(const char *statedir, uint32_t job_id)
{
	char path[512];
	int fd;

	if (state_dir(statedir) < 0 || state_path(path, sizeof(path), statedir, job_id, ".lock"))
		return -1;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	while (flock(fd, LOCK_EX) < 0) {
		if (errno != EINTR) {
			int saved = errno;

			close(fd);
			errno = saved;
			return -1;
		}
	}
	return fd;
}

void gpbs_unlock(int fd)
{
	if (fd >= 0)
		close(fd); /* closing releases the flock */
}
