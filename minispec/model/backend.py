"""The array module: NumPy by default, CuPy on request.

Every array operation in the model goes through ``xp``, the module chosen here, so the
same code runs on a CPU (NumPy) or an NVIDIA GPU (CuPy).  Tokens, sampling and the
rejection rule stay on the host in NumPy: they touch one row of probabilities at a time.
"""

from __future__ import annotations

import numpy as np

xp = np  # the active array module; replaced by cupy after use_device("cuda")
DEVICE = "cpu"


def use_device(device: str):
    """Select "cpu" (NumPy) or "cuda" (CuPy) for every model created afterwards."""
    global xp, DEVICE
    if device == "cpu":
        xp, DEVICE = np, "cpu"
        return xp
    if device != "cuda":
        raise ValueError(f"unknown device {device!r}: use 'cpu' or 'cuda'")
    try:
        import cupy
    except ImportError as e:
        raise RuntimeError(
            "--device cuda needs CuPy: install it with `pip install 'minispec[cuda]'` "
            "(or the cupy-cudaXXx wheel matching your CUDA toolkit)"
        ) from e
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device
        raise RuntimeError(f"--device cuda: CuPy is installed but no CUDA device is usable ({e})") from e
    if n == 0:
        raise RuntimeError("--device cuda: CuPy is installed but found no CUDA device")
    xp, DEVICE = cupy, "cuda"
    return xp


def asarray(a):
    """Host array -> array on the active device."""
    return xp.asarray(a)


def to_host(a) -> np.ndarray:
    """Array on any device -> NumPy array."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def synchronize() -> None:
    """Wait until the device has finished the work queued so far: CuPy launches kernels asynchronously, so
    a clock read without it times the launches, not the work. A no-op on NumPy. Timing code calls it before
    reading the clock; the loops never do (their ``to_host`` of the logits waits anyway)."""
    if DEVICE == "cuda":
        xp.cuda.get_current_stream().synchronize()


def device_name() -> str:
    """"cpu", or the GPU's name and CuPy's version."""
    if DEVICE != "cuda":
        return "cpu"
    props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{name} (CuPy {xp.__version__}, CUDA runtime {xp.cuda.runtime.runtimeGetVersion()})"
