/*
 * replay.c - a main() for a fuzz harness built without libFuzzer: runs
 * LLVMFuzzerTestOneInput on every file of the directories (or files) given,
 * so the seed corpus and every crash ever found (tests/fuzz/crashes/) run
 * as an ordinary test under gcc, ASan and valgrind (suite fuzz-replay).
 *
 * Files are run in name order; names starting with '.' are skipped (the
 * .gitkeep of an empty crashes/ directory). A directory that does not exist
 * is an error: a mistyped path must not pass as "nothing to replay".
 * A harness reports a failure by aborting, as it does under libFuzzer.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	size_t cap = 4096, len = 0;
	uint8_t *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			uint8_t *bigger = realloc(buf, cap * 2);
			if (!bigger) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = bigger;
			cap *= 2;
		}
	}
	fclose(f);
	if (!buf) {
		fprintf(stderr, "%s: out of memory\n", path);
		return -1;
	}
	/* An exact-size copy, so ASan sees a read past the input. */
	uint8_t *exact = malloc(len ? len : 1);
	if (!exact) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, len);
	free(buf);
	printf("replay %s (%zu bytes)\n", path, len);
	fflush(stdout);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int skip_dot(const struct dirent *e)
{
	return e->d_name[0] != '.';
}

int main(int argc, char **argv)
{
	int files = 0, failed = 0;
	LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			failed += replay_file(argv[i]) < 0;
			files++;
			continue;
		}
		struct dirent **names;
		int n = scandir(argv[i], &names, skip_dot, by_name);
		if (n < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		for (int k = 0; k < n; k++) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]->d_name);
			failed += replay_file(path) < 0;
			files++;
			free(names[k]);
		}
		free(names);
	}
	printf("%d inputs replayed, %d unreadable\n", files, failed);
	return failed ? 1 : 0;
}
