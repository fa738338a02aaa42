/*
 * gpu-legacy.h - helpers of the gpu tests of legacy IPC, capacity and
 * device modes (issue 15): another user's process, what a mapping reaches,
 * and the figures `status` gives per device.
 */
#ifndef GPB_GPU_LEGACY_H
#define GPB_GPU_LEGACY_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu-common.h"

#define GL_OTHER_UID 65534u /* nobody */

/* Whether this test can run clients as another user (it runs as root). */
bool gl_can_switch_uid(void);
/* Opens the daemon's socket and the fake's state directory to other users:
 * call after gt_daemon_start(.., "--socket-mode", "0666", ..). */
void gl_open_to_others(const struct gt_daemon *d);
/* In a child: becomes GL_OTHER_UID (group too); fails the test if it cannot. */
void gl_become_other_user(void);

/* A 64-byte marker of @seed: what one client writes and another looks for. */
void gl_marker(unsigned char out[64], unsigned seed);
/* Writes the marker of @seed at @ptr (a context of the device current). */
void gl_write_marker(void *ptr, unsigned seed);
/* Reads everything the driver mapped around @ptr (cuMemGetAddressRange) and
 * says whether the marker of @seed is anywhere in it; *range gets the size
 * of what was mapped. */
bool gl_range_holds_marker(void *ptr, unsigned seed, size_t *range);

/* A u64 (sent as a string) or number field of `status` device @dev. */
uint64_t gl_status_device_u64(gpb_client *c, int dev, const char *field);

#endif
