"""Type stubs of hcr.linalg: tiled dense linear algebra on NumPy arrays or hcr buffers."""

from __future__ import annotations

from typing import Literal, Union

import numpy as np

from . import Buffer, Event, Runtime

Operand = Union[np.ndarray, Buffer]
Uplo = Literal["lower", "upper", "L", "U"]

def gemm(runtime: Runtime, a: Operand, b: Operand, c: Operand, *, alpha: float = 1.0,
         beta: float = 0.0, trans_a: bool = False, trans_b: bool = False,
         tile: int = 512) -> Event:
    """C = alpha op(A) op(B) + beta C (with beta == 0, C is not read)."""

def syrk(runtime: Runtime, a: Operand, c: Operand, *, uplo: Uplo = "lower", trans: bool = False,
         alpha: float = 1.0, beta: float = 0.0, tile: int = 512) -> Event:
    """C = alpha op(A) op(A)^T + beta C on the `uplo` triangle of C."""

def trsm(runtime: Runtime, a: Operand, b: Operand, *, side: Literal["left", "right"] = "left",
         uplo: Uplo = "lower", trans: bool = False, unit_diag: bool = False, alpha: float = 1.0,
         tile: int = 512) -> Event:
    """Solves op(A) X = alpha B (left) or X op(A) = alpha B (right); X overwrites B."""

def potrf(runtime: Runtime, a: Operand, *, uplo: Uplo = "lower", tile: int = 256) -> Event:
    """Cholesky factorisation in place (the `uplo` triangle)."""

def potrs(runtime: Runtime, a: Operand, b: Operand, *, uplo: Uplo = "lower",
          tile: int = 256) -> Event:
    """Solves A X = B from potrf's factor; X overwrites B (n x r, or a vector)."""

def getrf_nopiv(runtime: Runtime, a: Operand, *, tile: int = 256) -> Event:
    """LU factorisation without pivoting, in place."""
