/*
 * A call the layer table forbids, for check-calls.sh to catch (tests/calls):
 * gpubrokerctl is a program over the public header, so a call into the
 * library's connection core (which the shared library does not export) is a
 * sideways call, written here with a prototype by hand. Never linked.
 */
#include <stdint.h>

struct gpb_client;
int client_call_id(struct gpb_client *c, const char *method, const char *key, uint64_t id);
int calls_ctl_to_core(struct gpb_client *c);

int calls_ctl_to_core(struct gpb_client *c)
{
	return client_call_id(c, "status", "id", 1);
}
