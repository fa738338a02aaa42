/*
 * ctl_ops.c - gpubrokerctl's operator commands: reload, evict, trim,
 * metrics, version.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "ctl.h"
#include "gpubroker.h"
#include "schema.h"

int params_session(const struct ctl_options *o, cJSON *params)
{
	const char *id = o->args[0];
	size_t n = strlen(id);
	if (n != 16 || strspn(id, "0123456789abcdef") != n)
		return usage_error("a session is 16 hex digits as `clients` shows, not '%s'", id);
	return cJSON_AddStringToObject(params, PROTO_F_SESSION, id) ? EXIT_OK : ctl_oom();
}

/* Prints the names in one array of the reload result, comma separated. */
static void print_keys(const char *label, const cJSON *keys)
{
	const cJSON *k;
	bool any = false;
	printf("%s", label);
	cJSON_ArrayForEach(k, keys)
	{
		if (cJSON_IsString(k)) {
			printf("%s%s", any ? ", " : " ", k->valuestring);
			any = true;
		}
	}
	printf("%s\n", any ? "" : " (none)");
}

int print_reload(const cJSON *result, const struct ctl_options *o, bool header)
{
	const cJSON *applied = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_APPLIED);
	const cJSON *restart = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_NEEDS_RESTART);
	if (!cJSON_IsArray(applied) || !cJSON_IsArray(restart))
		return ctl_bad_reply(PROTO_F_APPLIED);
	if (o->format == CTL_CSV) {
		const cJSON *k;
		if (header)
			printf("key,status\n");
		cJSON_ArrayForEach(k, applied) printf("%s,applied\n", k->valuestring);
		cJSON_ArrayForEach(k, restart) printf("%s,needs_restart\n", k->valuestring);
		return EXIT_OK;
	}
	print_keys("applied:", applied);
	print_keys("needs a restart:", restart);
	return EXIT_OK;
}

int print_done(const cJSON *result, const struct ctl_options *o, bool header)
{
	if (o->format == CTL_TABLE)
		printf("done\n");
	return EXIT_OK;
}

/* trim [SESSION]: every session's leases, or that one's. */
int params_trim(const struct ctl_options *o, cJSON *params)
{
	return o->nargs ? params_session(o, params) : EXIT_OK;
}

/* "recalled N bytes in M recalls": what trim asked back. */
int print_trim(const cJSON *result, const struct ctl_options *o, bool header)
{
	const cJSON *recalls = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_RECALLS);
	const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_BYTES);
	char size[32];
	uint64_t n;

	if (!cJSON_IsString(recalls) || !cJSON_IsString(bytes) ||
	    ctl_parse_bytes(bytes->valuestring, &n) < 0)
		return ctl_bad_reply(PROTO_F_RECALLS);
	if (o->format == CTL_CSV) {
		if (header)
			printf("recalls,bytes\n");
		printf("%s,%s\n", recalls->valuestring, bytes->valuestring);
		return EXIT_OK;
	}
	ctl_format_size(n, size, sizeof(size));
	printf("recalled %s bytes (%s) in %s recall%s\n", bytes->valuestring, size,
	       recalls->valuestring, strcmp(recalls->valuestring, "1") == 0 ? "" : "s");
	return EXIT_OK;
}

/*
 * Writes text to path atomically: a temporary file in the same directory,
 * then rename(), so node_exporter never reads half a file.
 */
static int write_textfile(const char *path, const char *text)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp))
		return usage_error("--textfile path too long");
	int fd = mkstemp(tmp);
	if (fd < 0) {
		fprintf(stderr, "gpubrokerctl: %s: %s\n", tmp, strerror(errno));
		return EXIT_ERROR;
	}
	size_t len = strlen(text), done = 0;
	while (done < len) {
		ssize_t n = write(fd, text + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		done += (size_t)n;
	}
	/* Readable by the collector, whoever runs it. */
	bool ok = done == len && fchmod(fd, 0644) == 0 && fsync(fd) == 0;
	if (close(fd) < 0)
		ok = false;
	if (!ok || rename(tmp, path) < 0) {
		fprintf(stderr, "gpubrokerctl: %s: %s\n", path, strerror(errno));
		unlink(tmp);
		return EXIT_ERROR;
	}
	return EXIT_OK;
}

int print_metrics(const cJSON *result, const struct ctl_options *o, bool header)
{
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_TEXT);
	if (!cJSON_IsString(text))
		return ctl_bad_reply(PROTO_F_TEXT);
	if (o->textfile)
		return write_textfile(o->textfile, text->valuestring);
	fputs(text->valuestring, stdout);
	return EXIT_OK;
}

int print_version(const cJSON *result, const struct ctl_options *o, bool header)
{
	const cJSON *daemon = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_SERVER_VERSION);
	const cJSON *backend = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_BACKEND);
	if (!cJSON_IsString(daemon) || !cJSON_IsString(backend))
		return ctl_bad_reply(PROTO_F_SERVER_VERSION);
	if (o->format == CTL_CSV) {
		if (header)
			printf("gpubrokerctl,libgpubroker,gpubrokerd,backend\n");
		printf("%s,%s,%s,%s\n", GPB_VERSION, gpb_version(), daemon->valuestring,
		       backend->valuestring);
		return EXIT_OK;
	}
	printf("gpubrokerctl %s\nlibgpubroker %s\ngpubrokerd   %s (backend %s)\n", GPB_VERSION,
	       gpb_version(), daemon->valuestring, backend->valuestring);
	return EXIT_OK;
}
