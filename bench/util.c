/*
 * util.c - clocks, a seedable generator, quantiles and I/O helpers.
 */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

bool bench_verbose;

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void bench_sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
	                      .tv_nsec = (long)(ns % 1000000000ull)};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

uint64_t bench_rng_next(struct bench_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t bench_rng_below(struct bench_rng *r, uint64_t n)
{
	/* Multiply-shift: no modulo bias worth speaking of for n << 2^64. */
	return (uint64_t)(((unsigned __int128)bench_rng_next(r) * n) >> 64);
}

double bench_rng_unit(struct bench_rng *r)
{
	return (double)(bench_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t bench_rng_loguniform(struct bench_rng *r, uint64_t lo, uint64_t hi)
{
	double l = log((double)lo), h = log((double)hi);
	uint64_t v = (uint64_t)exp(l + (h - l) * bench_rng_unit(r));

	return v < lo ? lo : v > hi ? hi : v;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_quantile(double *v, size_t n, double q)
{
	size_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	i = (size_t)ceil(q * (double)n);
	return v[i ? i - 1 : 0];
}

double bench_median(double *v, size_t n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void bench_die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "gpb-bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

void bench_log(const char *fmt, ...)
{
	va_list ap;

	if (!bench_verbose)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void *bench_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		bench_die("out of memory (%zu bytes)", n);
	return p;
}

void *bench_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p)
		bench_die("out of memory (%zu x %zu bytes)", n, size);
	return p;
}

int bench_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int bench_read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
