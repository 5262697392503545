"""Q4_1, the 4-bit block format of the GGUF minispec fetches (ggml's ``block_q4_1``), its numbers kept as they are.

A weight matrix [out, in] is cut, row by row, into blocks of ``QK`` = 32 inputs. Each block stores

    d   float16   the step           (ggml: ``d``)
    m   float16   the block's minimum (ggml: ``m``)
    qs  16 bytes  32 unsigned 4-bit numbers q_i: byte i holds q_i in its low half and q_{i+16} in its high half

and input i of the block is ``w_i = q_i * d + m``. So a row of ``in`` weights takes ``in / 32 * 20`` bytes,
5 bits a weight, against 32 in float32.

``Q4Blocks`` holds a matrix's three parts as minispec keeps them in a model directory (``safetensors_io``) and in
memory: ``qs`` uint8 [out, in/32, 16], ``d`` and ``m`` [out, in/32]. Departure from ggml: its 20-byte blocks
interleave d, m and qs; here they are three arrays (the same numbers), in tensors named by minispec's own
convention, which no other safetensors reader knows as Q4_1. ``dequantize`` is the reference: it
computes ``q * d + m`` in float32, one rounding per operation, as the gguf package does, so a Q4_1 matrix
dequantized here is bitwise the float32 matrix ``recipes/convert.py`` writes from the same GGUF. ``quantize`` is ggml's
reference quantizer (``quantize_row_q4_1_ref``), for tests and tiny models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QK = 32  # inputs per block
BLOCK_BYTES = 20  # d (2) + m (2) + qs (16), ggml's block_q4_1


@dataclass(frozen=True)
class Q4Blocks:
    """One Q4_1 matrix [out, in]: ``qs`` uint8 [out, in/32, 16], ``d`` and ``m`` float [out, in/32] (module docstring)."""

    qs: np.ndarray
    d: np.ndarray
    m: np.ndarray

    def __post_init__(self):
        qs, d, m = self.qs, self.d, self.m
        if not all(isinstance(a, np.ndarray) for a in (qs, d, m)):
            raise TypeError("Q4_1 qs, d and m must be NumPy arrays")
        if qs.dtype != np.uint8 or qs.ndim != 3 or qs.shape[2] != QK // 2:
            raise ValueError(f"Q4_1 qs must be uint8 [out, in/32, 16], got {qs.dtype} {qs.shape}")
        for name, a in (("d", d), ("m", m)):
            if a.dtype.kind != "f" or a.shape != qs.shape[:2]:
                raise ValueError(f"Q4_1 {name} must be a float array of shape {qs.shape[:2]}, got {a.dtype} {a.shape}")
            if not np.isfinite(a).all():
                raise ValueError(f"Q4_1 {name} holds NaN or infinite values")
        if qs.size == 0:
            raise ValueError(f"a Q4_1 matrix has at least one row and one block, got qs of shape {qs.shape}")

    @property
    def shape(self) -> tuple[int, int]:  # [out, in], as the float matrix's
        return self.qs.shape[0], self.qs.shape[1] * QK


def dequantize(b: Q4Blocks) -> np.ndarray:  # -> [out, in] float32
    """Every weight as float32: ``q * d + m``, rounded after the product and after the sum (module docstring)."""
    q = np.concatenate([b.qs & 15, b.qs >> 4], axis=-1).astype(np.float32)  # [out, in/32, 32]
    w = q * b.d.astype(np.float32)[..., None]  # [out, in/32, 32]
    w += b.m.astype(np.float32)[..., None]
    return w.reshape(b.shape)


def check_shape(shape, what: str) -> tuple[int, int]:
    """``shape`` [out, in] of a Q4_1 matrix -> (out, in) as ints; refused (ValueError, ``what`` and the shape named)
    unless it is two whole numbers, out at least 1 and in a positive multiple of ``QK``: an empty matrix is no matrix
    of blocks, and a negative dimension no size at all."""
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None or len(dims) != 2 or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool)
                                                 for n in dims):
        raise ValueError(f"{what} [out, in] of two whole numbers, got shape {shape!r}")
    out_dim, in_dim = (int(n) for n in dims)
    if out_dim < 1 or in_dim < QK or in_dim % QK:
        raise ValueError(f"{what} [out, in] with out at least 1 and in a positive multiple of {QK}, got shape "
                         f"{(out_dim, in_dim)}")
    return out_dim, in_dim


def quantize(w: np.ndarray) -> Q4Blocks:  # [out, in] -> Q4_1
    """ggml's reference Q4_1 quantizer: per block, m = its minimum, d = (max - min) / 15, q_i = (w_i - m) * (1 / d) + 0.5
    truncated, at most 15 (ggml's ``MIN(15, (int8_t)(x + 0.5f))``), d and m stored as float16. Refused (ValueError):
    a shape ``check_shape`` refuses, numbers that are not real, NaN or infinite weights, weights beyond float32's range,
    and a block whose d or m is beyond float16's range (over 65504 in magnitude), the block named."""
    w = np.asarray(w)
    check_shape(w.shape, "Q4_1 quantizes a matrix")  # before any conversion: the shape alone decides
    if w.dtype.kind not in "biuf":
        raise ValueError(f"Q4_1 quantizes real numbers, got an array of {w.dtype}")
    if not np.isfinite(w).all():
        raise ValueError("cannot quantize NaN or infinite weights")
    with np.errstate(over="ignore"):
        w32 = w.astype(np.float32)
    if not np.isfinite(w32).all():
        raise ValueError(f"cannot quantize weights beyond float32's range (largest magnitude {float(np.abs(w).max()):.6g}); "
                         "Q4_1 stores d and m as float16, at most 65504 in magnitude")
    w = w32
    blocks = w.reshape(w.shape[0], -1, QK)  # [out, in/32, 32]
    lo, hi = blocks.min(axis=-1), blocks.max(axis=-1)  # [out, in/32]
    with np.errstate(over="ignore", invalid="ignore"):
        d = (hi - lo) / np.float32(15)
        d16, m16 = d.astype(np.float16), lo.astype(np.float16)
    wide = ~(np.isfinite(d16) & np.isfinite(m16))
    if wide.any():
        r, b = (int(i) for i in np.argwhere(wide)[0])
        raise ValueError(f"Q4_1 stores each block's step d and minimum m as float16, at most 65504 in magnitude: block "
                         f"{b} of row {r} (inputs {b * QK} to {b * QK + QK - 1}) has d = {float(d[r, b]):.6g} and m = "
                         f"{float(lo[r, b]):.6g}, beyond float16's range ({int(wide.sum())} of {wide.size} blocks are); scale "
                         "the weights or keep this matrix in float32")
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0))
    q = np.clip(np.floor((blocks - lo[..., None]) * inv[..., None] + np.float32(0.5)), 0, 15).astype(np.uint8)
    qs = q[..., : QK // 2] | (q[..., QK // 2:] << 4)  # [out, in/32, 16]
    return Q4Blocks(qs, d16, m16)


def from_gguf(raw: np.ndarray, shape) -> Q4Blocks:
    """A GGUF Q4_1 matrix's bytes (uint8) and its ``shape`` [out, in] -> its three parts; refused (ValueError) where
    ``check_shape`` refuses the shape, before the bytes are touched, and unless the bytes are exactly ``out`` rows of
    in/32 blocks of 20 bytes."""
    out_dim, in_dim = check_shape(shape, "a Q4_1 matrix is")
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if raw.size != out_dim * in_dim // QK * BLOCK_BYTES:
        raise ValueError(f"a Q4_1 matrix of shape {(out_dim, in_dim)} takes {out_dim * in_dim // QK * BLOCK_BYTES} "
                         f"bytes, got {raw.size}")
    raw = raw.reshape(out_dim, -1)
    blocks = raw.reshape(out_dim, -1, BLOCK_BYTES)  # [out, in/32, 20]
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0]  # [out, in/32]
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0]
    return Q4Blocks(np.ascontiguousarray(blocks[..., 4:]), d, m)
