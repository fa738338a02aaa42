/*
 * backend_cuda_dev.h - the cuda backend's device checks (backend_cuda_dev.c):
 * which devices it may serve, and how much of each it may hand out.
 */
#ifndef GPB_BACKEND_CUDA_DEV_H
#define GPB_BACKEND_CUDA_DEV_H

#include <stddef.h>

#include "backend.h"
#include "cudaapi.h"

/*
 * Whether the daemon may serve a device in compute mode @mode, @mps when
 * the daemon is an MPS client of it (CU_DEVICE_ATTRIBUTE_MPS_ENABLED):
 * false, with the reason in @why, for exclusive-process outside MPS (the
 * daemon's own context would keep every client's off the device) and
 * prohibited (nobody may have a context on it).
 */
bool cuda_dev_mode_ok(int mode, bool mps, char *why, size_t len);

/*
 * What of the device the broker keeps out of its capacity (info->in_use and
 * info->reserve): the memory in use when the daemon started (@total -
 * @free_bytes, measured with the daemon's own context made), and the reserve
 * for clients' contexts: cfg->reserve when it was given, else the default
 * bounded by a quarter of the device. Logs both.
 */
void cuda_dev_budget(int ordinal, size_t free_bytes, size_t total, const struct backend_config *cfg,
                     struct backend_device_info *info);

/* Logs which users' processes can open the legacy IPC handles this daemon
 * makes (allocator pool, direct, and the legacy transport). */
void cuda_dev_log_ipc_users(void);

#endif
