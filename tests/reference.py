"""An independent, deliberately naive Llama forward straight from Hugging Face tensors.

No cache, no fusion, no transposed layouts, one query at a time: it shares no code with
minispec.model, so agreeing with it checks the fused, cached implementation.
"""

import numpy as np

from minispec.model.config import ModelConfig


def naive_forward(t: dict, cfg: ModelConfig, ids) -> np.ndarray:  # -> logits [T, V] float64
    t = {k: v.astype(np.float64) for k, v in t.items()}
    H, KVH, HD = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    x = t["model.embed_tokens.weight"][list(ids)]
    T = len(ids)

    def norm(v, w):
        return v / np.sqrt((v ** 2).mean(-1, keepdims=True) + cfg.rms_norm_eps) * w

    def rot(v, pos):  # v [HD]
        inv = 1.0 / cfg.rope_theta ** (np.arange(0, HD, 2) / HD)
        c, s = np.cos(pos * inv), np.sin(pos * inv)
        a, b = v[: HD // 2], v[HD // 2:]
        return np.concatenate([a * c - b * s, b * c + a * s])

    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        h = norm(x, t[p + "input_layernorm.weight"])
        q, k, v = (h @ t[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        if cfg.attention_bias:
            q, k, v = (a + t[p + f"self_attn.{n}_proj.bias"] for a, n in zip((q, k, v), "qkv"))
        out = np.zeros((T, H * HD))
        for hh in range(H):
            kv = hh // (H // KVH)
            for qi in range(T):
                qv = rot(q[qi, hh * HD:(hh + 1) * HD], qi)
                scores = np.array([qv @ rot(k[j, kv * HD:(kv + 1) * HD], j) for j in range(qi + 1)]) / np.sqrt(HD)
                w = np.exp(scores - scores.max())
                w /= w.sum()
                out[qi, hh * HD:(hh + 1) * HD] = w @ v[: qi + 1, kv * HD:(kv + 1) * HD]
        x = x + out @ t[p + "self_attn.o_proj.weight"].T
        h = norm(x, t[p + "post_attention_layernorm.weight"])
        g = h @ t[p + "mlp.gate_proj.weight"].T
        u = h @ t[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ t[p + "mlp.down_proj.weight"].T
    head = t["model.embed_tokens.weight"] if cfg.tie_word_embeddings else t["lm_head.weight"]
    return norm(x, t["model.norm.weight"]) @ head.T
