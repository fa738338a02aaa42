"""numpy-style dtypes and shapes without requiring numpy.

A dtype may be a numpy dtype (or anything ``numpy.dtype()`` accepts, when
numpy is importable), an object with an ``itemsize``, a ctypes type, a
Python type (``float``, ``int``, ``complex``, ``bool``) or one of the names
numpy uses: ``'float32'``, ``'f4'``, ``'<f8'``, ``'int64'``, ``'u1'``,
``'complex64'``, ``'bool'``...
"""

import ctypes
import operator

_NAMED = {
    "bool": 1, "int8": 1, "uint8": 1, "byte": 1, "ubyte": 1,
    "int16": 2, "uint16": 2, "float16": 2, "half": 2, "short": 2, "ushort": 2,
    "int32": 4, "uint32": 4, "float32": 4, "single": 4, "intc": 4, "uintc": 4,
    "int64": 8, "uint64": 8, "float64": 8, "double": 8, "complex64": 8,
    "longlong": 8, "ulonglong": 8, "intp": 8, "uintp": 8,
    "complex128": 16, "cdouble": 16,
}
# One-letter kinds that take an explicit size ('f4', 'i8', 'c16', 'b1', 'V12').
_KINDS = "biufcV"
# numpy's one-character codes.
_CODES = {
    "?": 1, "b": 1, "B": 1, "h": 2, "H": 2, "e": 2, "i": 4, "I": 4, "f": 4,
    "l": 8, "L": 8, "q": 8, "Q": 8, "d": 8, "F": 8, "D": 16, "p": 8, "P": 8,
}
_PYTYPES = {bool: 1, int: 8, float: 8, complex: 16}


def _numpy_itemsize(dtype):
    try:
        import numpy
    except ImportError:
        return None
    try:
        return numpy.dtype(dtype).itemsize
    except TypeError:
        return None


def itemsize(dtype):
    """Bytes per element of @dtype (see the module's documentation)."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int) and not isinstance(dtype, type):
        return size
    if dtype in _PYTYPES:
        return _PYTYPES[dtype]
    if isinstance(dtype, type) and issubclass(dtype, ctypes._SimpleCData):
        return ctypes.sizeof(dtype)
    if isinstance(dtype, str):
        size = _string_itemsize(dtype)
        if size:
            return size
    size = _numpy_itemsize(dtype)
    if size:
        return size
    raise TypeError("gpubroker: unknown dtype %r" % (dtype,))


def _string_itemsize(name):
    s = name.strip()
    if s[:1] in "<>=|":
        s = s[1:]
    if s in _NAMED:
        return _NAMED[s]
    if s in _CODES:
        return _CODES[s]
    if len(s) > 1 and s[0] in _KINDS and s[1:].isdigit():
        return int(s[1:])
    return None


def shape_tuple(shape):
    """@shape (an int or a sequence of ints, numpy integers included) as a
    tuple of Python ints."""
    try:
        return (operator.index(shape),)
    except TypeError:
        pass
    try:
        return tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError("gpubroker: a shape is an int or a sequence of ints, not %r"
                        % (shape,)) from None


def nbytes(shape, dtype):
    """Bytes of an array of @shape and @dtype."""
    n = itemsize(dtype)
    for d in shape_tuple(shape):
        n *= d
    return n
