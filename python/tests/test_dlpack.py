"""DLPack both ways for host memory, and the refusal of device tensors."""

import ctypes
import gc
import threading
import weakref

import numpy as np
import pytest

import hcr

# The DLPack structures, declared independently of the module's C header (a layout mistake in
# either shows up as wrong values here).


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Producer:
    """A hand-made DLPack tensor over `array`'s memory, described by the given fields."""

    def __init__(self, array, shape, strides=None, byte_offset=0, device=(1, 0), code=2):
        self.array = array
        self.deleted = 0
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(strides))(*strides) if strides else None
        self.deleter = DELETER(self._delete)
        t = DLManagedTensor()
        t.dl_tensor.data = array.ctypes.data
        t.dl_tensor.device = DLDevice(*device)
        t.dl_tensor.ndim = len(shape)
        t.dl_tensor.dtype = DLDataType(code, array.dtype.itemsize * 8, 1)
        t.dl_tensor.shape = self.shape
        t.dl_tensor.strides = self.strides
        t.dl_tensor.byte_offset = byte_offset
        t.deleter = self.deleter
        self.tensor = t
        self.capsule = _new_capsule(ctypes.addressof(t), b"dltensor", None)

    def _delete(self, _):
        self.deleted += 1


def test_numpy_to_hcr_without_a_copy(rt):
    a = np.zeros((2, 3), dtype=np.float64)
    buf = rt.from_dlpack(a)
    assert buf.shape == (2, 3) and buf.dtype == np.float64
    rt.submit(rt.kernel("fill").cpu("fill"), writes=[buf], params=[6.0]).result()
    assert (a == 6).all()
    assert rt.wrap(a) is buf and rt.from_dlpack(a) is buf  # one memory, one buffer
    assert hcr.from_dlpack(np.arange(3, dtype=np.int32), rt).to_numpy().tolist() == [0, 1, 2]


def test_imported_memory_lives_as_long_as_the_buffer(rt):
    a = np.zeros(32, dtype=np.float32)
    alive = weakref.ref(a)
    buf = rt.from_dlpack(a)
    del a
    gc.collect()
    assert alive() is not None
    del buf
    gc.collect()
    assert alive() is None


def test_hcr_to_numpy_waits_for_earlier_tasks(rt):
    gate = threading.Event()
    a = np.zeros((3, 3), dtype=np.float32)
    buf = rt.wrap(a)

    def slow(v):
        gate.wait(5)
        v[:] = 5

    rt.submit(rt.kernel("slow").cpu(slow), writes=[buf])
    threading.Timer(0.05, gate.set).start()
    view = np.from_dlpack(buf)
    assert (view == 5).all() and np.shares_memory(view, a)
    assert buf.__dlpack_device__() == (1, 0)


def test_tiles_export_with_their_row_stride(rt):
    a = np.arange(30, dtype=np.float64).reshape(5, 6)
    tiles = rt.wrap(a).partition(2, 4)
    t = np.from_dlpack(tiles[1, 1])
    np.testing.assert_array_equal(t, a[2:4, 4:6])
    assert np.shares_memory(t, a)


def test_round_trip_through_another_buffer(rt):
    a = np.arange(4, dtype=np.int64)
    first = rt.wrap(a)
    second = rt.from_dlpack(first)
    rt.submit(rt.kernel("fill").cpu("fill"), writes=[second], params=[9]).result()
    assert a.tolist() == [9] * 4


def test_export_refusals(rt):
    ro = np.ones(3, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        rt.wrap(ro).__dlpack__()
    buf = rt.buffer(3, "f32")
    with pytest.raises(BufferError, match="stream"):
        buf.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="copy"):
        buf.__dlpack__(copy=True)


def test_device_tensors_are_refused_before_they_are_taken(rt):
    class CudaTensor:
        called = False

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, stream=None):
            CudaTensor.called = True

    with pytest.raises(hcr.UnsupportedError, match="kDLCUDA.*host memory only") as info:
        rt.from_dlpack(CudaTensor())
    assert isinstance(info.value, NotImplementedError)
    assert info.value.code == hcr.ErrorCode.unsupported
    assert not CudaTensor.called


def test_device_capsule_is_refused_and_left_unconsumed(rt):
    p = Producer(np.zeros(4, dtype=np.float32), shape=[4], device=(2, 1))
    with pytest.raises(hcr.UnsupportedError, match=r"kDLCUDA memory \(device type 2, id 1\)"):
        rt.from_dlpack(p.capsule)
    assert _capsule_valid(p.capsule, b"dltensor") == 1 and p.deleted == 0


def test_hand_made_capsule_with_strides_and_offset(rt):
    backing = np.arange(24, dtype=np.float32)
    # rows of 3 elements, 8 apart, starting at element 2
    p = Producer(backing, shape=[3, 3], strides=[8, 1], byte_offset=2 * 4)
    buf = rt.from_dlpack(p.capsule)
    assert _capsule_valid(p.capsule, b"used_dltensor") == 1
    expected = np.array([[2, 3, 4], [10, 11, 12], [18, 19, 20]], dtype=np.float32)
    np.testing.assert_array_equal(buf.to_numpy(), expected)
    assert buf.ld == 8
    with pytest.raises(hcr.InvalidArgumentError, match="consumed once"):
        rt.from_dlpack(p.capsule)
    rt.submit(rt.kernel("fill").cpu("fill"), writes=[buf], params=[hcr.f32(-1)]).result()
    assert backing[2] == -1 and backing[5] == 5 and backing[10] == -1
    del buf
    rt.wait_all()
    gc.collect()
    assert p.deleted == 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(shape=[3, 4], strides=[1, 3]), "column stride is 3"),
    (dict(shape=[3, 4], strides=[2, 1]), "row stride is 2"),
    (dict(shape=[2, 2, 3]), "3-d tensor"),
    (dict(shape=[12], code=6), "unsupported DLPack dtype"),
])
def test_layouts_hcr_cannot_wrap(rt, kwargs, message):
    p = Producer(np.zeros(12, dtype=np.float32 if kwargs.get("code", 2) == 2 else np.uint32),
                 **kwargs)
    with pytest.raises(hcr.InvalidArgumentError, match=message):
        rt.from_dlpack(p.capsule)
    assert _capsule_valid(p.capsule, b"dltensor") == 1  # not taken


def test_not_a_dlpack_object(rt):
    with pytest.raises(hcr.InvalidArgumentError, match="no __dlpack__"):
        rt.from_dlpack(object())
