"""hcr, the heterogeneous compute runtime, from Python.

Tasks (a kernel plus the buffers it reads and writes) run on the devices the runtime's backend
plugins expose; dependencies follow from the order in which tasks use buffers. Buffers are NumPy
arrays wrapped without copying::

    import numpy as np, hcr

    def scale(v, a):                          # a CPU kernel: NumPy views, then the params
        v *= a

    with hcr.Runtime({"backend": [{"name": "cpu"}]}) as rt:
        x = rt.wrap(np.arange(8, dtype=np.float32))
        rt.submit(rt.kernel("scale").cpu(scale, params=["f32"]), read_writes=[x], params=[2.0])
        with x.acquire("read") as v:          # waits for the task
            print(v)                          # [ 0.  2.  4. ...]

The module goes over hcr's public C++ API (``hcr._core``, a pybind11 extension); the C++ names are
kept in snake_case. Read ``python/README.md`` for the rules (lifetimes, the interpreter lock,
parameter types, DLPack).
"""

from __future__ import annotations

import atexit as _atexit

from . import _core
from ._core import (
    BackendError,
    Buffer,
    CommunicationError,
    ConfigError,
    DependencyError,
    Device,
    DeviceLostError,
    Error,
    ErrorCode,
    Event,
    Graph,
    HostView,
    InternalError,
    InvalidArgumentError,
    Kernel,
    KernelError,
    NoDeviceError,
    NotFoundError,
    OutOfMemoryError,
    Param,
    PluginError,
    Runtime,
    ShutdownError,
    Task,
    Tiles,
    TimeoutError,
    TraceEvent,
    UnknownError,
    UnsupportedError,
    f32,
    f64,
    gemm_params,
    i32,
    i64,
    potrf_params,
    syrk_params,
    trsm_params,
    u8,
)
from . import linalg

__version__ = "0.1.0"


def from_dlpack(tensor, runtime: Runtime) -> Buffer:
    """A buffer of ``runtime`` over a DLPack tensor's host memory, without copying (the same as
    ``runtime.from_dlpack(tensor)``). A device tensor raises :class:`UnsupportedError`."""
    return runtime.from_dlpack(tensor)


def _event_await(self):
    """``await event``: resumes once the task has finished, then returns ``event.result()``."""
    if not self.done():
        import asyncio

        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle():
            if not future.done():
                future.set_result(None)

        def done(_event):  # on a waiter thread, with the interpreter lock
            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop has been closed meanwhile
                pass

        self.add_done_callback(done)
        yield from future
    return self.result()


Event.__await__ = _event_await

# Runtimes still open at exit are closed while the interpreter can still run their Python kernels.
_atexit.register(_core._shutdown)

__all__ = [
    "BackendError", "Buffer", "CommunicationError", "ConfigError", "DependencyError", "Device",
    "DeviceLostError", "Error", "ErrorCode", "Event", "Graph", "HostView", "InternalError",
    "InvalidArgumentError", "Kernel", "KernelError", "NoDeviceError", "NotFoundError",
    "OutOfMemoryError", "Param", "PluginError", "Runtime", "ShutdownError", "Task", "Tiles",
    "TimeoutError", "TraceEvent", "UnknownError", "UnsupportedError", "f32", "f64", "from_dlpack",
    "gemm_params", "i32", "i64", "linalg", "potrf_params", "syrk_params", "trsm_params", "u8",
]
