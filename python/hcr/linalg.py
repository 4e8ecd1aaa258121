"""Tiled dense linear algebra on hcr tasks (``hcr::linalg``) for NumPy arrays or hcr buffers.

Every function takes the runtime first, then row-major float32 or float64 operands: NumPy arrays
(wrapped without copying; C-contiguous or with a row stride) or :class:`hcr.Buffer` objects. It
partitions them into ``tile`` x ``tile`` tiles, submits one task per tile operation on the
plugins' built-in kernels and returns an :class:`hcr.Event` at once: calls chain through the
tiles' dependencies (``potrs`` right after ``potrf`` waits for the factor). For an output given as
a NumPy array the Event also covers the copy home, so the array holds the result once it is done::

    ev = hcr.linalg.gemm(rt, a, b, c)           # c = a @ b
    ev.result()                                 # or: await ev
    hcr.linalg.potrf(rt, spd)                   # L in spd's lower triangle
    hcr.linalg.potrs(rt, spd, rhs).result()     # rhs = spd^-1 rhs

Misuse (shapes that do not fit, an output aliasing an input, mixed dtypes, a read-only output)
raises :class:`hcr.InvalidArgumentError` at the call, naming the values; a failed tile task (a
matrix that is not positive definite) fails the Event.
"""

from ._core import linalg as _la

gemm = _la.gemm
syrk = _la.syrk
trsm = _la.trsm
potrf = _la.potrf
potrs = _la.potrs
getrf_nopiv = _la.getrf_nopiv

__all__ = ["gemm", "syrk", "trsm", "potrf", "potrs", "getrf_nopiv"]
