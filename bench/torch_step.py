"""P8-torch-step (issue 29): a small PyTorch training step with the broker's
allocator (gpubroker.torch.enable(), every tensor a gpb_torch_alloc)
against the same step with PyTorch's own caching allocator, on a GPU, in
one run: each measurement a fresh process (an allocator is chosen before
the first CUDA tensor), the two kinds alternated, the median of each
taken. Target: broker / own <= 1.1.

    python3 bench/torch_step.py [RESULTS.md]

Needs torch with a GPU, and gpubrokerd: $GPUBROKERD (else build/daemon/
gpubrokerd), started here on the cuda backend on a socket of its own;
$GPUBROKER_LIBRARY as for the Python package. Prints a table, and writes
it to RESULTS.md with the machine, date and command when given.
"""

import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

STEP = r"""
import json, sys, time, torch
if sys.argv[1] == "broker":
    import gpubroker.torch as gt
    gt.enable(name="torch-step")
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 2048), torch.nn.ReLU(),
    torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
    torch.nn.Linear(2048, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(512, 1024, device="cuda")
y = torch.randint(0, 10, (512,), device="cuda")

def step():
    opt.zero_grad()  # set_to_none: the gradients are new tensors each step
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()

for _ in range(30):
    step()
torch.cuda.synchronize()
runs = []
for _ in range(5):
    t = time.perf_counter()
    for _ in range(100):
        step()
    torch.cuda.synchronize()
    runs.append((time.perf_counter() - t) / 100)
print(json.dumps({"step_ms": sorted(runs)[2] * 1e3, "device": torch.cuda.get_device_name(),
                  "torch": torch.__version__}))
"""


def start_daemon(tmp):
    daemon = os.environ.get("GPUBROKERD") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "daemon", "gpubrokerd")
    sock = os.path.join(tmp, "gpubroker.sock")
    log = open(os.path.join(tmp, "daemon.log"), "w")
    proc = subprocess.Popen([daemon, "--socket", sock, "--backend", "cuda", "--log-level",
                             "warn"], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        if os.path.exists(sock):
            return proc, sock
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    sys.exit("torch_step: gpubrokerd did not start (see %s)" % log.name)


def measure(kind, sock):
    env = dict(os.environ, GPUBROKER_SOCKET=sock)
    r = subprocess.run([sys.executable, "-c", STEP, kind], env=env, capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        sys.exit("torch_step: the %s run failed:\n%s" % (kind, r.stderr[-3000:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    tmp = tempfile.mkdtemp(prefix="gpb-torch-step-")
    proc, sock = start_daemon(tmp)
    got = {"own": [], "broker": []}
    info = {}
    try:
        for _ in range(3):
            for kind in ("own", "broker"):
                out = measure(kind, sock)
                got[kind].append(out["step_ms"])
                info = out
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    own, broker = statistics.median(got["own"]), statistics.median(got["broker"])
    lines = [
        "# P8-torch-step: a PyTorch training step, the broker's allocator against PyTorch's own",
        "",
        "- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "- machine: %s, %s; torch %s" % (info.get("device"), platform.platform(),
                                         info.get("torch")),
        "- command: `python3 bench/torch_step.py` (3 processes of each kind, alternated; "
        "each the median of 5 runs of 100 steps after 30; a 3-layer MLP, 512x1024 "
        "batch, Adam)",
        "",
        "| allocator | step ms (median) | runs |",
        "|---|---:|---|",
        "| PyTorch's own (caching) | %.3f | %s |" % (own, ", ".join("%.3f" % v for v in got["own"])),
        "| gpubroker (gpb_torch_alloc) | %.3f | %s |" % (
            broker, ", ".join("%.3f" % v for v in got["broker"])),
        "",
        "broker / own: **%.3f** (target <= 1.1)" % (broker / own),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
