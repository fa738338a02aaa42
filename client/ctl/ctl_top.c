/*
 * ctl_top.c - `gpubrokerctl top` on a terminal: a full-screen live view
 * drawn with ncurses (what ctl_topdata.c computes: each device's bar and
 * partitions, the clients, the events), refreshed every -l seconds.
 *
 * Keys: q quits, s changes the sort column, d shows one device after
 * another (then all again), p pauses (the screen keeps its figures, keys
 * still work). ncurses keeps the terminal as it found it: endwin() on q, on
 * SIGINT (the handler only sets a flag, the loop ends) and on an error.
 * Characters tell the bar's parts apart, so no colour is needed; where the
 * terminal has colours they are added.
 */
#include "config.h"

#include <curses.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"
#include "ctl_topdata.h"
#include "gpubroker.h"
#include "schema.h"

#define TOP_EVENTS 64 /* the event lines kept */

struct top_state {
	struct top_snapshot snap[2]; /* the current one and the one before */
	int cur;
	bool have_prev, paused;
	enum top_sort sort;
	int device; /* -1: all */
	char events[TOP_EVENTS][160];
	int nevents;
	bool colour;
};

static const char top_part_char[TOP_NPARTS] = {'#', '=', '!', '-', '.'};
static const char *const top_part_name[TOP_NPARTS] = {"in use", "leased free", "fenced", "kept",
                                                      "free"};

/* ---- the answers ------------------------------------------------------------------ */

/* One request's parsed result; NULL with *rc set on a failure. */
static cJSON *top_ask(gpb_client *client, const char *method, const char *params, int *rc)
{
	char *text = NULL;

	*rc = gpb_request(client, method, params, &text);
	if (*rc < 0)
		return NULL;
	cJSON *r = cJSON_Parse(text);
	gpb_string_free(text);
	if (!r)
		*rc = GPB_E_PROTOCOL;
	return r;
}

/* A fresh snapshot into the state's next slot. 0, or a GPB_E_* code (the
 * daemon gone, a reply that is not the daemon's). Stats, policy and
 * partitions that the daemon refuses this user are left out. */
static int top_refresh(struct top_state *st, gpb_client *client)
{
	int rc, ignored;
	cJSON *status = top_ask(client, PROTO_M_STATUS, NULL, &rc);
	cJSON *clients = status ? top_ask(client, PROTO_M_CLIENTS, NULL, &rc) : NULL;
	cJSON *stats = clients ? top_ask(client, PROTO_M_STATS, NULL, &ignored) : NULL;
	cJSON *policy = clients ? top_ask(client, PROTO_M_POLICY, NULL, &ignored) : NULL;
	cJSON *parts = clients ? top_ask(client, PROTO_M_PARTITIONS, NULL, &ignored) : NULL;
	int next = st->have_prev ? 1 - st->cur : 0; /* the slot not shown now */

	if (clients &&
	    top_snapshot_fill(&st->snap[next], status, stats, clients, policy, parts) < 0)
		rc = GPB_E_PROTOCOL;
	cJSON_Delete(status);
	cJSON_Delete(clients);
	cJSON_Delete(stats);
	cJSON_Delete(policy);
	cJSON_Delete(parts);
	if (rc < 0)
		return rc;
	return next;
}

static void top_add_event(const char *line, void *arg)
{
	struct top_state *st = arg;
	char stamp[16];
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
	if (st->nevents == TOP_EVENTS) {
		memmove(st->events[0], st->events[1], sizeof(st->events[0]) * (TOP_EVENTS - 1));
		st->nevents--;
	}
	snprintf(st->events[st->nevents++], sizeof(st->events[0]), "%s %s", stamp, line);
}

/* ---- drawing ---------------------------------------------------------------------- */

static void top_size(uint64_t bytes, char *buf, size_t len)
{
	ctl_format_size(bytes, buf, len);
}

static int top_draw_device(const struct top_state *st, const struct top_device *d, int y)
{
	const struct top_snapshot *s = &st->snap[st->cur];
	char total[16], fig[16];
	int cells[TOP_NPARTS], width = COLS - 2;

	top_size(d->total, total, sizeof(total));
	mvprintw(y++, 0, "GPU %d  %s  %s", d->device, d->name, total);
	top_bar_cells(d, width, cells);
	mvaddch(y, 0, '[');
	for (int p = 0, x = 1; p < TOP_NPARTS; p++) {
		if (st->colour)
			attron(COLOR_PAIR(p + 1));
		for (int i = 0; i < cells[p]; i++)
			mvaddch(y, x++, (chtype)top_part_char[p]);
		if (st->colour)
			attroff(COLOR_PAIR(p + 1));
	}
	mvaddch(y++, COLS - 1, ']');
	move(y, 0);
	for (int p = 0; p < TOP_NPARTS; p++) {
		top_size(d->part[p], fig, sizeof(fig));
		printw("%c %s %s  ", top_part_char[p], top_part_name[p], fig);
	}
	printw("refused %llu", (unsigned long long)d->ooms);
	y++;
	for (size_t i = 0; i < s->npartitions; i++) {
		const struct top_partition *p = &s->partitions[i];
		char size[16], used[16];
		if (p->device != d->device)
			continue;
		top_size(p->size, size, sizeof(size));
		top_size(p->used, used, sizeof(used));
		mvprintw(y++, 2, "partition %s (uid %ld): guaranteed %s, used %s", p->name, p->uid,
		         size, used);
	}
	return y;
}

static int top_draw_clients(const struct top_state *st, int y, int last)
{
	const struct top_snapshot *s = &st->snap[st->cur];

	attron(A_BOLD);
	mvprintw(y++, 0, "%7s %6s %-16s %4s %6s %10s %10s %10s %10s %7s %4s %8s %8s", "PID", "UID",
	         "NAME", "INST", "PROP", "CAP", "USED", "LEASED", "IN_USE", "RECALLS", "WAIT",
	         "IDLE", "AGE");
	attroff(A_BOLD);
	for (size_t i = 0; i < s->nclients && y < last; i++) {
		const struct top_client *c = &s->clients[i];
		char cap[16], used[16], leased[16], in_use[16], prop[12], age[16], idle[16];
		top_size(c->cap, cap, sizeof(cap));
		top_size(c->used, used, sizeof(used));
		top_size(c->leased, leased, sizeof(leased));
		top_size(c->in_use, in_use, sizeof(in_use));
		ctl_format_duration(c->age_s, age, sizeof(age));
		ctl_format_duration(c->idle_s, idle, sizeof(idle));
		if (c->proportion >= 0)
			snprintf(prop, sizeof(prop), "%.3g", c->proportion);
		else
			snprintf(prop, sizeof(prop), "%s", c->proportion == -1 ? "auto" : "-");
		mvprintw(y++, 0,
		         "%7ld %6ld %-16.16s %4llu %6s %10s %10s %10s %10s %7llu %4llu %8s %8s",
		         c->pid, c->uid, c->name, (unsigned long long)c->instances, prop, cap, used,
		         leased, in_use, (unsigned long long)c->recalls_pending,
		         (unsigned long long)c->waiting, idle, age);
	}
	if (s->others_clients && y < last) {
		char used[16];
		top_size(s->others_used, used, sizeof(used));
		mvprintw(y++, 0, "        (and %llu clients of other users, %s used)",
		         (unsigned long long)s->others_clients, used);
	}
	return y;
}

static void top_draw(const struct top_state *st)
{
	const struct top_snapshot *s = &st->snap[st->cur];
	char up[16];
	int y = 0;

	erase();
	ctl_format_duration(s->uptime_s, up, sizeof(up));
	attron(A_REVERSE);
	mvprintw(y++, 0, "%-*.*s", COLS, COLS, "gpubroker top  q quit  s sort  d device  p pause");
	attroff(A_REVERSE);
	mvprintw(y++, 0, "daemon pid %ld, up %s, mode %s, %zu clients, sort %s%s%s", s->pid, up,
	         s->mode, s->nclients, top_sort_name(st->sort),
	         st->device >= 0 ? ", one device" : "", st->paused ? "  PAUSED" : "");
	for (size_t i = 0; i < s->ndevices && y < LINES - 4; i++)
		if (st->device < 0 || s->devices[i].device == st->device)
			y = top_draw_device(st, &s->devices[i], y + 1);
	/* The events take the bottom lines, at least 3 and up to 8. */
	int nev = st->nevents < 8 ? st->nevents : 8;
	int events_at = LINES - (nev > 3 ? nev : 3) - 1;
	y = top_draw_clients(st, y + 1, events_at);
	if (events_at > y) {
		attron(A_BOLD);
		mvprintw(events_at, 0, "EVENTS");
		attroff(A_BOLD);
		for (int i = st->nevents - nev, row = events_at + 1; i < st->nevents; i++)
			mvprintw(row++, 0, "%.*s", COLS - 1, st->events[i]);
	}
	refresh();
}

/* ---- the loop --------------------------------------------------------------------- */

static void top_colours(struct top_state *st)
{
	static const short fg[TOP_NPARTS] = {COLOR_RED, COLOR_YELLOW, COLOR_MAGENTA, COLOR_CYAN,
	                                     COLOR_GREEN};

	st->colour = has_colors() && start_color() == OK;
	if (!st->colour)
		return;
	use_default_colors();
	for (int p = 0; p < TOP_NPARTS; p++)
		init_pair((short)(p + 1), fg[p], -1);
}

/* The next device to show alone after @device (-1: all), then all again. */
static int top_next_device(const struct top_snapshot *s, int device)
{
	size_t i = 0;

	if (device >= 0) {
		while (i < s->ndevices && s->devices[i].device != device)
			i++;
		i++;
	}
	return i < s->ndevices ? s->devices[i].device : -1;
}

int ctl_top(gpb_client *client, const struct ctl_options *o, volatile sig_atomic_t *stop)
{
	struct top_state *st = calloc(1, sizeof(*st));
	int rc = 0;

	if (!st)
		return ctl_oom();
	st->device = -1;
	/* newterm, not initscr: an unknown TERM is an error to report, where
	 * initscr would exit. */
	SCREEN *screen = newterm(NULL, stdout, stdin);
	if (!screen) {
		free(st);
		fprintf(stderr, "gpubrokerctl: top: cannot drive this terminal (TERM=%s)\n",
		        getenv("TERM") ? getenv("TERM") : "");
		return EXIT_USAGE;
	}
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
	top_colours(st);
	timeout(100); /* keys are read between refreshes */
	struct timespec last = {0, 0};
	while (!*stop) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		double since =
		    (double)(now.tv_sec - last.tv_sec) + (double)(now.tv_nsec - last.tv_nsec) / 1e9;
		if (!st->paused && (last.tv_sec == 0 || since >= o->interval)) {
			int next = top_refresh(st, client);
			if (next < 0) {
				rc = next;
				break;
			}
			if (st->have_prev)
				top_events(&st->snap[st->cur], &st->snap[next], top_add_event, st);
			st->cur = next;
			st->have_prev = true;
			top_snapshot_sort(&st->snap[st->cur], st->sort);
			last = now;
			top_draw(st);
		}
		int key = getch();
		if (key == 'q' || key == 'Q')
			break;
		if (key == ERR)
			continue;
		if (key == 's')
			st->sort = (st->sort + 1) % TOP_NSORTS;
		else if (key == 'd')
			st->device = top_next_device(&st->snap[st->cur], st->device);
		else if (key == 'p')
			st->paused = !st->paused;
		top_snapshot_sort(&st->snap[st->cur], st->sort);
		top_draw(st);
	}
	endwin();
	delscreen(screen);
	free(st);
	return rc < 0 ? ctl_fail(rc) : EXIT_OK;
}
