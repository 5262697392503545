"""A Llama-family transformer in NumPy: layers as functions (linear, rms_norm, rope, attention, swiglu, and the
block that chains them) and a `Model` that owns the weights.

Dimension key used in every shape comment:
  T new tokens, S cached + new positions, D model width, H query heads, KVH key/value heads,
  G = H // KVH query heads per kv head, HD head dim, F MLP width, V vocabulary, L layers.

Weights are stored in the layout ``x @ w`` wants ([in, out]), or, with the numba kernel, by rows ([out, in], the
file's layout) inside a ``kernel.PackedMatrix``; Q/K/V and gate/up are fused into one matrix each at load time,
so one token costs 4 matrix products per layer plus the head.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from . import backend, threads
from .blas import skinny_matmul
from .config import ModelConfig
from .kernel import PackedMatrix, Q4Matrix, check_kernel, default_kernel
from .kvcache import KVCache
from .q4_1 import Q4Blocks
from .weights import load_weights


def linear(x, w):  # [T, in], [in, out] -> [T, out]
    """x @ w, by the kernel the weight was packed for at load (kernel.py): a ``PackedMatrix`` (the numba
    kernel's weights) multiplies itself, reading each weight once for all T rows (numba_kernel.py); any other
    weight is an array, multiplied by NumPy: on a CPU, a product of 2 or more rows goes through
    ``blas.skinny_matmul``, the same product shaped for OpenBLAS (see blas.py)."""
    if isinstance(w, PackedMatrix):
        return w.rmatmul(x)
    if x.shape[0] == 1 or backend.xp is not np:
        return x @ w
    return skinny_matmul(x, w)


def rms_norm(x, w, eps: float):  # [T, D], [D] -> [T, D]
    xp = backend.xp
    return x * (1.0 / xp.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)) * w


def rope(x, cos, sin):  # [T, n, HD], [T, HD/2], [T, HD/2] -> [T, n, HD]
    """Rotate pairs (i, i + HD/2) by position-dependent angles (the "rotate-half" layout)."""
    xp = backend.xp
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]  # [T, n, HD/2] each
    c, s = cos[:, None, :], sin[:, None, :]  # [T, 1, HD/2]
    return xp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def attention(q, k_cache, v_cache, mask):  # [T, H, HD], [KVH, S_max, HD] twice, [T, S] -> [T, H*HD]
    """Grouped-query attention over the first S = mask.shape[1] cached positions: query head h reads kv head h // G.
    ``mask`` is additive (0 or -inf)."""
    xp = backend.xp
    T, H, HD = q.shape
    S = mask.shape[1]
    k, v = k_cache[:, :S], v_cache[:, :S]  # [KVH, S, HD] each
    KVH = k.shape[0]
    G = H // KVH
    q = q.reshape(T, KVH, G, HD).transpose(1, 2, 0, 3).reshape(KVH, G * T, HD)  # [KVH, G*T, HD]
    scores = (q @ k.transpose(0, 2, 1)).reshape(KVH, G, T, S)  # [KVH, G, T, S]
    scores = scores * (1.0 / HD**0.5) + mask  # [KVH, G, T, S]
    scores = xp.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)  # [KVH, G, T, S]
    out = probs.reshape(KVH, G * T, S) @ v  # [KVH, G*T, HD]
    return out.reshape(KVH, G, T, HD).transpose(2, 0, 1, 3).reshape(T, H * HD)  # [T, H*HD]


def swiglu(x, w_gate_up, w_down):  # [T, D], [D, 2F], [F, D] -> [T, D]
    gate_up = linear(x, w_gate_up)  # [T, 2F]
    F = w_down.shape[0]
    gate, up = gate_up[:, :F], gate_up[:, F:]  # [T, F] each
    silu = gate * (0.5 + 0.5 * backend.xp.tanh(0.5 * gate))  # x * sigmoid(x), overflow-free
    return linear(silu * up, w_down)  # [T, D]


@dataclass
class LayerWeights:
    attn_norm: object  # [D]
    w_qkv: object  # [D, (H + 2 KVH) * HD]
    b_qkv: object  # [(H + 2 KVH) * HD] or None
    w_o: object  # [H*HD, D]
    mlp_norm: object  # [D]
    w_gate_up: object  # [D, 2F]
    w_down: object  # [F, D]


@dataclass(frozen=True)
class Ops:
    """The layer functions a kernel may compute its own way (kernel.py), with the signatures of this module's:
    the numba kernel's (``numba_layers.py``) give the same results within rounding, each row alone."""
    rms_norm: Callable  # (x [T, D], w [D], eps) -> [T, D]
    rope: Callable  # (x [T, n, HD], cos [T, HD/2], sin [T, HD/2]) -> [T, n, HD]
    attention: Callable  # (q [T, H, HD], k_cache, v_cache [KVH, S_max, HD], mask [T, S]) -> [T, H*HD]


def layer_functions(ops: Ops | None) -> tuple:
    """(norm, RoPE, attention): the kernel's own (``Model.ops``), or this module's for None, looked up at each call
    (so that a test may replace one)."""
    return (rms_norm, rope, attention) if ops is None else (ops.rms_norm, ops.rope, ops.attention)


def transformer_block(x, w: LayerWeights, cfg: ModelConfig, k_cache, v_cache, pos0, cos, sin, mask, ops=None):
    # x [T, D]; k_cache, v_cache [KVH, S_max, HD]; writes positions pos0 .. pos0+T-1; ``ops``: Model.ops
    norm, rot, attend = layer_functions(ops)
    T = x.shape[0]
    H, KVH, HD = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    h = norm(x, w.attn_norm, cfg.rms_norm_eps)  # [T, D]
    qkv = linear(h, w.w_qkv)  # [T, (H + 2 KVH) * HD]
    if w.b_qkv is not None:
        qkv = qkv + w.b_qkv
    q = rot(qkv[:, : H * HD].reshape(T, H, HD), cos, sin)  # [T, H, HD]
    k = rot(qkv[:, H * HD: (H + KVH) * HD].reshape(T, KVH, HD), cos, sin)  # [T, KVH, HD]
    v = qkv[:, (H + KVH) * HD:].reshape(T, KVH, HD)  # [T, KVH, HD]
    k_cache[:, pos0: pos0 + T] = k.transpose(1, 0, 2)
    v_cache[:, pos0: pos0 + T] = v.transpose(1, 0, 2)
    x = x + linear(attend(q, k_cache, v_cache, mask), w.w_o)  # [T, D]
    return x + swiglu(norm(x, w.mlp_norm, cfg.rms_norm_eps), w.w_gate_up, w.w_down)  # [T, D]


def rope_tables(cfg: ModelConfig, max_len: int):  # -> cos, sin [max_len, HD/2], float32
    inv_freq = 1.0 / cfg.rope_theta ** (np.arange(0, cfg.head_dim, 2) / cfg.head_dim)  # float64 here...
    angles = np.outer(np.arange(max_len), inv_freq)
    # ...and float32 from here on: one float64 table would promote every activation.
    return backend.asarray(np.cos(angles).astype(np.float32)), backend.asarray(np.sin(angles).astype(np.float32))


class Model:
    """Weights plus ``forward(token_ids, cache) -> logits``: prefill, decode and verification alike."""

    def __init__(self, cfg: ModelConfig, embed, layers: list[LayerWeights], final_norm, lm_head, name: str = "model",
                 kernel: str = "numpy"):
        self.cfg, self.embed, self.layers, self.final_norm, self.lm_head = cfg, embed, layers, final_norm, lm_head
        self.name, self.path = name, None  # path: the directory it was loaded from, if any
        self.kernel = kernel  # "numpy" or "numba": how its matrices are stored and multiplied (kernel.py)
        self.ops = None  # None: this module's norm, RoPE and attention (looked up at each call)
        if kernel == "numba":  # the kernel's own, each row alone (numba_layers.py)
            from . import numba_layers as nl

            self.ops = Ops(nl.rms_norm, nl.rope, nl.attention)
        self.cos, self.sin = rope_tables(cfg, cfg.max_position_embeddings)

    @classmethod
    def from_hf(cls, cfg: ModelConfig, t, name: str = "model", kernel: str = "numpy") -> "Model":
        """Build from Hugging Face tensors ([out, in] matrices): fuse Q/K/V and gate/up, transpose to [in, out],
        or, for ``kernel="numba"``, keep the file's [out, in] rows and wrap each matrix in a ``PackedMatrix`` (a
        ``Q4Matrix`` when the file stores its parts in Q4_1 blocks; the NumPy kernel reads them dequantized).

        ``t`` maps names to tensors and is consumed. Each fused matrix is allocated once and every tensor
        is written into its column block: from a ``weights.Checkpoint`` (what ``load_model`` passes) straight
        from the file, a block of rows at a time, so loading holds one copy of the weights, not two.
        A dict of arrays works too. On CuPy each finished host array moves to the device, then is freed.
        (About 70 lines, on purpose: one pass over the checkpoint in the order its tensors are consumed, every step
        writing into buffers the steps before it allocated.)"""
        xp = backend.xp
        packed = check_kernel(kernel) == "numba"
        if packed and xp is not np:
            raise ValueError("the numba kernel runs on the CPU: use --kernel numpy with --device cuda")
        if packed:
            from .numba_kernel import claim_cores

            claim_cores()
        D, F = cfg.hidden_size, cfg.intermediate_size
        q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim

        def dev(a):
            return xp.asarray(np.ascontiguousarray(a, dtype=np.float32))

        def transposed_into(tensor_name, out):  # out[...] = t.pop(tensor_name).T
            if isinstance(t, dict):
                out[...] = t.pop(tensor_name).T
            else:
                t.pop_transposed_into(tensor_name, out)

        def rows_into(tensor_name, out):  # out[...] = t.pop(tensor_name)
            if isinstance(t, dict):
                out[...] = t.pop(tensor_name)
            else:
                t.pop_into(tensor_name, out)

        def fused(in_dim, *parts):  # parts: (name, out_dim) of [out_dim, in_dim] tensors -> [in_dim, sum out_dim]
            if packed and not isinstance(t, dict) and all(t.is_q4_1(n) for n, _ in parts):  # kept in Q4_1 blocks
                b = [t.pop_q4_1(n) for n, _ in parts]
                return Q4Matrix(Q4Blocks(*(np.concatenate([getattr(x, f) for x in b]) for f in ("qs", "d", "m"))))
            if packed:  # the numba kernel's layout: the parts' rows one after the other, [sum out_dim, in_dim]
                rows = np.empty((sum(n for _, n in parts), in_dim), np.float32)
                row = 0
                for tensor_name, out_dim in parts:
                    rows_into(tensor_name, rows[row: row + out_dim])
                    row += out_dim
                return PackedMatrix(rows)
            w = np.empty((in_dim, sum(n for _, n in parts)), np.float32)
            col = 0
            for tensor_name, out_dim in parts:
                transposed_into(tensor_name, w[:, col: col + out_dim])
                col += out_dim
            return dev(w)

        layers = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            layers.append(LayerWeights(
                attn_norm=dev(t.pop(p + "input_layernorm.weight")),
                w_qkv=fused(D, (p + "self_attn.q_proj.weight", q), (p + "self_attn.k_proj.weight", kv),
                            (p + "self_attn.v_proj.weight", kv)),
                b_qkv=dev(np.concatenate([t.pop(p + f"self_attn.{n}_proj.bias") for n in "qkv"])) if cfg.attention_bias else None,
                w_o=fused(q, (p + "self_attn.o_proj.weight", D)),
                mlp_norm=dev(t.pop(p + "post_attention_layernorm.weight")),
                w_gate_up=fused(D, (p + "mlp.gate_proj.weight", F), (p + "mlp.up_proj.weight", F)),
                w_down=fused(F, (p + "mlp.down_proj.weight", D)),
            ))
        embed = dev(t.pop("model.embed_tokens.weight"))  # [V, D]: the file's layout already
        if cfg.tie_word_embeddings:  # [D, V], the embedding's memory either way: embed is the head's rows
            lm_head = PackedMatrix(embed) if packed else embed.T
        else:
            lm_head = fused(D, ("lm_head.weight", cfg.vocab_size))  # [D, V]
        return cls(cfg, embed, layers, dev(t.pop("model.norm.weight")), lm_head, name, kernel)

    def truncated(self, num_layers: int) -> "Model":
        """The first ``num_layers`` layers with the same final norm and head; shares every array."""
        if not 1 <= num_layers <= self.cfg.num_layers:
            raise ValueError(f"num_layers must be in 1..{self.cfg.num_layers}, got {num_layers}")
        cfg = replace(self.cfg, num_layers=num_layers)
        m = object.__new__(Model)
        m.__dict__.update(self.__dict__, cfg=cfg, layers=self.layers[:num_layers], name=f"{self.name}[:{num_layers}]")
        return m

    def new_cache(self, max_len: int) -> KVCache:
        if not 1 <= max_len <= self.cfg.max_position_embeddings:
            raise ValueError(f"cache length must be in 1..{self.cfg.max_position_embeddings} (max_position_embeddings), got {max_len}")
        return KVCache(self.cfg.num_layers, self.cfg.num_kv_heads, max_len, self.cfg.head_dim)

    @property
    def weight_bytes(self) -> int:  # the weights as held in memory: float32 whatever the file stores (bf16, int8),
        # but a Q4Matrix's own bytes (kernel.py)
        arrays = [self.embed, self.final_norm] + [a for w in self.layers for a in vars(w).values() if a is not None]
        if not self.cfg.tie_word_embeddings:
            arrays.append(self.lm_head)
        return int(sum(a.nbytes for a in arrays))

    def check_tokens(self, token_ids) -> np.ndarray:
        ids = np.asarray(token_ids)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError(f"token_ids must be a non-empty 1-D sequence, got shape {ids.shape}")
        if ids.dtype.kind not in "iu":
            raise ValueError(f"token_ids must be integers, got dtype {ids.dtype}")
        bad = ids[(ids < 0) | (ids >= self.cfg.vocab_size)]
        if bad.size:
            raise ValueError(f"token id {int(bad[0])} is out of range for vocabulary size {self.cfg.vocab_size}")
        return ids.astype(np.int64)

    def forward(self, token_ids, cache: KVCache, last: int | None = None, on_features=None):
        """Run T new tokens at positions cache.length .. cache.length+T-1 -> logits [T, V] (host, float32), or of
        the last ``last`` tokens only (a prefill needs one row: the head is 1/5 of this model's FLOPs).
        ``on_features``, if given, is called with the top layer's output after the final norm for all T rows,
        [T, D], left on the device: what the head reads, and what a feature drafter drafts from
        (drafters/eagle.py). If it has ``lower_layers`` (layer indices, from 0), the outputs of those layers (the
        residual stream after each, before any norm: transformers' ``hidden_states[i + 1]``) follow in that order, side
        by side: [T, D * (1 + len(lower_layers))] (EAGLE-3's fused features). The return value is the logits either
        way."""
        ids = self.check_tokens(token_ids)
        positions = np.arange(cache.length, cache.length + len(ids))
        return self.forward_masked(ids, cache, positions, causal_mask(cache.length, len(ids)), last, on_features)

    def forward_masked(self, ids: np.ndarray, cache: KVCache, positions: np.ndarray, mask: np.ndarray,
                       last: int | None = None, on_features=None):
        """General form: token t sits at RoPE position ``positions[t]`` and attends where ``mask[t]`` is 0.

        The new tokens' keys are written at cache slots cache.length .. +T-1 whatever their
        positions, so a token tree can be verified in one pass (see ``tree.py``).
        """
        T, pos0 = len(ids), cache.length
        if pos0 + T > cache.max_len:
            raise ValueError(f"{T} new tokens do not fit: cache holds {cache.length} of {cache.max_len} positions")
        if cache.k.shape[0] < self.cfg.num_layers:
            raise ValueError(f"cache has {cache.k.shape[0]} layers, model needs {self.cfg.num_layers}")
        if last is not None and not 1 <= last <= T:  # (bug: x[T - last:] counted rows from the end for last > T)
            raise ValueError(f"last = {last}: the logits of 1 to {T} of the {T} new tokens")
        xp = backend.xp
        pos = backend.asarray(positions)
        cos, sin = self.cos[pos], self.sin[pos]  # [T, HD/2]
        mask = backend.asarray(np.asarray(mask, dtype=np.float32))  # [T, S]; a float64 mask would promote x
        x = self.embed[backend.asarray(ids)]  # [T, D]
        tapped = tuple(getattr(on_features, "lower_layers", ()))  # the layers whose outputs the features carry too
        if any(not 0 <= i < self.cfg.num_layers for i in tapped):
            raise ValueError(f"on_features asks for layers {list(tapped)}; this model has layers 0..{self.cfg.num_layers - 1}")
        outputs = {}  # layer -> its output [T, D]
        with threads.running(self.kernel):  # the kernel's threads for this pass (threads.py)
            for i, w in enumerate(self.layers):
                x = transformer_block(x, w, self.cfg, cache.k[i], cache.v[i], pos0, cos, sin, mask, self.ops)
                if i in tapped:
                    outputs[i] = x
            cache.length = pos0 + T
            norm = layer_functions(self.ops)[0]
            if on_features is not None:  # every row's features: the norm over T rows costs little next to the head
                features = norm(x, self.final_norm, self.cfg.rms_norm_eps)  # [T, D], left on the device
                on_features(backend.xp.concatenate([features, *(outputs[i] for i in tapped)], axis=1) if tapped
                            else features)  # [T, D (1 + len(tapped))]
                x = features if last is None else features[T - last:]  # [T', D]
            else:
                x = norm(x if last is None else x[T - last:], self.final_norm, self.cfg.rms_norm_eps)  # [T', D]
            logits = linear(x, self.lm_head)  # [T', V]
        assert logits.dtype == xp.float32, logits.dtype
        return backend.to_host(logits)


def causal_mask(pos0: int, T: int) -> np.ndarray:  # -> [T, pos0 + T] additive mask
    """T new tokens after pos0 cached ones: the token at pos0 + t sees keys 0 .. pos0 + t."""
    positions = np.arange(pos0, pos0 + T)
    return np.where(np.arange(pos0 + T)[None, :] <= positions[:, None], 0.0, -np.inf).astype(np.float32)


def load_model(path, name: str | None = None, kernel: str | None = None) -> Model:
    """Load a Hugging Face-format Llama-family directory (config.json + safetensors). ``load_weights`` only
    locates and checks the tensors; ``from_hf`` reads each one into its place (one copy of the weights).
    ``kernel``: "numpy" or "numba" (kernel.py); default ``kernel.default_kernel()``. The threads its passes run on
    are the kernel's policy (threads.py: NumPy's BLAS on cores - 1, numba's threads on every core; ``MINISPEC_THREADS``
    overrides it), set by each pass, not here."""
    kernel = check_kernel(kernel) if kernel is not None else default_kernel()
    cfg = ModelConfig.from_dir(path)
    model = Model.from_hf(cfg, load_weights(path, cfg), name or Path(path).name, kernel)
    model.path = Path(path)
    return model
