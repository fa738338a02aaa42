/*
 * list.h - intrusive doubly linked lists (the wl_list/Linux shape).
 */
#ifndef GPB_LIST_H
#define GPB_LIST_H

#include <stddef.h>

struct list {
	struct list *prev, *next;
};

static inline void list_init(struct list *head)
{
	head->prev = head->next = head;
}

static inline int list_empty(const struct list *head)
{
	return head->next == head;
}

static inline void list_insert_tail(struct list *head, struct list *node)
{
	node->prev = head->prev;
	node->next = head;
	head->prev->next = node;
	head->prev = node;
}

static inline void list_remove(struct list *node)
{
	node->prev->next = node->next;
	node->next->prev = node->prev;
	node->prev = node->next = node;
}

#define list_entry(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* Every node of head in order; the loop body must not remove pos. */
#define list_for_each(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

/* Safe against removal of the current entry. */
#define list_for_each_safe(pos, tmp, head)                                                         \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);                           \
	     (pos) = (tmp), (tmp) = (pos)->next)

#endif
