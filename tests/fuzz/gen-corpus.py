#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz harnesses (tests/fuzz/corpus/<harness>/)
and the protocol dictionary (tests/fuzz/protocol.dict).

The seeds are small and readable: valid requests for every operation and the
bad inputs of the design list (docs/reliability.md, "Bad inputs"), each
in the input format of its harness (see the comment at the top of each
fuzz-*.c). Run it after changing a format or adding an operation; the files
it writes are committed. Files it did not write are left alone (libFuzzer's
own finds may be merged into the corpus too).
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- protocol: fuzz-protocol.c ------------------------------------------------
# header: flags, flags2, chunk seed; stream A; optional 0x1e + stream B.
ADMIN_A, ADMIN_B, SAME_UID, HALF_CLOSE, CANCEL, NO_DRAIN, SMALL_BUF, CLOSE_A_EARLY = (
    1 << i for i in range(8))
ACTIVE, ONE_PER_UID, RELOAD_FAILS, FLOOD, BIG_SHARE, ONE_DEVICE, BYTEWISE, INTERLEAVE = (
    1 << i for i in range(8))

I1 = "0000000000000001"
I2 = "0000000000000002"


def req(rid, method, params=None):
    r = {"id": rid, "method": method}
    if params is not None:
        r["params"] = params
    return json.dumps(r, separators=(",", ":")) + "\n"


def hello(client="fuzz"):
    return req("h", "hello", {"versions": [1], "client": client})


def register(name="a", device=0, **kw):
    return req("r" + name, "register", dict({"name": name, "device": device}, **kw))


def alloc(size="4096", inst=I1, rid="a", **kw):
    return req(rid, "alloc", dict({"instance": inst, "size": size}, **kw))


def lease(size="4096", inst=I1, rid="l", **kw):
    return req(rid, "lease", dict({"instance": inst, "size": size}, **kw))


WAIT = "".join(req("w%d" % i, "status") for i in range(3))


def carve(lease_ref, offset, size, rid="c"):
    return req(rid, "lease_carve", {"lease": lease_ref, "offset": offset, "size": size})


QREQ = [{"label": "state", "shape": [100000, 4], "elem_size": 8},
        {"label": "params", "shape": [64], "elem_size": 8, "unchunkable": True}]


OPS = {
    "hello": hello(),
    "register": hello() + register() + register("m", 1, proportion=0.25, group="g"),
    "unregister": hello() + register() + req("u", "unregister", {"instance": I1}),
    "alloc": hello() + register() + alloc() + alloc("1000", alignment="65536"),
    "alloc-host": hello() + register() + alloc("100000", type="pinned")
    + alloc("5000", rid="a2", type="mapped") + req("f", "free", {"id": "$0"})
    + alloc("1", rid="a3", type="managed") + alloc("99999999999", rid="a4", type="pinned"),
    "free": hello() + register() + alloc() + req("f", "free", {"id": "$0"}),
    "attach": hello() + register() + alloc() + req("t", "attach", {"id": "$0"}),
    "detach": hello() + register() + alloc() + req("t", "attach", {"id": "$0"})
    + req("d", "detach", {"id": "$1"}),
    "mem_info": hello() + register() + alloc() + req("m", "mem_info")
    + req("m2", "mem_info", {"instance": I1}),
    "stats": hello() + alloc() + req("s", "stats") + req("s0", "stats", {"device": 0}),
    "status": hello() + req("s", "status"),
    "clients": hello() + req("c", "clients"),
    "devices": hello() + req("d", "devices"),
    "reload": hello() + req("r", "reload"),
    "metrics": hello() + register() + alloc() + req("m", "metrics"),
    "policy": hello() + register() + register("b", proportion=0.5) + req("p", "policy"),
    "set_proportion": hello() + register() + req("p", "set_proportion",
                                                 {"instance": I1, "proportion": 0.5}),
    "set_auto": hello() + register(proportion=0.5) + req("p", "set_auto", {"instance": I1}),
    "set_group": hello() + register() + req("g", "set_group", {"instance": I1, "group": "x"}),
    "group_info": hello() + register(group="x") + alloc() + req("g", "group_info", {"group": "x"}),
    "set_mode": hello() + register() + req("m", "set_mode", {"mode": "active"})
    + req("m2", "set_mode", {"mode": "passive"}),
    "set_limit": hello() + register() + req("l", "set_limit", {"fraction": 0.5})
    + req("l2", "set_limit", {"size": "8388608", "device": 1}) + req("l3", "set_limit", {"size": "0"}),
    "queue_request": hello() + register(group="s") + req("q", "queue_request", {"instance": I1, "requests": QREQ}),
    "allocate_queue": hello() + register(group="s") + register("b", group="s")
    + req("q", "queue_request", {"instance": I1, "requests": QREQ})
    + req("q2", "queue_request", {"instance": I2, "requests": [{"label": "x", "shape": [5000], "elem_size": 4}]})
    + req("a", "allocate_queue", {"instance": I1}),
    "claim": hello() + register(group="s") + req("q", "queue_request", {"instance": I1, "requests": QREQ})
    + req("a", "allocate_queue", {"instance": I1}) + req("c", "claim", {"id": "$0"})
    + req("c2", "claim", {"id": "$1"}) + req("c3", "claim", {"id": "$0"}),
    "free_label": hello() + register(group="s") + req("q", "queue_request", {"instance": I1, "requests": QREQ})
    + req("a", "allocate_queue", {"instance": I1}) + req("c", "claim", {"id": "$0"})
    + req("f", "free_label", {"label": "state"}) + req("f2", "free_label", {"label": "params", "instance": I1}),
    "chunk_parameters": hello() + register(group="s")
    + req("c", "chunk_parameters", {"requests": QREQ, "available": "1048576"})
    + req("c2", "chunk_parameters", {"requests": QREQ, "group": "s", "axis_length": 1000}),
    "invalidate_all": hello() + register() + alloc() + req("t", "attach", {"id": "$0"})
    + req("i", "invalidate_all"),
    "set_allocator": hello() + register() + alloc() + req("s", "set_allocator", {"allocator": "direct"})
    + alloc(rid="a2") + req("f", "free", {"id": "$0"}) + req("s2", "set_allocator", {"allocator": "async"})
    + req("s3", "set_allocator", {"allocator": "pool"}),
    "evict": hello() + req("c", "clients") + req("e", "evict", {"session": "0000000000000002"})
    + req("e2", "evict", {"session": "0000000000000001"}),
    "selfcheck": hello() + register() + alloc() + req("s", "selfcheck"),
    "export": hello() + register() + alloc("2097152")
    + req("x", "export", {"id": "$0", "name": "big", "uid": 2000})
    + req("x2", "export", {"id": "$0", "name": "m"}) + alloc(rid="a2")
    + req("x3", "export", {"id": "$0", "name": "n", "uid": 2000}),
    "unexport": hello() + register() + alloc() + req("x", "export", {"id": "$0", "name": "n"})
    + req("u", "unexport", {"name": "n"}) + req("u2", "unexport", {"name": "n"}),
    "open": hello() + register() + alloc() + req("x", "export", {"id": "$0", "name": "n"})
    + req("o", "open", {"name": "n"}) + req("f", "free", {"id": "$0"}) + req("s", "selfcheck")
    + req("d", "detach", {"id": "$0"}),
    # Leases: "$0" is the newest id a reply carried (a lease's, a carve's).
    "lease": hello() + register() + lease(in_use="0") + lease("1", rid="l2", in_use="4096")
    + lease("5000000", rid="l3") + req("m", "mem_info") + req("s", "stats")
    + req("r", "lease_return", {"lease": "$0"}) + req("r2", "lease_return", {"lease": "$0"}),
    "lease_return": hello() + register() + lease() + req("f", "free", {"id": "$0"})
    + req("r", "lease_return", {"lease": "$0", "in_use": "100"})
    + req("r2", "lease_return", {"lease": "$0"})
    + req("r3", "lease_return", {"lease": "0123456789abcdef"}),
    # (status requests between the steps: their replies come before the
    # next "$N" is sent, so it names what the step before was given.)
    "lease_carve": hello() + register() + lease() + WAIT + carve("$0", "0", "1000") + WAIT
    + carve("$1", "4096", "4096", rid="c2") + WAIT + carve("$2", "512", "1", rid="c3")
    + req("r", "lease_return", {"lease": "$2"}) + req("f", "free", {"id": "$0"})
    + req("f2", "free", {"id": "$1"}) + WAIT + req("r2", "lease_return", {"lease": "$2"}),
}


def protocol_corpus():
    out = {}

    def put(name, a, b=None, flags=0, flags2=0, seed=1):
        data = bytes([flags, flags2, seed]) + a.encode("latin-1")
        if b is not None:
            data += b"\x1e" + b.encode("latin-1")
        out[name] = data

    for op, stream in OPS.items():
        admin = ADMIN_A if op in ("reload", "set_mode", "set_limit", "invalidate_all",
                                  "set_allocator", "evict", "selfcheck", "open") else 0
        put("op-" + op, stream, flags=admin)
    put("op-set_mode-not-admin", OPS["set_mode"])
    # A carve another connection opened outlives its lease's connection
    # (an orphan lease), and leases under allocator direct are refused.
    put("lease-carve-shared", hello() + register() + lease() + WAIT + carve("$0", "0", "65536")
        + WAIT + req("x", "export", {"id": "$0", "name": "c"}) + lease("1", rid="l2"),
        hello("b") + WAIT * 4 + req("o", "open", {"name": "c"}) + WAIT + req("m", "mem_info")
        + req("c", "clients") + req("d", "detach", {"id": "$0"}), flags=SAME_UID,
        flags2=INTERLEAVE, seed=25)
    put("lease-direct", hello() + register() + lease() + req("s", "set_allocator", {"allocator": "direct"})
        + lease(rid="l2") + req("s2", "set_allocator", {"allocator": "pool"}) + lease(rid="l3"),
        flags=ADMIN_A)
    put("lease-quota", hello() + register(proportion=0.25) + "".join(lease("1", rid="q%d" % i)
                                                                     for i in range(6)),
        flags2=ACTIVE)
    put("lease-close-with-carves", hello() + register() + lease() + carve("$0", "0", "256")
        + carve("$1", "256", "256", rid="c2"), flags=NO_DRAIN | CLOSE_A_EARLY)
    put("op-reload-fails", OPS["reload"], flags=ADMIN_A, flags2=RELOAD_FAILS)

    # Two clients: another uid's allocation, same-uid attach, cap changes
    # pushed to the other connection, waits served by the other's free.
    b_side = hello("b") + register("b") + alloc(inst=I2, rid="b1")
    put("two-clients", hello() + register() + alloc(), b_side)
    put("two-clients-same-uid-attach", hello() + register() + alloc(),
        hello("b") + req("t", "attach", {"id": "$0"}) + req("d", "detach", {"id": "$0"}),
        flags=SAME_UID)
    # Sharing: B opens what A exported, A frees it (an orphan) or goes away
    # while B holds it; another uid opens a whole-slab allocation.
    put("share-orphan", hello() + register() + alloc() + req("x", "export", {"id": "$0", "name": "n"})
        + req("f", "free", {"id": "$0"}),
        hello("b") + req("o", "open", {"name": "n"}) + req("m", "mem_info"), flags=SAME_UID, flags2=INTERLEAVE)
    put("share-other-uid", hello() + register() + alloc("2097152")
        + req("x", "export", {"id": "$0", "name": "n", "uid": 2000}),
        hello("b") + req("o", "open", {"name": "n"}) + req("d", "detach", {"id": "$0"})
        + req("o2", "open", {"name": "n"}))
    put("two-clients-other-uid-free", hello() + register() + alloc(),
        hello("b") + req("f", "free", {"id": "$0"}) + req("t", "attach", {"id": "$0"}))
    put("two-clients-cap-changed", hello() + register() + register("c", proportion=0.5),
        hello("b") + register("b", proportion=0.3) + req("m", "set_mode", {"mode": "active"}),
        flags=ADMIN_B)
    full = "".join(alloc("2097152", rid="f%d" % i) for i in range(8))
    put("wait-served-by-free", hello() + register() + full + alloc("2097152", wait_ms=60000, rid="w")
        + req("f", "free", {"id": "$1"}), flags2=ONE_DEVICE)
    put("wait-cancelled", hello() + register() + full + alloc("2097152", wait_ms=60000, rid="w"),
        flags=CANCEL, flags2=ONE_DEVICE)
    put("wait-quota", hello() + register(proportion=0.1) + alloc("2097152") +
        alloc("2097152", wait_ms=1000, rid="w"), flags=CANCEL, flags2=ACTIVE)
    put("two-clients-interleaved", hello() + register() + "".join(alloc(rid="a%d" % i) for i in range(6)),
        hello("b") + register("b", proportion=0.5) + "".join(alloc(inst=I2, rid="b%d" % i) for i in range(6))
        + req("f", "free", {"id": "$0"}), flags2=INTERLEAVE, seed=9)
    put("wait-then-close", hello() + register() + full + alloc("2097152", wait_ms=60000, rid="w"),
        hello("b") + register("b") + alloc(inst=I2, size="1024", wait_ms=5, rid="w2"),
        flags2=ONE_DEVICE)
    put("evict-other", hello() + req("e", "evict", {"session": "0000000000000002"}) + req("s", "status"),
        hello("b") + register("b") + alloc(inst="0000000000000001", rid="b1"), flags=ADMIN_A | SAME_UID,
        flags2=INTERLEAVE, seed=5)
    put("invalidate-other", hello() + register() + alloc(),
        hello("b") + req("t", "attach", {"id": "$0"}) + req("i", "invalidate_all") + req("s", "selfcheck"),
        flags=ADMIN_B | SAME_UID)
    put("limit-per-uid", hello(), hello("b"), flags=SAME_UID, flags2=ONE_PER_UID)
    put("limit-max-clients", hello(), hello("b"), flags2=ONE_PER_UID)
    # Events for a client that is paused pile up past four write_high_water
    # marks (512 bytes here: the seed's top bit) and get it dropped.
    put("paused-events-dropped", hello() + register() + "".join(req("m%d" % i, "metrics") for i in range(3)),
        hello("b") + "".join(register("b%d" % i, proportion=0.1) + req("u%d" % i, "unregister",
                                                                      {"instance": "%016x" % (i + 2)})
                             for i in range(20)),
        flags=NO_DRAIN | SMALL_BUF, flags2=ACTIVE, seed=0x80 | 3)
    # 0x1d: the chunk carries a descriptor (the daemon closes the connection).
    put("client-sends-fd", hello() + req("s", "status") + "\x1d" + req("s2", "status"), hello("b"),
        flags2=INTERLEAVE)
    put("active-quota", hello() + register(proportion=0.25) + alloc("8388608") + alloc("8388608"),
        flags2=ACTIVE)
    put("auto-pool-full", hello() + register() + register("b") + register("c") + register("d"),
        flags2=BIG_SHARE)
    put("max-allocations", hello() + register() + "".join(alloc("256", rid="x%d" % i) for i in range(14)))
    put("max-instances", hello() + "".join(register("n%d" % i) for i in range(6)))

    # The bad-input list of docs/design.md (the cases a connection can carry).
    A = hello() + register()
    put("bad-01-never-hello", "")
    put("bad-02-no-frame-end-past-cap", "{\"id\":\"x\",\"method\":\"", flags2=FLOOD)
    put("bad-03-one-byte-at-a-time", A + alloc(), flags2=BYTEWISE)
    put("bad-04-many-frames-one-read", A + "".join(req("s%d" % i, "stats") for i in range(40)),
        seed=7)
    put("bad-05-split-at-delimiter", hello() + req("s", "status").rstrip("\n") + "\n\n", seed=3)
    put("bad-06-empty-whitespace-lines", "\n\n   \n\t\r\n" + hello() + " \n\r\n")
    put("bad-07-truncated-json", hello() + "{\"1\":1,\n" + req("s", "status"))
    put("bad-08-trailing-garbage", hello() + "{}x\n" + req("s", "status") + "{\"id\":\"1\"} {}\n")
    put("bad-09-top-level-not-object", hello() + "[1,2]\n\"str\"\n42\nnull\ntrue\n[]\n")
    put("bad-10-deep-nesting", hello() + "[" * 10000 + "]" * 10000 + "\n"
        + "{\"a\":" * 20 + "1" + "}" * 20 + "\n")
    put("bad-11-nul", hello() + "{\"id\":\"a\u0000b\",\"method\":\"status\"}\n"
        + "{\"id\":\"a\\u0000b\",\"method\":\"status\"}\n")
    put("bad-12-invalid-utf8", hello() + "{\"id\":\"\xc3\x28\",\"method\":\"status\"}\n"
        + "{\"id\":\"\\ud800\",\"method\":\"status\"}\n"
        + "{\"id\":\"\xed\xa0\x80\",\"method\":\"status\"}\n"
        + "{\"id\":\"\xc0\xaf\",\"method\":\"status\"}\n"
        + "{\"id\":\"\xf4\x90\x80\x80\",\"method\":\"status\"}\n")
    put("bad-13-duplicate-keys-case", hello()
        + "{\"id\":\"1\",\"id\":\"2\",\"method\":\"status\"}\n"
        + "{\"id\":\"3\",\"Method\":\"status\"}\n"
        + "{\"id\":\"4\",\"method\":\"STATUS\"}\n")
    wrong = []
    for field, vals in {
        "versions": ["1", 1, None, {}, [[1]], ["1"], [1.5], [-1]],
    }.items():
        for v in vals:
            wrong.append(req("v", "hello", {field: v}))
    for params in [
        {"name": 1}, {"name": ""}, {"name": "x" * 65}, {"name": "a", "device": "0"},
        {"name": "a", "device": 99}, {"name": "a", "device": -1}, {"name": "a", "device": 0.5},
        {"name": "a", "proportion": "0.5"}, {"name": "a", "proportion": 0},
        {"name": "a", "proportion": 1.5}, {"name": "a", "group": 7}, {"name": "a", "group": ""},
    ]:
        wrong.append(req("w", "register", params))
    for params in [
        {"instance": 1, "size": "1"}, {"instance": I1, "size": 1}, {"instance": I1},
        {"size": "1"}, {"instance": I1, "size": "1", "alignment": 256},
        {"instance": I1, "size": "1", "alignment": "3"},
        {"instance": I1, "size": "1", "alignment": "4194304"},
        {"instance": I1, "size": "1", "type": "managed"}, {"instance": I1, "size": "1", "type": 1},
        {"instance": I1, "size": "1", "type": "pinned"},
        {"instance": I1, "size": "1", "wait_ms": "5"}, {"instance": I1, "size": "1", "wait_ms": -1},
        {"instance": "000000000000000G", "size": "1"}, {"instance": "1", "size": "1"},
    ]:
        wrong.append(req("w", "alloc", params))
    for params in [
        {"instance": I1, "size": "0"}, {"instance": I1}, {"instance": I1, "size": 1},
        {"instance": I1, "size": "1", "in_use": -1}, {"instance": I1, "size": "99999999999"},
        {"size": "1"}, {"instance": I1, "size": "18446744073709551615", "in_use": "1"},
    ]:
        wrong.append(req("w", "lease", params))
    wrong += [req("w", "lease_return", {"lease": 5}), req("w", "lease_return", {}),
              req("w", "lease_carve", {"lease": I1, "offset": "100", "size": "1"}),
              req("w", "lease_carve", {"lease": I1, "offset": 0, "size": "1"}),
              req("w", "lease_carve", {"lease": I1, "offset": "0", "size": "0"})]
    wrong += [req("w", "free", {"id": 5}), req("w", "free", {}), req("w", "attach", {"id": None}),
              req("w", "mem_info", {"instance": []}), req("w", "stats", {"device": "0"}),
              req("w", "set_mode", {"mode": "ACTIVE"}), req("w", "set_limit", {"size": "1", "fraction": 0.5}),
              req("w", "set_limit", {}), req("w", "group_info", {"group": 1}),
              req("w", "set_proportion", {"instance": I1, "proportion": "1"}),
              "{\"id\":\"w\",\"method\":\"status\",\"params\":[]}\n",
              "{\"id\":\"w\",\"method\":\"status\",\"params\":\"x\"}\n"]
    put("bad-14-wrong-types", A + "".join(wrong), flags=ADMIN_A)
    sizes = ["0", "-1", "+1", " 1", "1e9", "0x10", "18446744073709551616", "1" * 25, "01", "",
             "1 ", "18446744073709551615"]
    put("bad-15-size-forms", A + "".join(alloc(s, rid="z%d" % i) for i, s in enumerate(sizes)))
    put("bad-16-size-above-memory", A + alloc("17179869184") + alloc("16777216") + alloc("16777217")
        + alloc("18446744073709551360") + alloc("9223372036854775808")
        + "".join(alloc("8388608", rid="t%d" % i) for i in range(4)), flags2=ACTIVE)
    put("bad-17-method-state-version", req("1", "status") + req("2", "hello", {"versions": [2, 3]})
        + hello() + hello() + req("3", "no_such_method") + req("4", "") + req("5", "x" * 100))
    put("bad-18-ids", hello() + "{\"id\":\"" + "i" * 60000 + "\",\"method\":\"status\"}\n"
        + "{\"id\":\"" + "i" * 65 + "\",\"method\":\"status\"}\n"
        + "{\"id\":7,\"method\":\"status\"}\n{\"method\":\"status\"}\n{\"id\":\"\",\"method\":\"status\"}\n"
        + "{\"id\":null,\"method\":\"status\"}\n{\"id\":[\"a\"],\"method\":\"status\"}\n")
    put("bad-19-free-unknown-double-stale", A + alloc() + req("f", "free", {"id": "$0"})
        + req("f2", "free", {"id": "$0"}) + req("f3", "free", {"id": "0123456789abcdef"})
        + req("f4", "detach", {"id": "$0"}) + req("f5", "attach", {"id": "$0"}))
    put("bad-20-close-before-reply", A + alloc() + alloc("8192"), flags=NO_DRAIN | CLOSE_A_EARLY)
    put("bad-21-half-close", A + alloc() + req("s", "status"), flags=HALF_CLOSE)
    put("bad-22-never-reads", A + "".join(req("m%d" % i, "metrics") for i in range(30)),
        flags=NO_DRAIN | SMALL_BUF)
    put("bad-30-gone-before-reply", A + "".join(req("p%d" % i, "policy") for i in range(10)),
        hello("b"), flags=NO_DRAIN | SMALL_BUF | CLOSE_A_EARLY)
    cycles = "".join(alloc("65536", rid="c%d" % i) + req("f%d" % i, "free", {"id": "$0"})
                     for i in range(100))
    put("bad-31-alloc-free-cycles", A + cycles)
    return out


# ---- conf: fuzz-conf.c (the file's text) -------------------------------------------
def conf_corpus():
    out = {}
    full = "\n".join([
        "# every key", "backend = sim", "socket = /run/gpubroker/gpubroker.sock",
        "socket_mode = 0660", "socket_group = gpubroker", "admin_group = gpubroker-admin",
        "sim_devices = 2", "sim_memory = 16GiB", "slab_size = 64MiB", "log_level = debug",
        "max_clients = 1024", "max_clients_per_uid = 256", "max_instances = 64",
        "max_allocations = 65536", "hello_timeout_ms = 10000", "write_high_water = 4MiB", ""])
    out["valid-every-key"] = full
    out["valid-empty"] = ""
    out["valid-comments-blanks"] = "# c\n\n   \t\n  backend=auto  # trailing\r\n"
    out["valid-sizes"] = "sim_memory = 1TiB\nslab_size = 2MiB\nwrite_high_water = 4096\n"
    out["valid-no-final-newline"] = "log_level = warn"
    bad = {
        "unknown-key": "bakend = sim\n",
        "no-equals": "backend sim\n",
        "no-key": "= sim\n",
        "twice": "backend = sim\nbackend = cuda\n",
        "bad-backend": "backend = gpu\n",
        "bad-mode": "socket_mode = 0999\n",
        "mode-too-big": "socket_mode = 01777\n",
        "slab-not-multiple": "slab_size = 3MiB\n",
        "size-units": "sim_memory = 16 GiB\nsim_memory = 16gb\n",
        "size-overflow": "sim_memory = 99999999999999999999999TiB\n",
        "negative": "max_clients = -1\n",
        "zero": "max_instances = 0\n",
        "too-big": "sim_devices = 65\n",
        "empty-socket": "socket =\n",
        "long-line": "socket = /" + "x" * 600 + "\n",
        "long-group": "admin_group = " + "g" * 64 + "\n",
        "nul": "backend = s\0im\n",
        "bad-level": "log_level = verbose\n",
        "hex": "max_clients = 0x10\n",
        "plus": "max_clients = +5\n",
        "spaces-in-number": "max_clients = 1 0\n",
    }
    for k, v in bad.items():
        out["bad-" + k] = v
    return {k: v.encode("latin-1") for k, v in out.items()}


# ---- pool: fuzz-pool.c --------------------------------------------------------
def pool_corpus():
    # header: slab choice, keep_empty, large threshold, capacity; then ops
    # (0/1 alloc uid sel lo hi align, 2/3 free i, 4 pin i, 5 unpin i,
    #  6 trim t, 7 fail e).
    def a(uid, sel, v, align=0):
        return bytes([0, uid, sel]) + struct.pack("<H", v) + bytes([align])
    out = {}
    out["alloc-free"] = bytes([0, 1, 0, 16]) + a(0, 0, 1000) + a(1, 0, 300) + bytes([2, 0, 2, 0])
    out["many-uids"] = bytes([1, 1, 200, 63]) + b"".join(a(u, 0x40 | 8, 100 + u, 130 + u)
                                                         for u in range(4) for _ in range(3))
    out["pin-unpin-trim"] = bytes([0, 0, 0, 8]) + a(0, 0, 4096) + bytes([4, 0, 2, 0, 6, 0x80, 5, 0, 6, 0])
    out["large-dedicated"] = bytes([0, 1, 255, 63]) + a(0, 0x40 | 20, 5) + a(0, 0x40 | 22, 1) + bytes([2, 0, 2, 0])
    out["oom-and-failure"] = bytes([3, 2, 0, 2]) + bytes([7, 1]) + a(0, 0, 4096) + bytes([7, 0]) \
        + a(0, 0x40 | 22, 1) + a(0, 0xc0, 5) + a(2, 0xc0, 6)
    out["bad-requests"] = bytes([0, 0, 0, 4]) + a(0, 0xc0, 0) + a(0, 0, 10, 250) + a(0, 0, 10, 255) \
        + a(0, 0xc0, 5, 135)
    out["fragment"] = bytes([0, 1, 0, 8]) + b"".join(a(i % 2, 0, 700 + 37 * i) for i in range(40)) \
        + b"".join(bytes([2, 3 * i]) for i in range(20))
    return out


# ---- policy: fuzz-policy.c -----------------------------------------------------
def policy_corpus():
    # header: devices, totals (one byte each), mode|share; then op, slot, args.
    out = {}
    hdr2 = bytes([1, 63, 63, 1])  # 2 devices of 64 MiB, active
    reg = lambda s, dev, prop=None, g=0: bytes([0, s, dev]) + (
        bytes([1, prop]) if prop is not None else bytes([0])) + bytes([g])
    out["register-auto-manual"] = hdr2 + reg(0, 0) + reg(1, 0, 50) + reg(2, 0) + reg(3, 1, 199)
    out["over-one"] = hdr2 + reg(0, 0, 150) + reg(1, 0, 150) + bytes([3, 0, 199])
    out["auto-minimum"] = bytes([0, 63, 1 | (6 << 1)]) + reg(0, 0) + reg(1, 0) + reg(2, 0) + bytes([4, 0])
    out["admit-charge"] = hdr2 + reg(0, 0, 100) + bytes([8, 0, 0x40 | 20, 1, 0]) \
        + bytes([8, 0, 0x40 | 26, 1, 0]) + bytes([10, 0, 0, 0, 1]) + bytes([2, 0])
    out["mode-limit"] = hdr2 + reg(0, 0) + reg(1, 1, 100) + bytes([6, 0, 0, 7, 0, 2, 100]) \
        + bytes([7, 0, 0, 1, 0x40 | 20, 1, 0]) + bytes([6, 0, 1]) + bytes([11, 0])
    out["groups"] = hdr2 + reg(0, 0, g=3) + reg(1, 1, g=3) + bytes([5, 0, 1, 5, 1, 4, 5, 1, 5, 11, 3])
    out["chunking"] = bytes([0, 63, 0]) + bytes([11, 0]) + bytes([2, 0x02, 4, 0, 100, 0, 50, 4, 4, 0x81, 8, 0, 10]) \
        + bytes([0, 0x40 | 4, 0, 1, 1])
    out["odd-proportions"] = hdr2 + b"".join(reg(i, 0, 200 + i) for i in range(10))
    return out


# ---- the dictionary ---------------------------------------------------------
DICT_TOKENS = [b'{', b'}', b'[', b']', b':', b',', b'"', b'\n', b'{}', b'[]', b'null', b'true', b'false', b'0', b'-1', b'1e9', b'1.5', b'-0', b'1e400',
        b'\\"', b'\\\\', b'\\u0000', b'\\ud800', b'\\udc00', b'\\ud83d\\ude00', b'\\u00e9',
        b'\xc3\x28', b'\xed\xa0\x80', b'\xf4\x90\x80\x80', b'\xc0\xaf', b'\xe2\x82\xac', b'\x00', b'\x1e', b'\r\n', b'\t',
        b'"id":', b'"method":', b'"params":', b'"Method":',
        b'"versions":[1]', b'"versions":', b'"client":', b'"name":', b'"device":', b'"proportion":', b'"group":',
        b'"instance":', b'"size":', b'"alignment":', b'"type":', b'"wait_ms":', b'"mode":', b'"fraction":',
        b'"device"', b'"pinned"', b'"mapped"', b'"managed"', b'"active"', b'"passive"', b'"default"',
        b'"0000000000000001"', b'"0000000000000002"', b'"0000000000000003"', b'"0123456789abcdef"',
        b'"$0"', b'"$1"', b'"$2"', b'"$3"', b'$0', b'$1',
        b'"0"', b'"1"', b'"256"', b'"4096"', b'"65536"', b'"2097152"', b'"16777216"', b'"16777217"',
        b'"-1"', b'"+1"', b'" 1"', b'"1e9"', b'"0x10"', b'"01"',
        b'"18446744073709551615"', b'"18446744073709551616"', b'"9223372036854775808"', b'"1000000000000000000000000"',
        b'0.5', b'0.001', b'1.0000000001', b'60000', b'86400001',
        b'{"id":"1","method":"hello","params":{"versions":[1]}}\n',
        b'{"id":"2","method":"register","params":{"name":"a"}}\n',
        b'{"id":"3","method":"alloc","params":{"instance":"0000000000000001","size":"4096"}}\n',
        b'{"id":"4","method":"free","params":{"id":"$0"}}\n',
        b'{"id":"5","method":"attach","params":{"id":"$0"}}\n',
        b'"requests":', b'"label":', b'"shape":', b'"elem_size":', b'"unchunkable":', b'"axis_length":',
        b'"available":', b'"allocator":', b'"session":', b'"pool"', b'"direct"', b'"async"',
        b'{"label":"a","shape":[1000,4],"elem_size":8}',
        b'"lease":', b'"offset":', b'"in_use":',
        b'{"id":"6","method":"lease","params":{"instance":"0000000000000001","size":"4096"}}\n',
        b'{"id":"7","method":"lease_carve","params":{"lease":"$0","offset":"0","size":"256"}}\n',
        ]

METHODS = ["hello", "register", "unregister", "alloc", "free", "attach", "detach", "mem_info",
           "stats", "status", "clients", "devices", "reload", "metrics", "policy", "set_proportion",
           "set_auto", "set_group", "group_info", "set_mode", "set_limit", "queue_request",
           "allocate_queue", "chunk_parameters", "claim", "free_label", "invalidate_all",
           "set_allocator", "evict", "selfcheck", "export", "unexport", "open", "lease",
           "lease_return", "lease_carve"]


def dict_escape(b):
    """A token as libFuzzer's dictionary format quotes it."""
    out = ""
    for c in b:
        if c == 0x22:
            out += '\\"'
        elif c == 0x5c:
            out += "\\\\"
        elif 0x20 <= c < 0x7f:
            out += chr(c)
        else:
            out += "\\x%02x" % c
    return out


def write_dict():
    path = os.path.join(HERE, "protocol.dict")
    with open(path, "w") as f:
        f.write("# libFuzzer dictionary for fuzz-protocol (written by gen-corpus.py): JSON\n"
                "# syntax, the protocol's keys, methods and values, number forms the\n"
                "# daemon must refuse, byte sequences the frame checker must refuse, and\n"
                "# \"$0\"..\"$3\", the harness's placeholders for allocation ids.\n")
        for b in DICT_TOKENS + [b'"%s"' % m.encode() for m in METHODS]:
            f.write('"%s"\n' % dict_escape(b))
    print("protocol.dict: %d tokens" % (len(DICT_TOKENS) + len(METHODS)))


def write(harness, files):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print("%s: %d files" % (harness, len(files)))


def main():
    write("protocol", protocol_corpus())
    write("conf", conf_corpus())
    write("pool", pool_corpus())
    write("policy", policy_corpus())
    write_dict()
    return 0


if __name__ == "__main__":
    sys.exit(main())
