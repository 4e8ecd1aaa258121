"""Kernels given as source text: OpenCL C (on PoCL's CPU device where it is installed) and CUDA
C++ (on a GPU); each test skips where its backend has no device."""

import numpy as np
import pytest

import hcr


def runtime_or_skip(backend):
    try:
        rt = hcr.Runtime({"scheduler": {"model_dir": "off"}, "backend": [backend]},
                         use_environment=False)
    except hcr.Error as e:
        pytest.skip(f"no {backend['name']} backend: {e}")
    if not rt.devices:
        rt.close()
        pytest.skip(f"the {backend['name']} backend has no device here")
    return rt


def test_opencl_source_with_a_parameter():
    with runtime_or_skip({"name": "opencl", "device_types": ["cpu", "gpu", "accelerator"]}) as rt:
        k = rt.kernel("scale").opencl(
            "__kernel void scale(__global float* x, float a) {"
            "  size_t i = get_global_id(0); x[i] *= a; }")
        a = np.arange(64, dtype=np.float32)
        x = rt.wrap(a)
        rt.submit(k, read_writes=[x], params=[hcr.f32(3)]).result()
        with x.acquire("read") as v:
            np.testing.assert_array_equal(v, np.arange(64) * 3)


def test_opencl_compile_error_fails_the_task():
    with runtime_or_skip({"name": "opencl", "device_types": ["cpu", "gpu", "accelerator"]}) as rt:
        k = rt.kernel("broken").opencl("__kernel void broken(__global float* x) { nonsense; }")
        with pytest.raises(hcr.Error):
            rt.submit(k, writes=[rt.buffer(4, "f32")]).result()


def test_cuda_source_with_parameters_and_a_grid():
    with runtime_or_skip({"name": "cuda"}) as rt:
        k = rt.kernel("iota").cuda(
            'extern "C" __global__ void iota(unsigned long long* out, unsigned long long n,'
            " int mul) { unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;"
            " if (i < n) out[i] = i * mul; }")
        out = np.zeros(1000, dtype=np.int64)
        buf = rt.wrap(out)
        rt.submit(hcr.Task(k).write(buf).param(hcr.i64(1000)).param(hcr.i32(3)).grid(1000)
                  .block(128)).result()
        with buf.acquire("read") as v:
            np.testing.assert_array_equal(v, np.arange(1000) * 3)
