#!/usr/bin/env python3
"""Writes python/gpubroker/_schema.py from proto/schema.h: the protocol's
limits, error codes, methods, member names, events and values, so that the
Python package spells no wire name or limit of its own.

    tools/gen-pyschema.py [SCHEMA_H [OUT]]     (OUT "-": standard output)

Run it after changing schema.h and commit the result (the package works
from a source tree and from pip without a build); test-schema-copies fails
while the two differ. Every "#define PROTO_..." of schema.h is either
written out or named below as not part of the vocabulary, so that a new
kind of name cannot be skipped unnoticed."""

import os
import re
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Macros of schema.h that are no name or limit of the wire: X-macro
# lists and their helpers, string builders, op flags.
NOT_NAMES = re.compile(r"PROTO_(VERSION$|STR_?$|QUOTED$|[A-Z_]*EXPECT(ED)?(_[A-Z0-9]+)?$|"
                       r"[A-Z]+_VALUES$|QUEUE_ITEM$|MEMBER_|NO_MEMBERS$|"
                       r"[A-Z_]+_(PARAMS|RESULT|DATA|ARRAY|TABLE)$|CODES$|OPS$|EVENTS$|LIMITS$|"
                       r"CODE_ENUM_$|OP_ENUM_$)")

KINDS = (("M_", "methods"), ("F_", "member names"), ("EV_", "events"),
         ("V_", "values"))


def parse(text):
    """(version, limits [(python name, value)], codes [(id, code, name)],
    strings {prefix: [(python name, value)]})."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    defines = {}
    for m in re.finditer(r"^#define\s+(PROTO_\w+)(\([^)]*\))?[ \t]*((?:.*\\\n)*.*)$", text, re.M):
        defines[m.group(1)] = (m.group(2), m.group(3).replace("\\\n", " ").strip())
    version = int(defines["PROTO_VERSION"][1])
    limits = []
    for ident, name in re.findall(r'X\((\w+),\s*"(\w+)"\)', defines["PROTO_LIMITS"][1]):
        value = defines["PROTO_" + ident][1]
        if not value.isdigit():
            sys.exit("gen-pyschema: PROTO_%s is not a plain integer: %s" % (ident, value))
        limits.append((name.upper(), int(value)))
    codes = [(i, int(c), n) for i, c, n in
             re.findall(r'X\((\w+),\s*(-?\d+),\s*"(\w+)"\)', defines["PROTO_CODES"][1])]
    strings = {prefix: [] for prefix, _ in KINDS}
    used = {"PROTO_" + i for i, _ in re.findall(r'X\((\w+),\s*"(\w+)"\)',
                                                  defines["PROTO_LIMITS"][1])}
    for macro, (args, body) in defines.items():
        prefix = next((p for p, _ in KINDS if macro.startswith("PROTO_" + p)), None)
        if macro in used or args or (prefix is None and NOT_NAMES.match(macro)):
            continue
        if prefix is None:
            sys.exit("gen-pyschema: %s: no kind of name (add it to NOT_NAMES if it is none)"
                     % macro)
        while body in defines:  # an alias: PROTO_V_REASON_... PROTO_M_...
            body = defines[body][1]
        m = re.fullmatch(r'"([^"\\]*)"', body)
        if not m:
            sys.exit("gen-pyschema: %s is not a string literal: %s" % (macro, body))
        strings[prefix].append((macro[len("PROTO_"):], m.group(1)))
    return version, limits, codes, strings


def render(version, limits, codes, strings):
    out = ['"""The protocol\'s vocabulary, from proto/schema.h: written by',
           "tools/gen-pyschema.py, do not edit (test-schema-copies compares it",
           'with the header)."""', "", "VERSION = %d" % version, "",
           "# Limits (PROTOCOL.md's table of limits; PROTO_LIMITS)."]
    out += ["%s = %d" % kv for kv in limits]
    out += ["", "LIMITS = {"] + ['    "%s": %s,' % (n.lower(), n) for n, _ in limits] + ["}"]
    out += ["", "# Error codes carried in error.code (PROTO_CODES)."]
    out += ["CODE_%s = %d" % (i, c) for i, c, _ in codes]
    out += ["", "CODE_NAMES = {"] + ['    CODE_%s: "%s",' % (i, n) for i, _, n in codes] + ["}"]
    for prefix, what in KINDS:
        out += ["", "# %s%s." % (what[0].upper(), what[1:])]
        out += ['%s = "%s"' % kv for kv in strings[prefix]]
    return "\n".join(out) + "\n"


def main(argv):
    src = argv[1] if len(argv) > 1 else os.path.join(TOP, "proto", "schema.h")
    dst = argv[2] if len(argv) > 2 else os.path.join(TOP, "python", "gpubroker", "_schema.py")
    with open(src, encoding="utf-8") as f:
        text = render(*parse(f.read()))
    if dst == "-":
        sys.stdout.write(text)
    else:
        with open(dst, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv)
