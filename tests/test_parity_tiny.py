"""Tiny random models: minispec logits == transformers logits, for every supported architecture.

Needs the `parity` extra (torch, transformers); CI installs it, so these run there.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from minispec.model.safetensors_io import read_safetensors  # noqa: E402


def test_logits_match_transformers(tiny_model_dir, tiny_model):
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    ids = [3, 17, 5, 60, 2, 9, 33, 1, 40, 41, 42, 7]
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].numpy()
    got = tiny_model.forward(ids, tiny_model.new_cache(len(ids)))
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_bf16_file_is_read_like_torch(tmp_path):
    from safetensors.torch import save_file

    x = torch.randn(7, 5).to(torch.bfloat16)
    save_file({"x": x}, str(tmp_path / "t.safetensors"))
    np.testing.assert_array_equal(read_safetensors(tmp_path / "t.safetensors")["x"], x.float().numpy())


def test_bf16_writer_rounds_like_torch(tmp_path):
    from safetensors.torch import load_file

    from minispec.model.safetensors_io import write_safetensors

    x = np.random.default_rng(0).standard_normal((9, 4)).astype(np.float32)
    write_safetensors(tmp_path / "t.safetensors", {"x": x}, "BF16")
    got = load_file(str(tmp_path / "t.safetensors"))["x"]
    assert got.dtype == torch.bfloat16
    np.testing.assert_array_equal(got.float().numpy(), torch.from_numpy(x).to(torch.bfloat16).float().numpy())
