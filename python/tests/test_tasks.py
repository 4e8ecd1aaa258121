"""Kernels and tasks: Python functions as CPU kernels, parameters, the plugins' built-ins, task
order, errors reaching Events, asyncio."""

import asyncio
import threading

import numpy as np
import pytest

import hcr


def test_python_kernel_gets_views_and_declared_params(rt):
    seen = {}

    def kernel(x, y, a, n):
        seen.update(shapes=(x.shape, y.shape), writeable=(x.flags.writeable, y.flags.writeable),
                    params=(a, n), types=(type(a), type(n)))
        y[:] = x * a + n

    k = rt.kernel("axpb").cpu(kernel, params=["f32", np.int64])
    x = rt.wrap(np.arange(4, dtype=np.float32))
    y = rt.buffer(4, "f32")
    rt.submit(k, reads=[x], writes=[y], params=[0.5, 3]).result()
    np.testing.assert_allclose(y.to_numpy(), np.arange(4) * 0.5 + 3)
    assert seen["shapes"] == ((1, 4), (1, 4))  # kernels see row-major matrices; a vector is 1 x n
    assert seen["writeable"] == (False, True)  # a read argument cannot be written
    assert seen["params"] == (0.5, 3) and seen["types"] == (float, int)


def test_declared_params_are_converted_and_checked_at_submit(rt):
    k = rt.kernel("p").cpu(lambda *p: None, params=["i32", "u8"])
    with pytest.raises(hcr.InvalidArgumentError, match="declares 2 parameter"):
        rt.submit(k, params=[1])
    with pytest.raises(hcr.InvalidArgumentError, match="out of range for u8"):
        rt.submit(k, params=[1, 256])
    with pytest.raises(hcr.InvalidArgumentError, match="float where an integer"):
        rt.submit(k, params=[1.5, 1])
    with pytest.raises(hcr.InvalidArgumentError, match="declares i32"):
        rt.submit(k, params=[hcr.f32(1), 1])
    rt.submit(k, params=[hcr.i32(-4), np.uint8(7)]).result()
    undeclared = rt.kernel("q").cpu(lambda: None)
    with pytest.raises(hcr.InvalidArgumentError, match="declares 0 parameter"):
        rt.submit(undeclared, params=[1.0])


def test_param_constructors_check_ranges():
    assert hcr.f32(2.5).dtype == "f32" and len(hcr.f32(2.5).data) == 4
    assert hcr.i64(-1).data == (-1).to_bytes(8, "little", signed=True)
    with pytest.raises(hcr.InvalidArgumentError, match="out of range for f32"):
        hcr.f32(1e39)
    with pytest.raises(hcr.InvalidArgumentError, match="out of range for i32"):
        hcr.i32(2**31)
    with pytest.raises(hcr.InvalidArgumentError, match="out of range for u8"):
        hcr.u8(-1)
    with pytest.raises(hcr.InvalidArgumentError, match="not a power of two"):
        hcr.Param(b"abc", align=3)


def test_inferred_params_reach_a_native_kernel(rt):
    fill = rt.kernel("fill").cpu("fill")
    d = rt.buffer(3, "f64")
    rt.submit(fill, writes=[d], params=[2.5]).result()  # a float is an f64
    i = rt.buffer(3, "i64")
    rt.submit(fill, writes=[i], params=[-7]).result()  # an int is an i64
    f = rt.buffer(3, "f32")
    rt.submit(fill, writes=[f], params=[np.float32(1.25)]).result()  # NumPy scalars keep theirs
    assert d.to_numpy().tolist() == [2.5] * 3
    assert i.to_numpy().tolist() == [-7] * 3
    assert f.to_numpy().tolist() == [1.25] * 3
    # An f64 where the buffer holds f32: the task fails, naming both sizes.
    with pytest.raises(hcr.InvalidArgumentError, match="8 bytes.*f32"):
        rt.submit(fill, writes=[f], params=[2.5]).result()


def test_uninferable_params_are_refused(rt):
    k = rt.kernel("fill").cpu("fill")
    b = rt.buffer(2, "f32")
    with pytest.raises(hcr.InvalidArgumentError, match="is a bool"):
        rt.submit(k, writes=[b], params=[True])
    with pytest.raises(hcr.InvalidArgumentError, match="cannot pass"):
        rt.submit(k, writes=[b], params=["text"])


def test_builtin_gemm_with_its_parameter_block(rt):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 5)).astype(np.float32)
    b = rng.standard_normal((5, 6)).astype(np.float32)
    c = np.ones((8, 6), dtype=np.float32)
    gemm = rt.kernel("gemm_f32")
    ev = rt.submit(gemm, reads=[rt.wrap(a), rt.wrap(b)], read_writes=[rt.wrap(c)],
                   params=[hcr.gemm_params(alpha=2.0, beta=1.0)])
    ev.result()
    np.testing.assert_allclose(c, 2 * a @ b + 1, rtol=1e-5, atol=1e-5)


def test_builtin_with_a_wrong_parameter_fails_clearly(rt):
    a = rt.buffer((2, 2), "f32")
    with pytest.raises(hcr.InvalidArgumentError, match="hcr_gemm_params_t"):
        rt.submit(rt.kernel("gemm_f32"), reads=[a, a], read_writes=[rt.buffer((2, 2))],
                  params=[hcr.f32(1)]).result()


def test_task_builder_keeps_argument_order(rt):
    order = []
    k = rt.kernel("order").cpu(lambda p, q, r: order.append((p.shape, q.shape, r.shape)))
    a, b, c = rt.buffer((1, 1)), rt.buffer((2, 2)), rt.buffer((3, 3))
    task = hcr.Task(k).write(b).read(a).arg(c, "read_write").priority(5)
    ev = rt.submit(task)
    ev.result()
    assert order == [((2, 2), (1, 1), (3, 3))]
    assert task.submitted
    with pytest.raises(hcr.InvalidArgumentError, match="submitted already"):
        rt.submit(task)
    with pytest.raises(hcr.InvalidArgumentError, match="submitted already"):
        task.read(a)
    with pytest.raises(hcr.InvalidArgumentError, match="access mode 'rwx'"):
        hcr.Task(k).arg(a, "rwx")


def test_kernel_exception_reaches_the_event(rt):
    class Boom(Exception):
        pass

    def bad(x):
        raise Boom("kernel failed on purpose")

    b = rt.buffer(2, "f32")
    ev = rt.submit(rt.kernel("bad").cpu(bad), writes=[b])
    with pytest.raises(Boom, match="on purpose") as info:
        ev.result()
    assert info.value.__traceback__ is not None
    assert isinstance(ev.exception(), Boom) and ev.exception() is info.value
    # A reader of what it wrote fails with a dependency error carrying its message.
    later = rt.submit(rt.kernel("reader").cpu(lambda x: None), reads=[b])
    with pytest.raises(hcr.DependencyError, match="kernel 'bad' raised Boom: kernel failed"):
        later.result()


def test_kernel_writing_a_read_argument_fails_its_task(rt):
    b = rt.buffer(2, "f32")

    def writes_read(x):
        x[0, 0] = 1

    ev = rt.submit(rt.kernel("w").cpu(writes_read), reads=[b])
    with pytest.raises(ValueError, match="read-only"):
        ev.result()


def test_views_kept_past_the_call_become_read_only(rt):
    kept = []
    b = rt.buffer((2, 2), "f64")
    rt.submit(rt.kernel("keep").cpu(lambda x: kept.append(x)), writes=[b]).result()
    assert not kept[0].flags.writeable


def test_after_orders_independent_tasks(rt):
    log = []
    gate = threading.Event()

    def first():
        gate.wait(5)
        log.append("first")

    a = rt.submit(rt.kernel("first").cpu(first))
    b = rt.submit(rt.kernel("second").cpu(lambda: log.append("second")), after=[a])
    gate.set()
    b.result()
    assert log == ["first", "second"]


def test_on_pins_a_device_and_event_reports_it(rt):
    ev = rt.submit(rt.kernel("noop").cpu("noop"), on=0)
    ev.result()
    assert ev.done() and ev.device == 0
    with pytest.raises(hcr.Error):
        rt.submit(rt.kernel("noop").cpu("noop"), on=5)


def test_done_callback_and_await(rt):
    gate = threading.Event()
    k = rt.kernel("waits").cpu(lambda: gate.wait(5))
    ev = rt.submit(k)
    called = threading.Event()
    seen = []
    ev.add_done_callback(lambda e: (seen.append(e), called.set()))

    async def main():
        gate.set()
        return await ev

    assert asyncio.run(main()) is None
    assert called.wait(5) and seen[0] is ev


def test_await_raises_the_task_error(rt):
    def bad():
        raise KeyError("missing")

    async def main():
        return await rt.submit(rt.kernel("bad").cpu(bad))

    with pytest.raises(KeyError, match="missing"):
        asyncio.run(main())


def test_many_awaits_at_once(rt):
    k = rt.kernel("noop").cpu("noop")

    async def main():
        events = [rt.submit(k) for _ in range(200)]
        await asyncio.gather(*events)
        return all(e.done() for e in events)

    assert asyncio.run(main())


def test_python_kernels_submit_tasks(rt):
    out = rt.buffer(3, "f64")
    fill = rt.kernel("fill").cpu("fill")

    def parent():
        rt.submit(fill, writes=[out], params=[4.0])

    rt.submit(rt.kernel("parent").cpu(parent)).result()
    rt.wait_all()  # waits for tasks kernels submit too
    assert out.to_numpy().tolist() == [4.0] * 3


def test_native_copy_kernel(rt):
    src = rt.wrap(np.arange(6, dtype=np.int32).reshape(2, 3))
    dst = rt.buffer((2, 3), "i32")
    rt.submit(rt.kernel("copy").cpu("copy"), reads=[src], writes=[dst]).result()
    assert dst.to_numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(hcr.InvalidArgumentError, match="differ"):
        rt.submit(rt.kernel("copy").cpu("copy"), reads=[src], writes=[rt.buffer((3, 2), "i32")]
                  ).result()
    with pytest.raises(hcr.InvalidArgumentError, match="native kernels"):
        rt.kernel("x").cpu("nothing")


def test_kernels_and_tasks_of_another_runtime(rt):
    from conftest import cpu_config
    with hcr.Runtime(cpu_config()) as other:
        k = other.kernel("noop").cpu("noop")
        with pytest.raises(hcr.InvalidArgumentError, match="another runtime"):
            rt.submit(k)
        b = other.buffer(2, "f32")
        with pytest.raises(hcr.Error):
            rt.submit(rt.kernel("fill").cpu("fill"), writes=[b], params=[hcr.f32(0)])


def test_python_kernels_on_a_simulated_gpu(sim_rt):
    a = np.arange(8, dtype=np.float64)
    x = sim_rt.wrap(a)
    k = sim_rt.kernel("double").cpu(lambda v: v.__imul__(2))
    for _ in range(3):
        sim_rt.submit(k, read_writes=[x])
    with x.acquire("read") as v:  # brings the data home from the device's memory
        np.testing.assert_array_equal(v, np.arange(8) * 8)
    assert sim_rt.stats()["data"]["bytes_moved"] > 0


def test_awaiting_held_tasks_leaves_other_events_free(rt):
    gate = threading.Event()
    first = rt.submit(rt.kernel("gated").cpu(lambda: gate.wait(5)))
    noop = rt.kernel("noop").cpu("noop")

    async def main():
        rt.pause()
        held = [rt.submit(noop) for _ in range(20)]
        everything = asyncio.ensure_future(asyncio.gather(*held))
        await asyncio.sleep(0.01)  # their waiters now wait for tasks the pause holds
        gate.set()
        await first  # reported although every other waiter is busy
        rt.resume()
        await everything
        return all(e.done() for e in held)

    assert asyncio.run(main())


def test_arrays_given_to_tasks_are_wrapped(rt):
    a = np.zeros(5, dtype=np.float64)
    fill = rt.kernel("fill").cpu("fill")
    rt.submit(fill, writes=[a], params=[1.5]).result()
    assert (a == 1.5).all()
    b = np.zeros((2, 2), dtype=np.int64)
    rt.submit(hcr.Task(fill).write(b).param(3)).result()
    assert (b == 3).all()
    ro = np.ones(3)
    ro.flags.writeable = False
    with pytest.raises(hcr.InvalidArgumentError, match="read-only"):
        rt.submit(fill, writes=[ro], params=[0.0])
    with pytest.raises(hcr.InvalidArgumentError, match="expected an hcr.Buffer, got list"):
        rt.submit(fill, writes=[[1.0]], params=[0.0])


def test_commute_updates_count_once_each_and_reads_after_see_them(rt):
    # commutes=[acc] and Task.commute: updated one task at a time, in any order; a read after the
    # run waits for all of it.
    acc = rt.buffer(1, "f64")
    seen = rt.buffer(1, "f64")
    inc = rt.kernel("inc").cpu(lambda a: a.__iadd__(1))
    copy = rt.kernel("copy").cpu(lambda src, dst: dst.__setitem__(slice(None), src))
    for _ in range(10):
        rt.submit(inc, commutes=[acc])
    for _ in range(5):
        rt.submit(hcr.Task(inc).commute(acc))
    rt.submit(copy, reads=[acc], writes=[seen])
    rt.submit(hcr.Task(inc).arg(acc, "commute")).result()
    assert seen.to_numpy().tolist() == [15.0]
    assert acc.to_numpy().tolist() == [16.0]


def test_reduce_sums_private_copies_before_the_next_read(rt):
    # reduces=[acc], Task.reduce and the 'reduce' mode: each task adds into a private copy holding
    # 0; the read combines them (a dot product of 16 chunks against NumPy's, exact in f64 with
    # integers); a second round adds to the value read.
    x = np.arange(1600, dtype=np.float64)
    y = np.arange(1600, dtype=np.float64) % 7
    acc = rt.buffer(1, "f64")
    acc.set_reduction("sum")
    dot = rt.kernel("dot").cpu(lambda a, b, s: s.__iadd__(float(np.vdot(a, b))))
    for i in range(16):
        chunk = slice(i * 100, (i + 1) * 100)
        if i % 3 == 0:
            rt.submit(dot, reads=[x[chunk].copy(), y[chunk].copy()], reduces=[acc])
        elif i % 3 == 1:
            rt.submit(hcr.Task(dot).read(x[chunk].copy()).read(y[chunk].copy()).reduce(acc))
        else:
            rt.submit(hcr.Task(dot).read(x[chunk].copy()).read(y[chunk].copy()).arg(acc, "reduce"))
    assert acc.to_numpy().tolist() == [float(np.dot(x, y))]
    for _ in range(4):
        rt.submit(dot, reads=[x[:10].copy(), y[:10].copy()], reduces=[acc])
    rt.wait_all()
    assert acc.to_numpy().tolist() == [float(np.dot(x, y)) + 4 * float(np.dot(x[:10], y[:10]))]


def test_reduce_min_max_user_kernels_and_errors(rt):
    lo = rt.buffer(3, "i64")
    lo.set_reduction("min")
    put = rt.kernel("put").cpu(lambda v, k: v.__setitem__(slice(None), np.minimum(v, [k, -k, 5])),
                               params=["i64"])
    for k in range(1, 9):
        rt.submit(put, reduces=[lo], params=[k])
    assert lo.to_numpy().tolist() == [0, -8, 0]  # the buffer's zeros take part

    prod = rt.buffer(2, "f64")
    with prod.acquire("write") as a:
        a[:] = [1.0, 2.0]
    one = rt.kernel("one").cpu(lambda v: v.__setitem__(slice(None), 1.0))
    times = rt.kernel("times").cpu(lambda into, src: into.__imul__(src))
    scale = rt.kernel("scale").cpu(lambda v, k: v.__imul__(k), params=["f64"])
    prod.set_reduction(one, times)
    for k in (2.0, 3.0, 5.0):
        rt.submit(hcr.Task(scale).reduce(prod).param(k))
    assert prod.to_numpy().tolist() == [30.0, 60.0]

    plain = rt.buffer(1, "f32")
    with pytest.raises(hcr.InvalidArgumentError, match="has no reduction"):
        rt.submit(put, reduces=[plain], params=[1])
    with pytest.raises(hcr.InvalidArgumentError, match="'avg' is not"):
        plain.set_reduction("avg")
    with pytest.raises(hcr.InvalidArgumentError, match="u8"):
        rt.buffer(4, "u8").set_reduction("sum")


def test_scratch_is_a_workspace_argument_after_the_buffers(rt):
    # scratch=[n] and Task.scratch((shape, dtype)): the kernel gets a writable array of that shape
    # after its buffers; what it computes through it is right, and nothing is copied home.
    out = rt.buffer(4, "f64")
    shapes = []

    def work(dst, tmp):
        shapes.append((tmp.shape, tmp.dtype.name))
        tmp[:] = 2.0
        dst[:] = tmp.sum()

    k = rt.kernel("work_scratch").cpu(work)
    rt.submit(k, writes=[out], scratch=[((3, 5), "f32")]).result()
    assert out.to_numpy().tolist() == [30.0] * 4
    rt.submit(hcr.Task(k).write(out).scratch(((2, 2), "f64"))).result()
    assert out.to_numpy().tolist() == [8.0] * 4
    raw = []
    b = rt.kernel("bytes_scratch").cpu(lambda dst, tmp: raw.append((tmp.shape, tmp.dtype.name)))
    rt.submit(b, writes=[out], scratch=[16]).result()
    assert shapes == [((3, 5), "float32"), ((2, 2), "float64")]
    assert raw[0][1] == "uint8" and raw[0][0][-1] == 16
    with pytest.raises(hcr.InvalidArgumentError):
        rt.submit(b, writes=[out], scratch=[0])
    with pytest.raises(hcr.InvalidArgumentError):
        rt.submit(b, writes=[out], scratch=["four"])
