"""Type stubs of the hcr Python module (the compiled hcr._core and the package around it)."""

from __future__ import annotations

import builtins
import enum
import os
from typing import Any, Callable, Generator, Iterator, Literal, Mapping, Sequence, Union, overload

import numpy as np
import numpy.typing as npt

from . import linalg as linalg

__version__: str

ScratchSpec = int | tuple[int | tuple[int] | tuple[int, int], Any]
AccessMode = Literal["read", "write", "read_write", "r", "w", "rw", "commute", "reduce"]
DTypeLike = Union[str, npt.DTypeLike]
ConfigLike = Union[None, str, os.PathLike[str], Mapping[str, Any]]
ParamLike = Union["Param", float, int, bytes, bytearray, np.generic]
Extents = Union[int, Sequence[int]]
BufferLike = Union["Buffer", np.ndarray]  # an array is wrapped (Runtime.wrap)

# --- errors ------------------------------------------------------------------------------------

class ErrorCode(enum.IntEnum):
    """hcr::ErrorCode: what went wrong (Error.code)."""

    unknown = 1
    invalid_argument = 2
    not_found = 3
    unsupported = 4
    out_of_memory = 5
    device_lost = 6
    backend = 7
    internal = 8
    timeout = 9
    kernel = 10
    config = 100
    plugin = 101
    dependency = 102
    shutdown = 103
    no_device = 104
    communication = 105

class Error(RuntimeError):
    """Every hcr misuse and failed task: hcr::Error's message, its code in .code."""

    code: ErrorCode

class UnknownError(Error): ...
class InvalidArgumentError(Error, ValueError):
    """Misuse: a value, shape, mode or call that is not allowed."""

class NotFoundError(Error, LookupError): ...
class UnsupportedError(Error, NotImplementedError):
    """An operation hcr does not offer here (a device DLPack tensor, ...)."""

class OutOfMemoryError(Error, MemoryError): ...
class DeviceLostError(Error): ...
class BackendError(Error): ...
class InternalError(Error): ...
class TimeoutError(Error, builtins.TimeoutError): ...
class KernelError(Error): ...
class ConfigError(Error, ValueError):
    """A configuration file or value is wrong; the message names file, line and key."""

class PluginError(Error): ...
class DependencyError(Error):
    """A task this one depends on failed (its message is carried)."""

class ShutdownError(Error):
    """The runtime has been closed."""

class NoDeviceError(Error): ...
class CommunicationError(Error): ...

# --- parameters --------------------------------------------------------------------------------

class Param:
    """One scalar parameter of a task: bytes, alignment and, for typed ones, the type."""

    def __init__(self, data: bytes, align: int = 8) -> None: ...
    @property
    def data(self) -> bytes: ...
    @property
    def align(self) -> int: ...
    @property
    def dtype(self) -> str | None: ...

def f32(value: float) -> Param:
    """A parameter of type f32 (range-checked)."""

def f64(value: float) -> Param:
    """A parameter of type f64."""

def i32(value: int) -> Param:
    """A parameter of type i32 (range-checked)."""

def i64(value: int) -> Param:
    """A parameter of type i64."""

def u8(value: int) -> Param:
    """A parameter of type u8 (range-checked)."""

def gemm_params(alpha: float = 1.0, beta: float = 0.0, trans_a: bool = False,
                trans_b: bool = False) -> Param:
    """The parameter block of the built-in gemm_<t> kernels (hcr_gemm_params_t)."""

def syrk_params(alpha: float = 1.0, beta: float = 0.0, uplo: str = "lower",
                trans: bool = False) -> Param:
    """The parameter block of syrk_<t> (hcr_syrk_params_t)."""

def trsm_params(alpha: float = 1.0, side: str = "left", uplo: str = "lower", trans: bool = False,
                unit_diag: bool = False) -> Param:
    """The parameter block of trsm_<t> (hcr_trsm_params_t)."""

def potrf_params(uplo: str = "lower") -> Param:
    """The parameter block of potrf_<t> (hcr_potrf_params_t)."""

# --- runtime -----------------------------------------------------------------------------------

class Device:
    """A device of the runtime (a snapshot)."""

    id: int
    name: str
    arch: str
    backend: str
    kind: Literal["cpu", "gpu", "accelerator", "sim"]
    memory_bytes: int
    compute_units: int
    concurrency: int
    memory_node: int
    peak_gflops: float

class TraceEvent:
    """One recorded task execution or copy."""

    kind: Literal["task", "transfer", "power"]
    device: int
    source_node: int
    target_node: int
    kernel: str
    footprint: int
    bytes: int
    start: float
    end: float
    predicted: float
    measured: float
    priority: int
    failed: bool
    context: str

class _PausedScope:
    def __enter__(self) -> None: ...
    def __exit__(self, *exc: object) -> None: ...

class Runtime:
    """The runtime: plugins, devices, the task graph, data and the scheduler.

    ``config``: None (every installed plugin), a TOML file, or a dict of its tables
    (``{"backend": [{"name": "cpu"}]}``). HCR_* variables override keys unless
    ``use_environment=False``. A context manager: the with block's end closes it.
    """

    def __init__(self, config: ConfigLike = None, *, use_environment: bool = True) -> None: ...
    @property
    def devices(self) -> list[Device]: ...
    @property
    def policy(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def load_report(self) -> dict[str, list[dict[str, Any]]]: ...
    def kernel(self, name: str) -> Kernel:
        """A plugin's built-in kernel (gemm_f32, ...) or a new one to add implementations to."""
    def wrap(self, array: np.ndarray, *, readonly: bool | None = None) -> Buffer:
        """A buffer over the array's memory, without copying (1-d or 2-d, row-major rows)."""
    def buffer(self, shape: int | tuple[int] | tuple[int, int], dtype: DTypeLike = "f32", *,
               zero: bool = True) -> Buffer:
        """A new buffer, its memory a NumPy array it owns."""
    def from_dlpack(self, tensor: Any) -> Buffer:
        """A buffer over a DLPack tensor's host memory; a device tensor raises UnsupportedError."""
    def submit(self, task: Kernel | Task, reads: Sequence[BufferLike] | None = None,
               writes: Sequence[BufferLike] | None = None,
               read_writes: Sequence[BufferLike] | None = None,
               params: Sequence[ParamLike] | None = None, priority: int | None = None,
               after: Event | Sequence[Event] | None = None, on: int | None = None,
               grid: Extents | None = None, block: Extents | None = None,
               commutes: Sequence[BufferLike] | None = None,
               scratch: Sequence[ScratchSpec] | None = None,
               reduces: Sequence[BufferLike] | None = None) -> Event:
        """Submits a task (buffer arguments: reads, then writes, then read_writes, then commutes:
        updated one task at a time, in whichever order tasks commuting on them become ready;
        then reduces: a private copy holding the identity of the buffer's reduction, combined into
        it before its next other access; then scratch workspaces: allocated where the task runs,
        never copied)."""
    def wait_all(self) -> None:
        """Blocks, without the interpreter lock, until every task submitted before has finished."""
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def paused(self) -> _PausedScope:
        """``with rt.paused():`` submits a whole graph, let go at the block's end."""
    def begin_recording(self) -> None:
        """Records the tasks submitted from now on (they run as usual) until end_recording().
        Recordings do not nest."""
    def end_recording(self) -> Graph:
        """Ends the recording; its tasks as a Graph to replay."""
    def start_trace(self) -> None: ...
    def stop_trace(self) -> None: ...
    def trace_events(self) -> list[TraceEvent]: ...
    def write_trace(self, path: str | os.PathLike[str]) -> None: ...
    def write_gantt(self, path: str | os.PathLike[str]) -> None: ...
    def stats(self) -> dict[str, Any]: ...
    def close(self) -> None:
        """Waits for every task, writes data home, ends the runtime. Idempotent."""
    def __enter__(self) -> Runtime: ...
    def __exit__(self, *exc: object) -> None: ...

def from_dlpack(tensor: Any, runtime: Runtime) -> Buffer:
    """``runtime.from_dlpack(tensor)``."""

# --- buffers -----------------------------------------------------------------------------------

class HostView:
    """Host access to a buffer from Buffer.acquire() until release() or the with block's end."""

    def __enter__(self) -> np.ndarray: ...
    def __exit__(self, *exc: object) -> None: ...
    @property
    def array(self) -> np.ndarray: ...
    @property
    def mode(self) -> str: ...
    @property
    def active(self) -> bool: ...
    def release(self) -> None: ...

class Tiles:
    """The tiles of a partitioned buffer, a row-major grid."""

    @property
    def shape(self) -> tuple[int, int]: ...
    @property
    def parent(self) -> Buffer: ...
    def __len__(self) -> int: ...
    def __getitem__(self, ij: tuple[int, int]) -> Buffer: ...
    def __iter__(self) -> Iterator[Buffer]: ...

class Buffer:
    """A runtime buffer over memory Python owns: a row-major matrix, or a vector."""

    @property
    def shape(self) -> tuple[int] | tuple[int, int]: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def cols(self) -> int: ...
    @property
    def ld(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def is_tile(self) -> bool: ...
    def acquire(self, mode: AccessMode = "read_write") -> HostView:
        """Host access once earlier tasks are done (without the interpreter lock while waiting)."""
    def to_numpy(self) -> np.ndarray:
        """A copy of the data."""
    @overload
    def set_reduction(self, op: Literal["sum", "min", "max"]) -> None:
        """Declares how tasks reduce into this buffer (Task.reduce, reduces=[...]): a built-in over
        f32, f64, i32 or i64; the private copies are combined before its next other access."""
    @overload
    def set_reduction(self, identity: Kernel, combine: Kernel) -> None:
        """The same with the user's kernels: identity(copy) fills a copy with the identity;
        combine(into, source) folds source into into."""
    def partition(self, tile_rows: int, tile_cols: int) -> Tiles: ...
    def unpartition(self) -> Event: ...
    def __dlpack__(self, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

# --- kernels, tasks, events --------------------------------------------------------------------

class Kernel:
    """A kernel of one runtime: a built-in, or one you add implementations to."""

    @property
    def name(self) -> str: ...
    def cpu(self, fn: Callable[..., Any] | Literal["noop", "fill", "copy"],
            params: Sequence[DTypeLike] | None = None) -> Kernel:
        """A host implementation: fn(*arrays, *params), params declared by type."""
    def opencl(self, source: str, build_options: str = "", entry: str = "") -> Kernel: ...
    def cuda(self, source: str, build_options: str = "", entry: str = "") -> Kernel: ...
    def source(self, api: str, source: str, build_options: str = "", entry: str = "") -> Kernel: ...
    def binary(self, api: str, path: str, build_options: str = "", entry: str = "") -> Kernel: ...
    def native(self, api: str, fn: int, user_data: int = 0) -> Kernel: ...

class Task:
    """A task under construction; each method returns it; Runtime.submit consumes it."""

    def __init__(self, kernel: Kernel) -> None: ...
    def read(self, buffer: BufferLike) -> Task: ...
    def write(self, buffer: BufferLike) -> Task: ...
    def read_write(self, buffer: BufferLike) -> Task: ...
    def commute(self, buffer: BufferLike) -> Task:
        """Updates the buffer in place, in any order among neighbouring commute tasks on it."""
    def reduce(self, buffer: BufferLike) -> Task:
        """Contributes to the buffer through its reduction (Buffer.set_reduction): the kernel sees
        a private copy holding the identity, to update in place."""
    def scratch(self, spec: ScratchSpec) -> Task:
        """A workspace argument: n bytes (a uint8 vector) or (shape, dtype); never copied, its
        contents undefined when the kernel starts."""
    def arg(self, buffer: BufferLike, mode: AccessMode) -> Task: ...
    def param(self, value: ParamLike) -> Task: ...
    def priority(self, priority: int) -> Task: ...
    def after(self, event: Event | Sequence[Event]) -> Task: ...
    def on(self, device: int) -> Task: ...
    def grid(self, extents: Extents) -> Task: ...
    def block(self, extents: Extents) -> Task: ...
    @property
    def submitted(self) -> bool: ...

class Event:
    """Completion of a submitted task; awaitable."""

    def wait(self) -> None: ...
    def result(self) -> None:
        """Waits, then raises the task's error (a Python kernel's own exception)."""
    def exception(self) -> BaseException | None: ...
    def done(self) -> bool: ...
    @property
    def device(self) -> int: ...
    def add_done_callback(self, fn: Callable[[Event], Any]) -> None: ...
    def __await__(self) -> Generator[Any, None, None]: ...

BindingsLike = Union[Mapping[BufferLike, BufferLike], Sequence[tuple[BufferLike, BufferLike]]]

class Graph:
    """Tasks recorded once (Runtime.begin_recording ... end_recording) and submitted again.

    A replay waits for the work submitted before on the graph's buffers, and work submitted after
    waits for it. Halo tiles are ordered by their neighbours as submitted ones are; reduce
    accesses get fresh private copies each replay, combined at the buffer's next access. The graph
    keeps the buffers of its tasks, and the arrays they wrap, alive.
    """

    def replay(self, bindings: BindingsLike | None = None) -> Event:
        """Submits the recorded tasks again, each bound buffer (or array, wrapped) in place of the
        recorded one of the same shape and dtype: {recorded: bound} or [(recorded, bound), ...]."""
    @property
    def tasks(self) -> int: ...
    @property
    def buffers(self) -> int:
        """Distinct buffers the tasks use (reduce accesses' copies and targets among them)."""
    @property
    def edges(self) -> int: ...
    def __len__(self) -> int: ...
