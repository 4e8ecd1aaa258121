"""The package as a user meets it: the error classes, the stubs kept in step with the module,
the TOML written from dicts."""

import ast
import pathlib

import numpy as np
import pytest

import hcr
from hcr import _toml

STUBS = pathlib.Path(hcr.__file__).with_name("__init__.pyi")


def test_error_classes_follow_the_codes():
    assert issubclass(hcr.InvalidArgumentError, hcr.Error)
    assert issubclass(hcr.InvalidArgumentError, ValueError)
    assert issubclass(hcr.UnsupportedError, NotImplementedError)
    assert issubclass(hcr.TimeoutError, TimeoutError)
    assert issubclass(hcr.Error, RuntimeError)
    for name in ("dependency", "shutdown", "config", "invalid_argument", "no_device"):
        assert int(getattr(hcr.ErrorCode, name)) > 0


def test_error_message_is_the_cpp_one(rt):
    with pytest.raises(hcr.InvalidArgumentError) as info:
        rt.buffer((2, 2)).partition(0, 1)
    assert str(info.value).startswith("partition into 0x1")
    assert info.value.code == hcr.ErrorCode.invalid_argument


def _stub_names():
    tree = ast.parse(STUBS.read_text())
    names, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        if isinstance(node, ast.ImportFrom) and node.module is None:
            names.update(a.asname or a.name for a in node.names)
    return names, members


def test_stubs_cover_every_public_name():
    names, members = _stub_names()
    missing = [n for n in hcr.__all__ if n not in names]
    assert not missing, f"names without a stub: {missing}"
    for cls in ("Runtime", "Buffer", "HostView", "Tiles", "Kernel", "Task", "Event", "Param",
                "Device", "TraceEvent", "Graph"):
        public = {m for m in dir(getattr(hcr, cls))
                  if not m.startswith("_") or m in ("__dlpack__", "__dlpack_device__", "__await__",
                                                     "__enter__", "__exit__")}
        lacking = sorted(public - members[cls])
        assert not lacking, f"hcr.{cls} members without a stub: {lacking}"


def test_toml_from_dicts():
    text = _toml.dumps({
        "scheduler": {"policy": "dmda", "model_dir": "off"},
        "backend": [{"name": "sim", "time_scale": 0.5, "compute": True,
                     "device": [{"name": "gpu 0", "memory": "1GiB"}],
                     "kernel": {"stencil": {"flops_per_byte": 8}}}],
        "runtime": {"plugin_paths": ["/opt/a", pathlib.Path("/opt/b")],
                    "max_tasks_in_flight": np.int64(10)},
    })
    assert '[scheduler]\npolicy = "dmda"' in text
    assert "[[backend]]\nname = \"sim\"\ntime_scale = 0.5\ncompute = true" in text
    assert '[[backend.device]]\nname = "gpu 0"' in text
    assert "[backend.kernel]\n\n[backend.kernel.stencil]\nflops_per_byte = 8" in text
    assert 'plugin_paths = ["/opt/a", "/opt/b"]' in text and "max_tasks_in_flight = 10" in text
    with pytest.raises(TypeError, match="not a string"):
        _toml.dumps({"scheduler": {1: 2}})
