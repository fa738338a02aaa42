/*
 * export.h - GPB_EXPORT, the mark of libgpubroker's entry points.
 *
 * The library is built with -fvisibility=hidden and a version script; only
 * definitions marked GPB_EXPORT (the gpb_* API) leave the shared object.
 */
#ifndef GPB_CLIENT_EXPORT_H
#define GPB_CLIENT_EXPORT_H

#define GPB_EXPORT __attribute__((visibility("default")))

#endif
