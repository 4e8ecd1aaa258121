"""Buffers over NumPy memory: wrapping without copies, the layouts refused, host views, tiles and
the lifetime of wrapped arrays."""

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import hcr


def fill(rt):
    return rt.kernel("fill").cpu("fill")


def test_wrap_shares_memory_both_ways(rt):
    a = np.zeros((3, 4), dtype=np.float32)
    buf = rt.wrap(a)
    assert buf.shape == (3, 4) and buf.dtype == np.float32 and buf.ld == 4
    rt.submit(fill(rt), writes=[buf], params=[hcr.f32(7)]).result()
    assert (a == 7).all()
    with buf.acquire("read_write") as v:
        assert np.shares_memory(v, a)
        v[0, 0] = -1
    assert a[0, 0] == -1


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64,
                                   np.uint8])
def test_every_supported_dtype(rt, dtype):
    a = np.arange(6, dtype=dtype)
    buf = rt.wrap(a)
    assert buf.dtype == dtype and buf.shape == (6,) and buf.ndim == 1
    np.testing.assert_array_equal(buf.to_numpy(), a)


def test_wrap_with_a_row_stride(rt):
    a = np.zeros((4, 6), dtype=np.float64)
    buf = rt.wrap(a[:, 1:4])  # a 4x3 window of a 4x6 array
    assert buf.shape == (4, 3) and buf.ld == 6
    rt.submit(fill(rt), writes=[buf], params=[1.5]).result()
    assert (a[:, 1:4] == 1.5).all()
    assert (a[:, 0] == 0).all() and (a[:, 4:] == 0).all()


@pytest.mark.parametrize("make, message", [
    (lambda: np.zeros((3, 4), dtype=np.float32, order="F"), "Fortran"),
    (lambda: np.zeros((3, 8), dtype=np.float32)[:, ::2], "contiguous"),
    (lambda: np.zeros((5,), dtype=np.float64)[::-1], "contiguous"),
    (lambda: np.zeros((2, 3, 4), dtype=np.float32), "3-d array of shape \\(2, 3, 4\\)"),
    (lambda: np.array(1.0, dtype=np.float32), "0-d array"),
    (lambda: np.zeros(4, dtype=np.complex64), "unsupported dtype complex64"),
    (lambda: np.zeros(4, dtype=bool), "unsupported dtype bool"),
    (lambda: np.zeros(4, dtype=">f4"), "big-endian"),
    (lambda: [1.0, 2.0], "expected a numpy.ndarray, got list"),
    (lambda: np.zeros((0, 3), dtype=np.float32), "0x3"),
])
def test_wrap_refuses_what_it_cannot_share(rt, make, message):
    with pytest.raises(hcr.InvalidArgumentError, match=message):
        rt.wrap(make())


def test_wrap_refuses_unaligned_memory(rt):
    raw = np.zeros(17, dtype=np.uint8)
    a = raw[1:].view(np.float32) if raw[1:].size % 4 == 0 else None
    assert a is not None and not a.flags.aligned
    with pytest.raises(hcr.InvalidArgumentError, match="aligned"):
        rt.wrap(a)


def test_read_only_arrays_are_read_only_buffers(rt):
    a = np.arange(4, dtype=np.float32)
    a.flags.writeable = False
    buf = rt.wrap(a)
    assert buf.readonly
    with pytest.raises(hcr.InvalidArgumentError, match="read-only.*'write'"):
        rt.submit(fill(rt), writes=[buf], params=[hcr.f32(1)])
    with pytest.raises(hcr.InvalidArgumentError, match="read-only"):
        hcr.Task(fill(rt)).read_write(buf)
    with pytest.raises(hcr.InvalidArgumentError, match="read-only"):
        buf.acquire("write")
    with buf.acquire("read") as v:
        assert not v.flags.writeable and v.sum() == 6
    with pytest.raises(hcr.InvalidArgumentError, match="readonly=True"):
        rt.wrap(a, readonly=False)
    b = np.zeros(3, dtype=np.float32)
    assert rt.wrap(b, readonly=True).readonly


def test_runtime_buffers(rt):
    m = rt.buffer((3, 5), "f64")
    assert m.shape == (3, 5) and m.dtype == np.float64
    assert (m.to_numpy() == 0).all()
    v = rt.buffer(7, np.int32, zero=False)
    assert v.shape == (7,) and v.dtype == np.int32
    with pytest.raises(hcr.InvalidArgumentError, match="not a dtype|unsupported dtype"):
        rt.buffer((2, 2), "complex128")


def test_views_turn_read_only_after_release_and_stay_valid(rt):
    buf = rt.buffer((2, 2), "f32")
    view = buf.acquire("write")
    a = view.array
    a[:] = 5
    view.release()
    view.release()  # idempotent
    assert not a.flags.writeable and not view.active
    with pytest.raises(ValueError):
        a[0, 0] = 1
    rt.close()
    assert a.sum() == 20  # readable memory even after the runtime ended


def test_acquire_waits_for_the_writer(rt):
    gate = threading.Event()
    buf = rt.buffer(4, "f64")

    def slow_write(v):
        gate.wait()
        v[:] = 9

    rt.submit(rt.kernel("slow").cpu(slow_write), writes=[buf])
    threading.Timer(0.05, gate.set).start()
    with buf.acquire("read") as v:  # waits without the lock, so the kernel can run
        assert (v == 9).all()


def test_acquire_that_would_wait_for_itself_raises(rt):
    buf = rt.buffer(4, "f32")
    with buf.acquire("write"):
        with pytest.raises(hcr.InvalidArgumentError):
            buf.acquire("read")


def test_to_numpy_is_a_copy(rt):
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    buf = rt.wrap(a)
    c = buf.to_numpy()
    c[0, 0] = 100
    assert a[0, 0] == 0 and c.flags.writeable


def test_partition_into_tiles_for_tasks(rt):
    a = np.zeros((5, 5), dtype=np.float64)
    buf = rt.wrap(a)
    tiles = buf.partition(2, 2)
    assert tiles.shape == (3, 3) and len(tiles) == 9
    assert tiles[2, 2].shape == (1, 1) and tiles[0, 2].shape == (2, 1)
    assert all(t.is_tile and t.ld == 5 for t in tiles)
    k = fill(rt)
    for i in range(3):
        for j in range(3):
            rt.submit(k, writes=[tiles[i, j]], params=[float(10 * i + j)])
    with pytest.raises(hcr.InvalidArgumentError, match="partitioned"):
        rt.submit(k, writes=[buf], params=[0.0])
    with pytest.raises(hcr.InvalidArgumentError, match=r"tile \(3, 0\) outside a 3x3 grid"):
        tiles[3, 0]
    buf.unpartition().result()
    expected = np.array([[10 * (r // 2) + c // 2 for c in range(5)] for r in range(5)], float)
    np.testing.assert_array_equal(buf.to_numpy(), expected)


def test_wrapped_array_lives_while_tasks_may_use_it(rt):
    gate = threading.Event()

    def held(v):
        gate.wait()
        v[:] = 1

    k = rt.kernel("held").cpu(held)
    a = np.zeros(1 << 16, dtype=np.float32)
    alive = weakref.ref(a)
    rt.submit(k, writes=[rt.wrap(a)])
    del a
    gc.collect()
    assert alive() is not None  # the task has not run: the buffer's memory must stay
    gate.set()
    rt.wait_all()
    gc.collect()
    assert alive() is None  # released once the task finished


def test_buffer_never_used_releases_at_once(rt):
    a = np.zeros(8, dtype=np.float32)
    alive = weakref.ref(a)
    buf = rt.wrap(a)
    del a, buf
    gc.collect()
    assert alive() is None


def test_tiles_keep_the_parent_memory(rt):
    a = np.zeros((4, 4), dtype=np.float32)
    alive = weakref.ref(a)
    tiles = rt.wrap(a).partition(2, 2)
    del a
    gc.collect()
    t = tiles[1, 1]
    del tiles
    gc.collect()
    assert alive() is not None
    rt.submit(fill(rt), writes=[t], params=[hcr.f32(2)]).result()
    with t.acquire("read") as v:
        assert (v == 2).all()


def test_one_buffer_per_wrapped_memory(rt):
    a = np.zeros((4, 4), dtype=np.float32)
    first = rt.wrap(a)
    assert rt.wrap(a) is first  # tasks on either are ordered: they are one buffer
    assert rt.wrap(a[:, :2]) is not first  # another layout is another buffer
    assert rt.wrap(a, readonly=True) is not first
    k = rt.kernel("inc").cpu(lambda v: v.__iadd__(1))
    for _ in range(10):
        rt.submit(k, read_writes=[rt.wrap(a)])
    rt.wait_all()
    assert (a == 10).all()


def test_wraps_made_inline_are_ordered(rt):
    a = np.zeros(8)

    def increment(v):  # read, let other threads run, write: lost updates if tasks overlapped
        old = v.copy()
        time.sleep(0.001)
        v[:] = old + 1

    k = rt.kernel("inc").cpu(increment)
    for _ in range(30):
        rt.submit(k, read_writes=[rt.wrap(a)])  # the Buffer object dies at once each time
    rt.wait_all()
    assert (a == 30).all()
