"""The runtime from Python: configuration, devices, waits, pause, traces, statistics, closing."""

import gc
import json
import threading

import numpy as np
import pytest

import hcr
from conftest import cpu_config, sim_gpu_config


def test_devices_of_a_cpu_runtime(rt):
    devices = rt.devices
    assert len(devices) == 1
    assert devices[0].backend == "cpu" and devices[0].kind == "cpu" and devices[0].id == 0
    assert rt.policy == "eager"


def test_config_from_a_toml_file(tmp_path):
    path = tmp_path / "devices.toml"
    path.write_text('[scheduler]\nmodel_dir = "off"\npolicy = "dmda"\n\n[[backend]]\nname = "cpu"\n'
                    'threads = 1\n')
    with hcr.Runtime(path) as r:
        assert r.policy == "dmda"
        assert [d.backend for d in r.devices] == ["cpu"]


def test_config_dict_with_arrays_of_tables_and_subtables():
    config = sim_gpu_config()
    config["backend"][0]["device"].append({"name": "fpga", "kind": "accelerator",
                                           "factors": {"gemm_f32": 0.5}})
    config["backend"][0]["kernel"] = {"stencil": {"flops_per_byte": 8}}
    with hcr.Runtime(config) as r:
        assert sorted(d.name for d in r.devices) == ["fpga", "gpu0"]
        kinds = {d.name: d.kind for d in r.devices}
        assert kinds == {"gpu0": "gpu", "fpga": "accelerator"}


def test_config_errors_name_the_key():
    with pytest.raises(hcr.ConfigError, match=r"scheduler\.polcy: unknown key") as info:
        hcr.Runtime({"scheduler": {"polcy": "dmda"}})
    assert isinstance(info.value, ValueError) and isinstance(info.value, hcr.Error)
    assert info.value.code == hcr.ErrorCode.config
    with pytest.raises(hcr.ConfigError, match="calibrate"):
        hcr.Runtime({"scheduler": {"calibrate": 3}})


def test_config_of_a_wrong_type():
    with pytest.raises(hcr.InvalidArgumentError, match="not int"):
        hcr.Runtime(42)
    with pytest.raises(TypeError, match="not a TOML value"):
        hcr.Runtime({"scheduler": {"model_dir": object()}})


def test_environment_overrides_unless_refused(monkeypatch):
    monkeypatch.setenv("HCR_SCHED", "dmda")
    with hcr.Runtime(cpu_config()) as r:
        assert r.policy == "dmda"
    with hcr.Runtime(cpu_config(), use_environment=False) as r:
        assert r.policy == "eager"


def test_wait_all_and_stats(rt):
    noop = rt.kernel("noop").cpu("noop")
    for _ in range(50):
        rt.submit(noop)
    rt.wait_all()
    s = rt.stats()
    assert s["submitted"] >= 50 and s["completed"] >= 50 and s["failed"] == 0
    assert s["devices"][0]["tasks"] >= 50
    assert set(s["data"]) >= {"nodes", "links", "hits", "misses", "bytes_moved"}


def test_pause_holds_tasks_until_resume(rt):
    ran = []
    k = rt.kernel("record").cpu(lambda: ran.append(1))
    with rt.paused():
        ev = rt.submit(k)
        assert not ev.done() and ran == []
        with pytest.raises(hcr.InvalidArgumentError):
            ev.wait()  # it would never return: the runtime holds the task
    ev.result()
    assert ran == [1]


def test_resume_without_pause_is_an_error(rt):
    with pytest.raises(hcr.InvalidArgumentError):
        rt.resume()


def test_trace_records_tasks_and_writes_json(rt, tmp_path):
    k = rt.kernel("traced").cpu("noop")
    rt.start_trace()
    for _ in range(3):
        rt.submit(k)
    rt.wait_all()
    rt.stop_trace()
    events = rt.trace_events()
    assert [e.kernel for e in events if e.kind == "task"].count("traced") == 3
    assert all(e.end >= e.start for e in events)
    path = tmp_path / "run.json"
    rt.write_trace(path)
    doc = json.loads(path.read_text())
    names = [e.get("name") for e in doc["traceEvents"]] if isinstance(doc, dict) else \
        [e.get("name") for e in doc]
    assert "traced" in names


def test_closed_runtime_raises_shutdown_error():
    r = hcr.Runtime(cpu_config())
    a = np.ones(4, dtype=np.float32)
    buf = r.wrap(a)
    k = r.kernel("k").cpu("noop")
    r.close()
    r.close()  # idempotent
    assert r.closed
    with pytest.raises(hcr.ShutdownError):
        r.kernel("x")
    with pytest.raises(hcr.ShutdownError):
        r.submit(k)
    with pytest.raises(hcr.ShutdownError):
        buf.acquire("read")
    with pytest.raises(hcr.ShutdownError):
        buf.to_numpy()
    assert a.sum() == 4  # the memory is the caller's, untouched


def test_close_waits_for_python_kernels():
    r = hcr.Runtime(cpu_config())
    a = np.zeros(16, dtype=np.float64)
    x = r.wrap(a)
    inc = r.kernel("inc").cpu(lambda v: v.__iadd__(1))
    for _ in range(20):
        r.submit(inc, read_writes=[x])
    r.close()  # releases the interpreter lock while the kernels finish
    assert (a == 20).all()


def test_dropped_runtime_finishes_its_tasks():
    r = hcr.Runtime(cpu_config())
    a = np.zeros(8, dtype=np.float32)
    x = r.wrap(a)
    r.submit(r.kernel("fill").cpu("fill"), writes=[x], params=[hcr.f32(3)])
    del r, x
    gc.collect()
    assert (a == 3).all()


def test_runtime_dropped_inside_its_own_kernel_does_not_hang():
    holder = {"rt": hcr.Runtime(cpu_config())}
    done = threading.Event()

    def drop():
        holder.clear()  # the last reference: the runtime ends on another thread
        done.set()

    ev = holder["rt"].submit(holder["rt"].kernel("drop").cpu(drop))
    ev.wait()
    assert done.is_set()


def test_close_inside_a_kernel_is_refused():
    r = hcr.Runtime(cpu_config())
    errors = []

    def close_me():
        try:
            r.close()
        except hcr.InvalidArgumentError as e:
            errors.append(str(e))

    r.submit(r.kernel("close").cpu(close_me)).result()
    assert errors and "inside a kernel" in errors[0]
    r.close()


def test_wait_all_inside_a_kernel_is_refused(rt):
    def waits():
        rt.wait_all()

    with pytest.raises(hcr.InvalidArgumentError):
        rt.submit(rt.kernel("waits").cpu(waits)).result()


def test_load_report_names_the_cpu_plugin(rt):
    report = rt.load_report()
    assert any(p["loaded"] and p["name"] == "cpu" for p in report["plugins"])


def test_close_waits_for_tasks_kernels_submit():
    r = hcr.Runtime(cpu_config())
    out = np.zeros(4)
    child = r.kernel("fill").cpu("fill")
    buf = r.wrap(out)

    def parent():
        r.submit(child, writes=[buf], params=[2.0])

    for _ in range(5):
        r.submit(r.kernel("parent").cpu(parent))
    r.close()  # the parents still submit while it waits
    assert (out == 2).all()
    assert r.closed
