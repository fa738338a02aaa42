/*
 * Calls the layer table forbids, for check-calls.sh to catch (tests/calls):
 * each written with a prototype by hand, so that no #include shows it and
 * check-layers.sh passes. Never linked into anything.
 */

/* Dispatch may not use conf (conf sits beside it, under the server): a
 * sideways call that a ranking of the modules in a line would let pass. */
const char *conf_key_name(int key);
const char *calls_dispatch_to_conf(void);

const char *calls_dispatch_to_conf(void)
{
	return conf_key_name(0);
}
