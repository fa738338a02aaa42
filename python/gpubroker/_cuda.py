"""What the framework bridges ask the CUDA driver directly (ctypes, no
framework): a device's UUID whole, as the daemon names devices."""

import ctypes


def format_uuid(raw):
    """16 bytes in nvidia-smi's form: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"."""
    h = bytes(raw).hex()
    return "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def driver_uuid(device):
    """The UUID of CUDA device @device (an ordinal: the frameworks' and the
    driver's agree, both honour CUDA_VISIBLE_DEVICES), asked of the driver
    (cuDeviceGetUuid_v2, all 16 bytes), or None where it does not answer."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev = ctypes.c_int(0)
    raw = (ctypes.c_ubyte * 16)()
    get_uuid = getattr(cu, "cuDeviceGetUuid_v2", None) or getattr(cu, "cuDeviceGetUuid", None)
    if (get_uuid is None or cu.cuInit(0) != 0
            or cu.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(device)) != 0
            or get_uuid(ctypes.byref(raw), dev) != 0):
        return None
    return format_uuid(raw)
