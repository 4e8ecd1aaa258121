"""hcr.linalg on NumPy arrays and buffers, against NumPy's own results."""

import numpy as np
import pytest

import hcr
from hcr import linalg as la


def spd(n, dtype, seed=3):
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, n))
    return (m @ m.T + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True)])
def test_gemm_matches_numpy(rt, dtype, tol, trans_a, trans_b):
    rng = np.random.default_rng(0)
    m, n, k = 70, 50, 45  # ragged against the tile
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    c = rng.standard_normal((m, n)).astype(dtype)
    expected = 1.5 * (a.T if trans_a else a) @ (b.T if trans_b else b) - 0.5 * c
    la.gemm(rt, a, b, c, alpha=1.5, beta=-0.5, trans_a=trans_a, trans_b=trans_b,
            tile=16).result()
    np.testing.assert_allclose(c, expected, rtol=tol, atol=tol * 10)


def test_gemm_with_buffers_and_arrays_mixed(rt):
    a = np.eye(8)
    b = rt.wrap(np.arange(64, dtype=np.float64).reshape(8, 8))
    c = rt.buffer((8, 8), "f64")
    la.gemm(rt, a, b, c, tile=4).result()
    np.testing.assert_array_equal(c.to_numpy(), np.arange(64).reshape(8, 8))


def test_gemm_a_may_be_b(rt):
    a = np.arange(16, dtype=np.float64).reshape(4, 4)
    c = np.zeros((4, 4))
    la.gemm(rt, a, a, c, tile=2).result()
    np.testing.assert_allclose(c, a @ a)


@pytest.mark.parametrize("uplo", ["lower", "upper"])
def test_potrf_and_potrs_match_numpy(rt, uplo):
    n = 96
    a = spd(n, np.float64)
    keep = a.copy()
    x = np.random.default_rng(5).standard_normal((n, 3))
    rhs = keep @ x
    la.potrf(rt, a, uplo=uplo, tile=32)
    la.potrs(rt, a, rhs, uplo=uplo, tile=32).result()
    np.testing.assert_allclose(rhs, x, rtol=1e-8, atol=1e-8)
    factor = np.tril(a) if uplo == "lower" else np.triu(a).T
    np.testing.assert_allclose(factor, np.linalg.cholesky(keep), rtol=1e-8, atol=1e-8)


def test_potrs_of_a_vector(rt):
    a = spd(40, np.float32)
    keep = a.copy()
    b = np.ones(40, dtype=np.float32)
    la.potrf(rt, a, tile=16)
    la.potrs(rt, a, b, tile=16).result()
    np.testing.assert_allclose(b, np.linalg.solve(keep, np.ones(40)), rtol=1e-3)


def test_syrk_and_trsm_match_numpy(rt):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((30, 20))
    c = np.zeros((30, 30))
    la.syrk(rt, a, c, alpha=2.0, tile=8).result()
    np.testing.assert_allclose(np.tril(c), np.tril(2 * a @ a.T), atol=1e-10)
    assert (np.triu(c, 1) == 0).all()  # the other triangle is untouched
    l = np.tril(rng.standard_normal((20, 20))) + 20 * np.eye(20)
    b = rng.standard_normal((20, 6))
    x = b.copy()
    la.trsm(rt, l, x, side="left", uplo="lower", tile=8).result()
    np.testing.assert_allclose(l @ x, b, atol=1e-10)


def test_getrf_nopiv(rt):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((24, 24)) + 24 * np.eye(24)
    keep = a.copy()
    la.getrf_nopiv(rt, a, tile=8).result()
    lower = np.tril(a, -1) + np.eye(24)
    np.testing.assert_allclose(lower @ np.triu(a), keep, atol=1e-10)


def test_not_positive_definite_fails_the_event(rt):
    a = -np.eye(8)
    with pytest.raises(hcr.DependencyError, match="positive definite|minor"):
        la.potrf(rt, a, tile=4).result()


def test_misuse_is_refused_at_the_call(rt):
    with pytest.raises(hcr.InvalidArgumentError, match="3x4.*5x6|shapes"):
        la.gemm(rt, np.zeros((3, 4)), np.zeros((5, 6)), np.zeros((3, 6)))
    a = np.zeros((4, 4))
    with pytest.raises(hcr.InvalidArgumentError, match="C shares memory with A"):
        la.gemm(rt, a, np.eye(4), a)
    with pytest.raises(hcr.InvalidArgumentError, match="float32, .* float64|f32.*f64"):
        la.gemm(rt, np.zeros((2, 2), np.float32), np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(hcr.InvalidArgumentError, match="float32 and float64"):
        la.potrf(rt, np.eye(3, dtype=np.int32))
    ro = np.eye(3)
    ro.flags.writeable = False
    with pytest.raises(hcr.InvalidArgumentError, match="read-only"):
        la.potrf(rt, ro)
    with pytest.raises(hcr.InvalidArgumentError, match="Fortran"):
        la.potrf(rt, np.asfortranarray(spd(4, np.float64)))
    with pytest.raises(hcr.InvalidArgumentError, match="tile 0"):
        la.potrf(rt, np.eye(3), tile=0)
    with pytest.raises(hcr.InvalidArgumentError, match="uplo 'middle'"):
        la.potrf(rt, np.eye(3), uplo="middle")
    with pytest.raises(hcr.InvalidArgumentError, match="NumPy array or an hcr.Buffer"):
        la.potrf(rt, [[1.0]])
    with pytest.raises(hcr.InvalidArgumentError, match="expected an hcr.Runtime"):
        la.potrf(None, np.eye(3))


def test_results_come_home_from_a_device_with_its_own_memory(sim_rt):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    c = np.zeros((64, 64), dtype=np.float32)
    ev = la.gemm(sim_rt, a, b, c, tile=32)
    ev.result()  # also waits for the copy into c
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert sim_rt.stats()["data"]["bytes_moved"] > 0


def test_calls_chain_without_waiting(rt):
    n = 64
    a = spd(n, np.float64)
    keep = a.copy()
    b = np.ones((n, 1))
    first = la.potrf(rt, a, tile=16)
    second = la.potrs(rt, a, b, tile=16)  # waits for the factor through the tiles
    second.result()
    assert first.done()
    np.testing.assert_allclose(keep @ b, np.ones((n, 1)), atol=1e-9)
