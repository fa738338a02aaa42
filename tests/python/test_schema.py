"""The Python package's wire names: all from gpubroker._schema, which
tools/gen-pyschema.py writes from proto/schema.h (and test-schema-copies
compares with the header as compiled).

Here: the package's own modules spell no method, member, event, value,
error-code name or limit of the protocol as a literal where a wire name
goes (a subscript, a dict key, a comparison, get()/pop()/request()'s
argument, an argument's default, a module's constant table), and every
name they take from _schema exists there."""

import ast
import os

import pytest

from conftest import HERE

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python", "gpubroker")

# Literals that equal a wire name but are not one: (module, literal) -> why.
NOT_WIRE = {
    ("cubie/manager.py", "default"): "cubie's allocator name (set_allocator maps it)",
    ("numba.py", "name"): "a key of the EMM plugin's settings (configure())",
    ("numba.py", "proportion"): "a key of the EMM plugin's settings (configure())",
    ("numba.py", "group"): "a key of the EMM plugin's settings (configure())",
    ("torch.py", "name"): "a key of torch.configure()'s variables",
    ("torch.py", "proportion"): "a key of torch.configure()'s variables",
    ("torch.py", "group"): "a key of torch.configure()'s variables",
    ("cupy.py", "name"): "a key of cupy.c_allocator()'s variables",
    ("cupy.py", "proportion"): "a key of cupy.c_allocator()'s variables",
    ("cupy.py", "group"): "a key of cupy.c_allocator()'s variables",
    ("allocation.py", "shape"): "__cuda_array_interface__'s keys",
    ("allocation.py", "data"): "__cuda_array_interface__'s keys",
    ("allocation.py", "version"): "__cuda_array_interface__'s keys",
    ("cubie/arrays.py", "shape"): "__cuda_array_interface__'s keys",
    ("cubie/arrays.py", "data"): "__cuda_array_interface__'s keys",
    ("cubie/arrays.py", "version"): "__cuda_array_interface__'s keys",
    ("layout.py", "bytes"): "a key of the buffer layout's JSON (gpubrokerctl layout), not the protocol's",
    ("allocation.py", "alloc"): "Allocation.kind, named after the call that made it",
    ("allocation.py", "attach"): "Allocation.kind, named after the call that made it",
    ("allocation.py", "claim"): "Allocation.kind, named after the call that made it",
    ("cupy.py", "uuid"): "CuPy's device properties",
    ("numba.py", "offset"): "the IPC handle's pickled state",
    ("numba.py", "size"): "the IPC handle's pickled state",
    ("records.py", "mode"): "the C struct's field (gpb_policy_info.mode)",
    ("layout.py", "name"): "the layout planner's records (no protocol)",
    ("layout.py", "size"): "the layout planner's records (no protocol)",
    ("layout.py", "offset"): "the layout planner's records (no protocol)",
    ("layout.py", "requested"): "the layout planner's records (no protocol)",
    ("layout.py", "bytes"): "the layout planner's records (no protocol)",
}

CALLS = {"get", "pop", "setdefault", "request"}


def schema():
    import gpubroker._schema as s

    return s


def wire_names():
    s = schema()
    names = {v for k, v in vars(s).items()
             if isinstance(v, str) and k.split("_")[0] in ("M", "F", "EV", "V")}
    return names | set(s.CODE_NAMES.values()) | set(s.LIMITS)


def modules():
    for top, _, files in os.walk(PACKAGE):
        for f in sorted(files):
            if f.endswith(".py") and f != "_schema.py":
                path = os.path.join(top, f)
                yield os.path.relpath(path, PACKAGE), ast.parse(open(path).read(), path)


def wire_positions(tree):
    """The string constants of @tree in a wire name's places."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("_fields_", "__slots__")
                for t in node.targets):
            skip.update(id(n) for n in ast.walk(node.value))

    def consts(node):
        """@node, or the elements of a literal tuple/list/set/dict."""
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [n for e in node.elts for n in consts(e)]
        if isinstance(node, ast.Dict):
            return [n for e in node.values if e is not None for n in consts(e)]
        return [node]

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            found.append(node.slice)
        elif isinstance(node, ast.Dict):
            found.extend(k for k in node.keys if k is not None)
        elif isinstance(node, ast.Compare):
            for operand in [node.left] + node.comparators:
                found.extend(consts(operand))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in CALLS and node.args:
            found.append(node.args[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.extend(node.args.defaults + [d for d in node.args.kw_defaults if d])
    for node in tree.body:  # the module's constant tables
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            found.extend(consts(node.value))
        elif isinstance(node, ast.ClassDef):  # dataclass field defaults
            found.extend(n.value for n in node.body
                         if isinstance(n, ast.AnnAssign) and n.value is not None)
    return [n for n in found if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in skip]


def test_the_package_spells_no_wire_name():
    names = wire_names()
    bad = ["%s:%d: %r" % (mod, n.lineno, n.value)
           for mod, tree in modules() for n in wire_positions(tree)
           if n.value in names and (mod, n.value) not in NOT_WIRE]
    assert not bad, "wire names spelled as literals (use gpubroker._schema):\n" + "\n".join(bad)


def test_every_schema_name_used_exists():
    s = schema()
    missing = []
    for mod, tree in modules():
        aliases = {a.asname or a.name for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) for a in node.names
                   if a.name == "_schema"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases and not hasattr(s, node.attr):
                missing.append("%s:%d: _schema.%s" % (mod, node.lineno, node.attr))
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("literal", ["status", "max_name", "invalid_params", "allocation_ready"])
def test_the_scan_finds_a_wire_name(literal, tmp_path):
    """The check above would see a wire name in each kind of place."""
    code = "\n".join([
        "X = %r" % literal,
        "def f(a=%r):" % literal,
        "    c.request(%r)" % literal,
        "    r[%r]" % literal,
        "    {%r: 1}" % literal,
        "    a == %r or a in (%r,)" % (literal, literal),
    ])
    found = [n.value for n in wire_positions(ast.parse(code))]
    assert found.count(literal) == 7 and literal in wire_names()


def test_errors_are_told_apart_by_code_not_text():
    """No comparison reads an error's message (GpubrokerError.detail, its
    str()): a message may change, the code (its class) is the protocol's."""
    bad = []
    for mod, tree in modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            for operand in [node.left] + node.comparators:
                text = isinstance(operand, ast.Attribute) and operand.attr == "detail" or \
                    isinstance(operand, ast.Call) and isinstance(operand.func, ast.Name) \
                    and operand.func.id == "str"
                if text:
                    bad.append("%s:%d" % (mod, node.lineno))
    assert not bad, "an error matched by its text: " + ", ".join(bad)
