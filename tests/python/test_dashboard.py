"""monitoring/gpubroker-grafana.json against a running daemon: every metric
an expression of the dashboard names is one the daemon exports (its
`# TYPE` lines, a histogram's _bucket, _sum and _count), and every label it
groups, filters or names in a legend is one of that metric's, as a daemon
with a client, an instance and an allocation shows them (a metric with no
series there, a partition's sessions, is checked by name only). The
board cannot drift from the code."""

import json
import os
import re
import subprocess

from conftest import daemon_env, env_path

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOARD = os.path.join(TOP, "monitoring", "gpubroker-grafana.json")
MiB = 1 << 20

# PromQL's own words that look like names in an expression.
PROMQL = {"sum", "by", "rate", "histogram_quantile", "le", "without", "avg", "max", "min"}


def metrics(daemon):
    r = subprocess.run([env_path("GPUBROKERCTL"), "--socket", daemon.socket, "metrics"],
                       env=daemon_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def exported(text):
    """{metric name: set of label names seen on its series}."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"# TYPE (\w+) (\w+)", line)
        if m:
            names = [m.group(1)]
            if m.group(2) == "histogram":
                names += [m.group(1) + s for s in ("_bucket", "_sum", "_count")]
            for n in names:
                out.setdefault(n, set())
            continue
        m = re.match(r"(\w+)\{(.*)\} ", line)
        if m and m.group(1) in out:
            out[m.group(1)] |= set(re.findall(r"(\w+)=\"", m.group(2)))
    return out


def targets():
    with open(BOARD) as f:
        board = json.load(f)
    for panel in board["panels"]:
        for t in panel["targets"]:
            yield panel["title"], t["expr"], t.get("legendFormat", "")
    for var in board["templating"]["list"]:
        if var.get("type") == "query":
            yield var["name"], var["query"], ""


def test_every_expression_names_what_the_daemon_exports(daemon, client):
    # Series for the per-instance, per-uid and per-partition metrics.
    inst = client.register("dash", device=0)
    keep = client.alloc(inst, MiB)
    have = exported(metrics(daemon))
    assert "gpubroker_device_used_bytes" in have  # the parse works
    checked = 0
    for title, expr, legend in targets():
        names = {n for n in re.findall(r"\b(gpubroker_\w+)", expr)}
        assert names, (title, expr)
        for n in names:
            assert n in have, "%s: %s names %s, which the daemon does not export" % (
                title, expr, n)
        # Labels: grouped by, matched on, or shown in the legend.
        labels = set(re.findall(r"by \(([\w, ]+)\)", expr))
        labels = {x.strip() for group in labels for x in group.split(",")}
        labels |= set(re.findall(r"[{,](\w+)(?:=~|!=|=)\"", expr))
        labels |= set(re.findall(r"\{\{(\w+)\}\}", legend))
        labels |= set(re.findall(r"label_values\(\w+, (\w+)\)", expr))
        labels -= PROMQL
        seen = set().union(*(have[n] for n in names))
        checked += 1
        if not seen:  # no series in this daemon (a partition's sessions): names only
            continue
        for label in labels:
            assert label in seen, "%s: label %r of %s is on none of %s (seen: %s)" % (
                title, label, expr, sorted(names), sorted(seen))
    assert checked == len(list(targets())) >= 25
    keep.free()
