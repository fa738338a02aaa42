#!/usr/bin/env python3
"""The client's folders are layers (client/meson.build): a file may include
the headers of its own folder and of the folders below it, and a header of
any other client folder must not even be found. This compiles, with the
very flags the build gives each folder (compile_commands.json), a one-line
file that includes each header of every folder that is not below it, and
fails when one of them resolves to that header. A control include of the
folder's own headers must succeed, so that broken flags cannot pass.

usage: check-layers.py SOURCE_ROOT BUILD_ROOT
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

# Folder -> the folders below it, whose headers it may include. ctl/ is a
# program over include/gpubroker.h and proto/ only: no client folder at all.
LAYERS = {
    "client/base": [],
    "client/layout": ["client/base"],
    "client/core": ["client/base"],
    "client": ["client/base", "client/layout", "client/core"],
    "client/ctl": [],
}


def folder_flags(entries, src_root, folder):
    """The compiler command of one C file of @folder, without its
    source, its output and its dependency-file options."""
    want = os.path.join(src_root, folder)
    for e in entries:
        path = os.path.normpath(os.path.join(e["directory"], e["file"]))
        if os.path.dirname(path) != want or not path.endswith(".c"):
            continue
        args, out, skip = shlex.split(e["command"]), [], 0
        for a in args:
            if skip:
                skip -= 1
            elif a in ("-o", "-MQ", "-MF", "-MT", "-c"):
                skip = 1
            elif a in ("-MD", "-MMD"):
                pass
            else:
                out.append(a)
        return e["directory"], out
    sys.exit(f"check-layers: no compile command for a file of {folder}/")


def resolves_to(directory, flags, header, probe_dir):
    """The path @header resolves to under @flags, or None when not found."""
    probe = os.path.join(probe_dir, "probe.c")
    with open(probe, "w") as f:
        f.write(f'#include "{header}"\n')
    r = subprocess.run(flags + ["-M", probe], cwd=directory, capture_output=True,
                       text=True)
    if r.returncode != 0:
        return None
    deps = r.stdout.replace("\\\n", " ").split(":", 1)[1].split()
    for d in deps:
        if os.path.basename(d) == header and os.path.exists(os.path.join(directory, d)):
            return os.path.normpath(os.path.join(directory, d))
    return None


def headers(src_root, folder):
    d = os.path.join(src_root, folder)
    return sorted(h for h in os.listdir(d) if h.endswith(".h"))


def main():
    src_root, build_root = map(os.path.realpath, sys.argv[1:3])
    with open(os.path.join(build_root, "compile_commands.json")) as f:
        entries = json.load(f)
    bad = checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for folder, below in LAYERS.items():
            directory, flags = folder_flags(entries, src_root, folder)
            for h in headers(src_root, folder)[:1]:
                if resolves_to(directory, flags, h, tmp) != os.path.join(src_root, folder, h):
                    print(f"{folder}/: its own {h} does not resolve: bad flags?")
                    bad += 1
            for other in LAYERS:
                if other == folder or other in below:
                    continue
                for h in headers(src_root, other):
                    checked += 1
                    target = os.path.join(src_root, other, h)
                    if resolves_to(directory, flags, h, tmp) == target:
                        print(f"{folder}/ can include {other}/{h}, a layer not below it")
                        bad += 1
    if bad:
        return 1
    print(f"ok: {checked} headers out of reach of the layers below them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
