"""A strict stand-in for CuPy, for the device-discipline tests (tests/test_device_discipline.py).

Installed as ``backend.xp``, it makes the model's arrays ``DeviceArray``s: NumPy arrays in a wrapper that,
like CuPy's, refuses every implicit trip to the host: ``np.asarray(d)`` raises TypeError, NumPy functions
and ufuncs applied to one raise (``__array_function__``/``__array_ufunc__``), mixing one with a NumPy array
in an operator or an index raises, and ``.get()`` is the only way back (counted in ``transfers``, as is
every host array that ``asarray`` uploads). It is stricter than CuPy in one way: CuPy dispatches NumPy
ufuncs applied to its arrays; here they fail, so that model code calls ``xp.exp``, never ``np.exp``.

The module provides only what the model uses (transformer.py, kvcache.py): a call to anything else
fails with AttributeError. Add a function here only if CuPy provides it too.
"""

from __future__ import annotations

import numbers
import sys

import numpy as np

float32 = np.float32
transfers = {"to_device": 0, "to_host": 0}


def reset_transfers() -> None:
    transfers.update(to_device=0, to_host=0)


class HostDeviceMix(TypeError):
    """A host array met a device array, or a device array was converted to a host one implicitly."""


def _dev(a, what: str):
    """The NumPy array inside a device array; a Python or NumPy scalar passes (CuPy takes those too)."""
    if isinstance(a, DeviceArray):
        return a._a
    if isinstance(a, (numbers.Number, np.generic)):
        return a
    raise HostDeviceMix(f"{what}: {type(a).__name__} mixed with a device array (upload it with backend.asarray)")


def _index(key):
    if isinstance(key, tuple):
        return tuple(_index(k) for k in key)
    if key is None or key is Ellipsis or isinstance(key, (slice, numbers.Integral)):
        return key
    return _dev(key, "index")


class DeviceArray:
    __slots__ = ("_a",)

    def __init__(self, a: np.ndarray):
        self._a = a

    # ---- what CuPy refuses ----
    def __array__(self, *args, **kwargs):
        raise HostDeviceMix("implicit conversion of a device array to a NumPy array (use .get() / backend.to_host)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        raise HostDeviceMix(f"NumPy ufunc {ufunc.__name__} applied to a device array (use backend.xp)")

    def __array_function__(self, func, types, args, kwargs):
        raise HostDeviceMix(f"NumPy function {func.__name__} applied to a device array (use backend.xp)")

    def get(self) -> np.ndarray:
        transfers["to_host"] += 1
        return self._a.copy()

    # ---- attributes and methods the model uses ----
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    nbytes = property(lambda self: self._a.nbytes)
    T = property(lambda self: DeviceArray(self._a.T))

    def __len__(self):
        return len(self._a)

    def __repr__(self):
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"

    def reshape(self, *shape):
        return DeviceArray(self._a.reshape(*shape))

    def transpose(self, *axes):
        return DeviceArray(self._a.transpose(*axes))

    def sum(self, axis=None, keepdims=False):
        return DeviceArray(np.asarray(self._a.sum(axis=axis, keepdims=keepdims)))

    def mean(self, axis=None, keepdims=False):
        return DeviceArray(np.asarray(self._a.mean(axis=axis, keepdims=keepdims)))

    def max(self, axis=None, keepdims=False):
        return DeviceArray(np.asarray(self._a.max(axis=axis, keepdims=keepdims)))

    def __getitem__(self, key):
        return DeviceArray(self._a[_index(key)])

    def __setitem__(self, key, value):
        self._a[_index(key)] = _dev(value, "assigned value")

    def _op(name):
        def op(self, other):
            return DeviceArray(np.asarray(getattr(self._a, name)(_dev(other, name))))
        return op

    __add__, __radd__, __sub__, __rsub__ = _op("__add__"), _op("__radd__"), _op("__sub__"), _op("__rsub__")
    __mul__, __rmul__, __truediv__, __rtruediv__ = _op("__mul__"), _op("__rmul__"), _op("__truediv__"), _op("__rtruediv__")
    __matmul__, __rmatmul__ = _op("__matmul__"), _op("__rmatmul__")
    del _op

    def __neg__(self):
        return DeviceArray(-self._a)


def asarray(a, dtype=None):
    """Host -> device (counted); a device array stays where it is."""
    if isinstance(a, DeviceArray):
        return a if dtype is None else DeviceArray(a._a.astype(dtype))
    transfers["to_device"] += 1
    return DeviceArray(np.array(a, dtype=dtype, copy=True))


def zeros(shape, dtype=float):
    return DeviceArray(np.zeros(shape, dtype=dtype))


def _ufunc(f):
    def g(x):
        return DeviceArray(np.asarray(f(_dev(x, f.__name__))))
    g.__name__ = f.__name__
    return g


sqrt, exp, tanh = _ufunc(np.sqrt), _ufunc(np.exp), _ufunc(np.tanh)


def concatenate(arrays, axis=0):
    return DeviceArray(np.concatenate([_dev(a, "concatenate") for a in arrays], axis=axis))


def install(monkeypatch) -> None:
    """Make this module the backend's array module for the rest of a test (models created afterwards live here)."""
    from minispec.model import backend

    monkeypatch.setattr(backend, "xp", sys.modules[__name__])
    monkeypatch.setattr(backend, "DEVICE", "strict")
    reset_transfers()
