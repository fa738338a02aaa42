"""Exceptions mapped from libgpubroker's negative GPB_E_* codes."""

from . import _lib

OK = 0
E_INVALID = -1
E_NOMEM = -2
E_CONNECT = -3
E_DAEMON_GONE = -4
E_PROTOCOL = -5
E_VERSION = -6
E_OUT_OF_MEMORY = -7
E_QUOTA = -8
E_NOT_FOUND = -9
E_PERMISSION = -10
E_LIMIT = -11
E_TIMEOUT = -12
E_NOT_SUPPORTED = -13
E_BACKEND = -14
E_SHUTTING_DOWN = -15
E_SYSTEM = -16
# The kernel buffer layout planner (gpb_layout_*, gpubroker.layout).
E_LAYOUT_NAME = -17
E_LAYOUT_DUPLICATE = -18
E_LAYOUT_ZERO_SIZE = -19
E_LAYOUT_OVERFLOW = -20
E_LAYOUT_ALIAS_UNKNOWN = -21
E_LAYOUT_ALIAS_PERSISTENT = -22
E_LAYOUT_ALIAS_CYCLE = -23
E_LAYOUT_ALIAS_LOCATION = -24
E_LAYOUT_NO_FIT = -25
E_CONTEXT_RESET = -26
E_EXISTS = -27


class GpubrokerError(Exception):
    """A libgpubroker call failed.

    ``code`` is the negative GPB_E_* code, ``name`` its gpb_strerror() text
    and ``detail`` gpb_last_error() (the daemon's message, when it answered
    with an error)."""

    def __init__(self, code, detail="", call=""):
        self.code = code
        self.name = strerror(code)
        self.detail = detail
        self.call = call
        msg = "%s: %s" % (call, self.name) if call else self.name
        if detail:
            msg += " (%s)" % detail
        super().__init__(msg)


class InvalidError(GpubrokerError, ValueError):
    """GPB_E_INVALID: a bad argument, or a request the daemon called invalid."""


class HostMemoryError(GpubrokerError, MemoryError):
    """GPB_E_NOMEM: this process ran out of host memory."""


class ConnectError(GpubrokerError, ConnectionError):
    """GPB_E_CONNECT: no daemon listening at the socket path."""


class DaemonGoneError(GpubrokerError, ConnectionError):
    """GPB_E_DAEMON_GONE: the daemon closed the connection or died; every
    pointer of the client is invalid. Reconnect with a new Client."""


class ProtocolError(GpubrokerError):
    """GPB_E_PROTOCOL: the daemon sent something the library cannot read."""


class VersionError(GpubrokerError):
    """GPB_E_VERSION: no common protocol version."""


class OutOfMemoryError(GpubrokerError, MemoryError):
    """GPB_E_OUT_OF_MEMORY: the device (or the broker's limit) has no room."""


class QuotaError(GpubrokerError, MemoryError):
    """GPB_E_QUOTA: the instance's cap would be exceeded (active mode)."""


class NotFoundError(GpubrokerError, LookupError):
    """GPB_E_NOT_FOUND: unknown id, or one this process may not see."""


class BrokerPermissionError(GpubrokerError, PermissionError):
    """GPB_E_PERMISSION: needs an administrator, or socket access denied."""


class LimitError(GpubrokerError):
    """GPB_E_LIMIT: a connection or daemon limit is reached."""


class BrokerTimeoutError(GpubrokerError, TimeoutError):
    """GPB_E_TIMEOUT: a wait (alloc with wait) ran out."""


class NotSupportedError(GpubrokerError, NotImplementedError):
    """GPB_E_NOT_SUPPORTED: the backend cannot serve this request."""


class BackendError(GpubrokerError):
    """GPB_E_BACKEND: the device or its driver failed."""


class ShuttingDownError(GpubrokerError, ConnectionError):
    """GPB_E_SHUTTING_DOWN: the daemon is stopping."""


class SystemCallError(GpubrokerError, OSError):
    """GPB_E_SYSTEM: a system call failed (the detail names errno)."""


class LayoutError(GpubrokerError, ValueError):
    """A layout the planner refuses (GPB_E_LAYOUT_*): the base of the nine
    classes below, one a rule. ``detail`` names the buffer and component."""


class LayoutNameError(LayoutError):
    """GPB_E_LAYOUT_NAME: a component, buffer or alias name is empty, over
    64 bytes, or holds a byte outside printable ASCII (blanks included)."""


class LayoutDuplicateError(LayoutError):
    """GPB_E_LAYOUT_DUPLICATE: the component name is taken, or the buffer
    name in its component."""


class LayoutZeroSizeError(LayoutError):
    """GPB_E_LAYOUT_ZERO_SIZE: a buffer of 0 elements."""


class LayoutOverflowError(LayoutError, OverflowError):
    """GPB_E_LAYOUT_OVERFLOW: a byte size, offset or region overflows 64 bits."""


class LayoutAliasUnknownError(LayoutError):
    """GPB_E_LAYOUT_ALIAS_UNKNOWN: an alias names no buffer of the same
    component (checked by compute())."""


class LayoutAliasPersistentError(LayoutError):
    """GPB_E_LAYOUT_ALIAS_PERSISTENT: a persistent buffer with an alias, or an
    alias to a persistent buffer: persistent buffers are never aliased."""


class LayoutAliasCycleError(LayoutError):
    """GPB_E_LAYOUT_ALIAS_CYCLE: a buffer aliasing itself, or aliases that
    lead back to where they started."""


class LayoutAliasLocationError(LayoutError):
    """GPB_E_LAYOUT_ALIAS_LOCATION: an alias between shared and local memory."""


class LayoutNoFitError(LayoutError):
    """GPB_E_LAYOUT_NO_FIT: one warp (32 threads) needs more shared memory
    than the budget."""


class ContextResetError(GpubrokerError):
    """GPB_E_CONTEXT_RESET: the CUDA context the memory was mapped in was
    reset (cuDevicePrimaryCtxReset, Numba's Device.reset) or destroyed; the
    mapping went with it. Free the allocation; new ones work in the context
    current then."""


class ExistsError(GpubrokerError, FileExistsError):
    """GPB_E_EXISTS: the name is taken (an export name this user already
    exports, a partition name that exists)."""


_BY_CODE = {
    E_INVALID: InvalidError,
    E_NOMEM: HostMemoryError,
    E_CONNECT: ConnectError,
    E_DAEMON_GONE: DaemonGoneError,
    E_PROTOCOL: ProtocolError,
    E_VERSION: VersionError,
    E_OUT_OF_MEMORY: OutOfMemoryError,
    E_QUOTA: QuotaError,
    E_NOT_FOUND: NotFoundError,
    E_PERMISSION: BrokerPermissionError,
    E_LIMIT: LimitError,
    E_TIMEOUT: BrokerTimeoutError,
    E_NOT_SUPPORTED: NotSupportedError,
    E_BACKEND: BackendError,
    E_SHUTTING_DOWN: ShuttingDownError,
    E_SYSTEM: SystemCallError,
    E_LAYOUT_NAME: LayoutNameError,
    E_LAYOUT_DUPLICATE: LayoutDuplicateError,
    E_LAYOUT_ZERO_SIZE: LayoutZeroSizeError,
    E_LAYOUT_OVERFLOW: LayoutOverflowError,
    E_LAYOUT_ALIAS_UNKNOWN: LayoutAliasUnknownError,
    E_LAYOUT_ALIAS_PERSISTENT: LayoutAliasPersistentError,
    E_LAYOUT_ALIAS_CYCLE: LayoutAliasCycleError,
    E_LAYOUT_ALIAS_LOCATION: LayoutAliasLocationError,
    E_LAYOUT_NO_FIT: LayoutNoFitError,
    E_CONTEXT_RESET: ContextResetError,
    E_EXISTS: ExistsError,
}


def strerror(code):
    """gpb_strerror(): the name of an error code."""
    return _lib.text(_lib.lib().gpb_strerror(code))


def last_error():
    """gpb_last_error(): the message of this thread's last failed call."""
    return _lib.text(_lib.lib().gpb_last_error())


def error_for(code, call=""):
    """The exception for a negative code, with this thread's last message
    (call right after the failing call, on the same thread)."""
    cls = _BY_CODE.get(code, GpubrokerError)
    return cls(code, last_error(), call)


def check(rc, call=""):
    """Returns @rc when it is not negative, else raises its exception."""
    if rc < 0:
        raise error_for(rc, call)
    return rc
