"""Fixtures of the hcr Python tests: runtimes on the CPU backend (and simulated devices where data
must move), never the user's home or HCR_* settings."""

import gc
import os

import pytest

np = pytest.importorskip("numpy")
import hcr  # noqa: E402  (after numpy: the module needs it)


@pytest.fixture(autouse=True, scope="session")
def isolated_environment(tmp_path_factory):
    """HOME and XDG_CACHE_HOME in a temporary directory; no HCR_* variable of the caller."""
    home = tmp_path_factory.mktemp("home")
    saved = dict(os.environ)
    for key in list(os.environ):
        if key.startswith("HCR_"):
            del os.environ[key]
    os.environ["HOME"] = str(home)
    os.environ["XDG_CACHE_HOME"] = str(home / ".cache")
    os.environ["HCR_LOG"] = "error"
    yield home
    os.environ.clear()
    os.environ.update(saved)


def cpu_config(threads=2, **scheduler):
    return {
        "scheduler": {"model_dir": "off", **scheduler},
        "backend": [{"name": "cpu", "threads": threads}],
    }


def sim_gpu_config():
    """One simulated GPU with its own memory (data moves to it and back), computing real results;
    no CPU backend, so every task runs there."""
    return {
        "scheduler": {"model_dir": "off"},
        "backend": [{
            "name": "sim",
            "compute": True,
            "time_scale": 0.001,
            "device": [{"name": "gpu0", "kind": "gpu", "gflops": 1000, "memory": "1GiB"}],
        }],
    }


@pytest.fixture
def rt():
    runtime = hcr.Runtime(cpu_config())
    yield runtime
    runtime.close()
    gc.collect()


@pytest.fixture
def sim_rt():
    runtime = hcr.Runtime(sim_gpu_config())
    yield runtime
    runtime.close()
    gc.collect()
