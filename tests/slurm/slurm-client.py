"""The slurm suite's Python client: run by `srun --gpu-mem=SIZE`, the
gpubroker package finds the job's partition by itself (GPUBROKER_TOKEN and
GPUBROKER_SOCKET, through libgpubroker's gpb_connect): the device's total is
SIZE, SIZE can be allocated and not a byte more (OutOfMemoryError, or
QuotaError in active mode). Prints "python ok" when every check holds."""
import sys

import gpubroker

size = int(sys.argv[1])
with gpubroker.Client(name="slurm-python") as c:
    inst = c.register("py", device=0)
    info = c.mem_info(inst)
    if info.device_total != size:
        sys.exit(f"the device's total is {info.device_total}, not the partition's {size}")
    whole = c.alloc(inst, size)
    try:
        c.alloc(inst, 1 << 20)
    except (gpubroker.OutOfMemoryError, gpubroker.QuotaError):
        pass
    else:
        sys.exit(f"allocated past a {size}-byte partition")
    whole.free()
print("python ok")
