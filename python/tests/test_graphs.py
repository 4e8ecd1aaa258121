"""Recorded graphs: Runtime.begin_recording / end_recording and Graph.replay, with bindings as a
dict or pairs, reductions replayed, the NumPy arrays a graph uses kept alive, misuse."""

import gc
import weakref

import numpy as np
import pytest

import hcr


def affine(rt):
    # out = in * 2 + add
    return rt.kernel("affine").cpu(lambda a, b, add: b.__setitem__(slice(None), a * 2 + add),
                                   params=["i64"])


def test_replay_runs_the_recorded_tasks_again_in_order(rt):
    k = affine(rt)
    a, b, c = (rt.wrap(np.zeros(4, dtype=np.int64)) for _ in range(3))
    rt.begin_recording()
    rt.submit(k, reads=[a], writes=[b], params=[1])        # b = 2a + 1
    rt.submit(hcr.Task(k).read(b).write(c).param(0))      # c = 2b
    rt.submit(k, reads=[c], writes=[a], params=[-1])      # a = 2c - 1
    g = rt.end_recording()
    assert isinstance(g, hcr.Graph)
    assert (g.tasks, g.buffers, g.edges, len(g)) == (3, 3, 3, 3)  # b: 1 -> 2, c: 2 -> 3, a: 1 -> 3
    assert repr(g) == "hcr.Graph(3 tasks, 3 buffers, 3 edges)"
    want = np.zeros(4, dtype=np.int64)
    for _ in range(1 + 4):  # the recording's run, then four replays chained without waiting
        want = 2 * (2 * (2 * want + 1)) - 1
    events = [g.replay() for _ in range(4)]
    events[-1].result()
    assert a.to_numpy().tolist() == want.tolist()


def test_bindings_as_a_dict_or_pairs_and_arrays(rt):
    k = affine(rt)
    x, y = np.arange(5, dtype=np.int64), np.zeros(5, dtype=np.int64)
    xb, yb = rt.wrap(x), rt.wrap(y)
    rt.begin_recording()
    rt.submit(k, reads=[xb], writes=[yb], params=[3])
    g = rt.end_recording()
    g.replay().result()
    assert y.tolist() == (2 * np.arange(5) + 3).tolist()
    x2, y2 = np.full(5, 10, dtype=np.int64), np.zeros(5, dtype=np.int64)
    g.replay({xb: rt.wrap(x2)}).result()  # a dict; y written again
    assert y.tolist() == [23] * 5
    g.replay([(xb, x2), (y, y2)]).result()  # pairs; arrays on both sides (y's wrap is yb)
    assert y2.tolist() == [23] * 5 and y.tolist() == [23] * 5
    assert x.tolist() == list(range(5))  # the recorded input, untouched


def test_graph_keeps_the_arrays_it_wraps_alive(rt):
    k = affine(rt)
    out = np.zeros(3, dtype=np.int64)

    def record():
        src = np.array([1, 2, 3], dtype=np.int64)  # only the graph refers to it afterwards
        rt.begin_recording()
        rt.submit(k, reads=[src], writes=[out], params=[0])
        return rt.end_recording(), weakref.ref(src)

    g, src = record()
    rt.wait_all()
    gc.collect()
    assert src() is not None, "the graph lost the array its task reads"
    out[:] = 0
    g.replay().result()
    assert out.tolist() == [2, 4, 6]
    del g
    for _ in range(3):  # the buffer's last tasks done, its reference dropped
        rt.wait_all()
        gc.collect()
    assert src() is None, "the array outlived the graph"


def test_reductions_replayed_with_fresh_copies(rt):
    # A dot product of 8 chunks into a sum reduction, recorded once, replayed with other inputs and
    # into another buffer: each replay's contributions are combined at the next read (or wait_all).
    n, chunks = 800, 8
    dot = rt.kernel("dot").cpu(lambda a, b, s: s.__iadd__(float(np.vdot(a, b))))
    xa = [np.arange(n, dtype=np.float64), np.linspace(-1, 1, n)]
    ya = [np.arange(n, dtype=np.float64) % 7, np.cos(np.arange(n) * 0.01)]
    ref = [float(np.dot(x, y)) for x, y in zip(xa, ya)]
    xt = [rt.wrap(x).partition(1, n // chunks) for x in xa]
    yt = [rt.wrap(y).partition(1, n // chunks) for y in ya]
    acc, other = rt.buffer(1, "f64"), rt.buffer(1, "f64")
    acc.set_reduction("sum")
    other.set_reduction("sum")
    rt.begin_recording()
    for i in range(chunks):
        rt.submit(dot, reads=[xt[0][0, i], yt[0][0, i]], reduces=[acc])
    g = rt.end_recording()
    assert (g.tasks, g.edges) == (chunks, 0)
    assert acc.to_numpy()[0] == pytest.approx(ref[0], rel=1e-12)
    g.replay()
    g.replay()
    rt.wait_all()
    assert acc.to_numpy()[0] == pytest.approx(3 * ref[0], rel=1e-12)
    rebound = {xt[0][0, i]: xt[1][0, i] for i in range(chunks)}
    rebound.update({yt[0][0, i]: yt[1][0, i] for i in range(chunks)})
    rebound[acc] = other
    g.replay(rebound)
    assert other.to_numpy()[0] == pytest.approx(ref[1], rel=1e-12)
    assert acc.to_numpy()[0] == pytest.approx(3 * ref[0], rel=1e-12)
    bare = rt.buffer(1, "f64")
    with pytest.raises(hcr.InvalidArgumentError, match="declares no reduction"):
        g.replay({acc: bare})


def test_recording_misuse(rt):
    k = affine(rt)
    a, b = rt.buffer(4, "i64"), rt.buffer(4, "i64")
    with pytest.raises(hcr.InvalidArgumentError, match="without a Runtime::begin_recording"):
        rt.end_recording()
    rt.begin_recording()
    with pytest.raises(hcr.InvalidArgumentError, match="do not nest"):
        rt.begin_recording()
    rt.submit(k, reads=[a], writes=[b], params=[0])
    g = rt.end_recording()
    rt.begin_recording()
    with pytest.raises(hcr.InvalidArgumentError, match="while the runtime is recording"):
        g.replay()
    assert rt.end_recording().tasks == 0
    with pytest.raises(hcr.InvalidArgumentError, match="dict .* or a sequence"):
        g.replay(3)
    with pytest.raises(hcr.InvalidArgumentError, match="binding 0 is not a .recorded, bound. pair"):
        g.replay([(a,)])
    with pytest.raises(hcr.InvalidArgumentError, match="binding 0: .* element types differ"):
        g.replay({a: rt.buffer(4, "f64")})
    with pytest.raises(hcr.InvalidArgumentError, match="binding 1: .*not one the graph uses"):
        g.replay({a: rt.buffer(4, "i64"), rt.buffer(4, "i64"): b})
    with pytest.raises(hcr.InvalidArgumentError, match="binding 0: .*the shape"):
        g.replay({a: rt.buffer(5, "i64")})
    ro = np.zeros(4, dtype=np.int64)
    ro.flags.writeable = False
    with pytest.raises(hcr.InvalidArgumentError, match="read-only memory"):
        g.replay({b: ro})
    with hcr.Runtime({"scheduler": {"model_dir": "off"}, "backend": [{"name": "cpu"}]}) as rt2:
        with pytest.raises(hcr.InvalidArgumentError, match="another runtime"):
            g.replay({a: rt2.buffer(4, "i64")})
    g.replay().result()  # still usable after refusals
    rt.close()
    with pytest.raises(hcr.ShutdownError):
        g.replay()
