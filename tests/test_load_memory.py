"""Loading holds one float32 copy of the weights, not two, and reads the same values as before.

The model keeps every matrix in its own layout (fused, transposed); reading a tensor block by block
straight into that layout (``weights.Checkpoint``) is what keeps the peak near one copy.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minispec import ModelConfig, load_model
from minispec.model import weights
from minispec.model.safetensors_io import read_safetensors
from minispec.model.tiny import tiny_config, write_random_model
from minispec.model.transformer import Model

from .helpers import make_config

# ~214 MB of float32 weights, most of it a large untied head: transposing that head from its [V, D] file
# layout into [D, V] is where a load that reads the whole tensor first holds a second copy.
BIG = tiny_config(vocab_size=65536, hidden_size=384, intermediate_size=1024, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=False)

CHILD = """
import sys
import minispec
from minispec import generate, load_model  # noqa: F401 (loaded before the baseline: code, not weights)

def peak_kb():  # this process's high-water mark of resident memory, in KB (Linux)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

base = peak_kb()  # the interpreter, NumPy and minispec
model = minispec.load_model(sys.argv[1])
minispec.generate(model, [1, 2, 3], 4)
print((peak_kb() - base) * 1024, model.weight_bytes)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
@pytest.mark.parametrize("dtype", ["F32", "BF16"])
def test_loading_and_generating_peak_near_one_copy_of_the_weights(tmp_path, dtype):
    path = write_random_model(tmp_path / "big", BIG, dtype=dtype)
    # a fresh process: its VmHWM counts only what it did itself
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True).stdout
    grown, weight_bytes = map(int, out.split())
    assert weight_bytes > 200e6
    assert grown <= 1.25 * weight_bytes, f"peak RSS grew by {grown / weight_bytes:.2f}x the weights"


def fused_arrays(model):
    arrays = {"embed": model.embed, "final_norm": model.final_norm, "lm_head": model.lm_head}
    for i, layer in enumerate(model.layers):
        arrays.update({f"{i}.{k}": v for k, v in vars(layer).items() if v is not None})
    return arrays


@pytest.mark.parametrize("name", ["llama-gqa", "llama-mha-tied", "qwen2-bias"])
@pytest.mark.parametrize("dtype, shards", [("F32", 1), ("F32", 3), ("BF16", 1), ("F16", 2)])
def test_block_by_block_load_is_bit_identical_to_fusing_whole_tensors(tmp_path, monkeypatch, name, dtype, shards):
    path = write_random_model(tmp_path / "m", make_config(name), seed=4, dtype=dtype, shards=shards)
    cfg = ModelConfig.from_dir(path)
    whole = {}
    for f in path.glob("*.safetensors"):
        whole.update(read_safetensors(f))
    want = fused_arrays(Model.from_hf(cfg, whole))
    monkeypatch.setattr(weights, "BLOCK_BYTES", 200)  # a few rows per block, so every tensor takes several reads
    got = fused_arrays(load_model(path))
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == np.float32 and got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_checkpoint_reads_the_file_values_and_is_consumed_by_pop(tmp_path):
    path = write_random_model(tmp_path / "m", make_config("qwen2-bias"), seed=5, dtype="BF16")
    ckpt = weights.load_weights(path, ModelConfig.from_dir(path))
    stored = read_safetensors(path / "model.safetensors")
    assert set(ckpt) == set(stored) and len(ckpt) == len(stored)
    for name, arr in ckpt.items():
        np.testing.assert_array_equal(arr, stored[name])
    name = "model.layers.0.self_attn.q_proj.weight"
    np.testing.assert_array_equal(ckpt.pop(name), stored[name])
    assert name not in ckpt
    with pytest.raises(KeyError):
        ckpt.pop(name)
