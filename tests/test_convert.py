"""GGUF -> Hugging Face conversion on a tiny GGUF that the test writes (llama.cpp's Q/K permutation included)."""

import json

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from minispec import ModelFormatError, load_model, load_tokenizer  # noqa: E402
from minispec.model.config import ModelConfig  # noqa: E402
from minispec.model.safetensors_io import read_safetensors  # noqa: E402
from minispec.model.tiny import random_tensors, tiny_config  # noqa: E402
from minispec.recipes.convert import GGUF_TO_HF, convert_gguf, permute_qk, unpermute_qk  # noqa: E402

HF_TO_GGUF = {v: k for k, v in GGUF_TO_HF.items()}
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [chr(c) for c in range(ord("a"), ord("a") + 26)] + ["ab", "abc"]


def gguf_name(hf: str) -> str:
    parts = hf.split(".")
    if parts[0] == "model" and parts[1] == "layers":
        return HF_TO_GGUF[".".join(parts[:2] + ["{i}"] + parts[3:])].format(i=parts[2])
    return HF_TO_GGUF[hf]


def write_tiny_gguf(path, cfg_dict, qtype=None, arch="llama", seed=0, meta=None):
    """A GGUF as llama.cpp's converter writes it: Q and K rows permuted, dims innermost-first. ``meta``: metadata
    keys changed, each to (value, GGUFValueType), or left out (None)."""
    cfg = ModelConfig.from_dict(cfg_dict)
    tensors = random_tensors(cfg, seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_heads)
    w.add_head_count_kv(cfg.num_kv_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(TOKENS + [f"t{i}" for i in range(cfg.vocab_size - len(TOKENS))])
    w.add_token_types([3, 3, 3] + [1] * (cfg.vocab_size - 3))
    w.add_token_merges(["a b", "ab c"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{{'<|im_start|>system\nYou are tiny<|im_end|>\n'}}")
    for key, value in (meta or {}).items():
        w.kv_data[0].pop(key, None)
        if value is not None:
            w.add_key_value(key, *value)
    for name, t in tensors.items():
        if name.endswith("q_proj.weight"):
            t = permute_qk(t, cfg.num_heads)
        elif name.endswith("k_proj.weight"):
            t = permute_qk(t, cfg.num_kv_heads)
        if qtype is not None and t.ndim == 2:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(t, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name(name), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def test_unpermute_inverts_llama_cpp_permutation():
    w = np.arange(6 * 8 * 3, dtype=np.float32).reshape(6 * 8, 3)
    np.testing.assert_array_equal(unpermute_qk(permute_qk(w, 6), 6), w)
    assert not np.array_equal(permute_qk(w, 6), w)
    # within a head of dim 8, llama.cpp interleaves rows (0, 4), (1, 5), ...: row 1 of the GGUF is HF row 4
    np.testing.assert_array_equal(permute_qk(w, 6)[1], w[4])


def test_tiny_gguf_converts_to_the_same_model(tmp_path):
    cfg = tiny_config(tie_word_embeddings=True, vocab_size=40)
    tensors = write_tiny_gguf(tmp_path / "t.gguf", cfg)
    out = convert_gguf(tmp_path / "t.gguf", tmp_path / "hf", progress=False)
    m = load_model(out)
    conf = json.loads((out / "config.json").read_text())
    assert conf["tie_word_embeddings"] and conf["num_key_value_heads"] == 2 and conf["eos_token_id"] == 2
    assert set(read_safetensors(out / "model.safetensors")) == set(tensors)
    ref = load_model(_write_hf(tmp_path / "ref", cfg, tensors))
    ids = [3, 4, 5, 30, 31, 7]
    np.testing.assert_array_equal(m.forward(ids, m.new_cache(8)), ref.forward(ids, ref.new_cache(8)))
    tok = load_tokenizer(out)
    assert tok.encode("abc") == [TOKENS.index("abc")]
    assert tok.encode("<|im_start|>a") == [1, TOKENS.index("a")]
    assert tok.eos_ids == [2]
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]).startswith("<|im_start|>system\nYou are tiny")


def _write_hf(path, cfg, tensors):
    from minispec.model.safetensors_io import write_safetensors

    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    write_safetensors(path / "model.safetensors", tensors)
    return path


def test_quantized_gguf_converts_close(tmp_path):
    cfg = tiny_config(vocab_size=64, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
    q8 = gguf.GGMLQuantizationType.Q8_0
    tensors = write_tiny_gguf(tmp_path / "q.gguf", cfg, qtype=q8)
    m = load_model(convert_gguf(tmp_path / "q.gguf", tmp_path / "hf", progress=False))
    # Q8_0 blocks run along rows, so the row permutation commutes with quantization
    roundtrip = {n: gguf.quants.dequantize(gguf.quants.quantize(t, q8), q8) if t.ndim == 2 else t for n, t in tensors.items()}
    ref = load_model(_write_hf(tmp_path / "ref", cfg, roundtrip))
    unquantized = load_model(_write_hf(tmp_path / "f32", cfg, tensors))
    ids = [3, 4, 5, 30, 31, 7]
    got = m.forward(ids, m.new_cache(8))
    np.testing.assert_array_equal(got, ref.forward(ids, ref.new_cache(8)))
    np.testing.assert_allclose(got, unquantized.forward(ids, unquantized.new_cache(8)), atol=0.2)


def test_unsupported_architecture_is_refused(tmp_path):
    write_tiny_gguf(tmp_path / "x.gguf", tiny_config(), arch="gpt2")
    with pytest.raises(ModelFormatError, match="architecture 'gpt2' is not supported"):
        convert_gguf(tmp_path / "x.gguf", tmp_path / "out", progress=False)


def test_not_a_gguf_file(tmp_path):
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
    with pytest.raises(ModelFormatError, match="not a readable GGUF"):
        convert_gguf(tmp_path / "bad.gguf", tmp_path / "out", progress=False)
    with pytest.raises(FileNotFoundError):
        convert_gguf(tmp_path / "missing.gguf", tmp_path / "out", progress=False)


def test_q4_1_kept_in_its_blocks_is_the_same_model(tmp_path):
    """``convert --q4_1`` keeps the Q4_1 matrices in their blocks (Q and K rows un-permuted whole): read by the NumPy
    kernel it is bitwise the float32 conversion, and the numba kernel multiplies in the blocks, close to it."""
    from minispec.model.safetensors_io import read_header

    cfg = tiny_config(vocab_size=64, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
    write_tiny_gguf(tmp_path / "q.gguf", cfg, qtype=gguf.GGMLQuantizationType.Q4_1)
    f32 = convert_gguf(tmp_path / "q.gguf", tmp_path / "f32", progress=False)
    q4 = convert_gguf(tmp_path / "q.gguf", tmp_path / "q4", progress=False, keep_q4_1=True)
    header, _ = read_header(q4 / "model.safetensors")
    assert header["model.layers.0.self_attn.q_proj.weight"]["dtype"] == "Q4_1"
    assert (q4 / "model.safetensors").stat().st_size < (f32 / "model.safetensors").stat().st_size / 4
    ids = [3, 4, 5, 30, 31, 7]
    ref = load_model(f32)
    want = ref.forward(ids, ref.new_cache(8))
    m = load_model(q4)
    np.testing.assert_array_equal(m.forward(ids, m.new_cache(8)), want)
    pytest.importorskip("numba")
    from minispec.model.kernel import Q4Matrix

    m = load_model(q4, kernel="numba")
    assert isinstance(m.layers[0].w_qkv, Q4Matrix)
    np.testing.assert_allclose(m.forward(ids, m.new_cache(8)), want, atol=1e-4)


def test_keeping_q4_1_from_a_gguf_without_it_is_refused(tmp_path):
    cfg = tiny_config(vocab_size=64, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
    write_tiny_gguf(tmp_path / "q.gguf", cfg, qtype=gguf.GGMLQuantizationType.Q8_0)
    with pytest.raises(ModelFormatError, match="no Q4_1 matrix to keep .*Q8_0"):
        convert_gguf(tmp_path / "q.gguf", tmp_path / "q4", progress=False, keep_q4_1=True)


def test_a_float32_gguf_holds_the_weights_minispec_runs(tmp_path):
    """``gguf_float32``: every tensor of a Q4_1 GGUF written again in float32, metadata copied but the file type; read
    back through minispec's own conversion it is bitwise the model converted from the Q4_1 file (so llama.cpp, which
    reads the float32 file, runs the very weights minispec runs)."""
    from minispec.recipes.gguf_float32 import ALL_F32, write_float32_gguf

    cfg = tiny_config(vocab_size=64, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
    write_tiny_gguf(tmp_path / "q.gguf", cfg, qtype=gguf.GGMLQuantizationType.Q4_1)
    out = write_float32_gguf(tmp_path / "q.gguf", tmp_path / "f32.gguf", progress=False)
    src, got = gguf.GGUFReader(str(tmp_path / "q.gguf")), gguf.GGUFReader(str(out))
    assert {t.tensor_type for t in got.tensors} == {gguf.GGMLQuantizationType.F32}
    assert any(t.tensor_type == gguf.GGMLQuantizationType.Q4_1 for t in src.tensors)
    for a, b in zip(src.tensors, got.tensors, strict=True):
        assert a.name == b.name and list(a.shape) == list(b.shape)
        np.testing.assert_array_equal(gguf.quants.dequantize(a.data, a.tensor_type), b.data)
    kept = {k: f.contents() for k, f in got.fields.items() if not k.startswith("GGUF.")}
    assert kept.pop("general.file_type") == ALL_F32
    assert kept == {k: f.contents() for k, f in src.fields.items() if not k.startswith("GGUF.") and k != "general.file_type"}
    ids = [3, 4, 5, 30, 31, 7]
    a, b = (load_model(convert_gguf(p, tmp_path / p.stem, progress=False)) for p in (tmp_path / "q.gguf", out))
    np.testing.assert_array_equal(a.forward(ids, a.new_cache(8)), b.forward(ids, b.new_cache(8)))
    assert not list(tmp_path.glob("*.partial"))


def test_a_float32_gguf_refuses_bad_paths(tmp_path):
    from minispec.recipes.gguf_float32 import write_float32_gguf

    write_tiny_gguf(tmp_path / "q.gguf", tiny_config())
    with pytest.raises(FileNotFoundError, match="missing.gguf: no such file"):
        write_float32_gguf(tmp_path / "missing.gguf", tmp_path / "o.gguf", progress=False)
    with pytest.raises(ValueError, match="must be a file, not a directory or the source itself"):
        write_float32_gguf(tmp_path / "q.gguf", tmp_path / "q.gguf", progress=False)
    with pytest.raises(ValueError, match="must be a file, not a directory or the source itself"):
        write_float32_gguf(tmp_path / "q.gguf", tmp_path, progress=False)
    with pytest.raises(FileNotFoundError, match="its folder .*nowhere does not exist"):
        write_float32_gguf(tmp_path / "q.gguf", tmp_path / "nowhere" / "o.gguf", progress=False)
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
    with pytest.raises(ModelFormatError, match="not a readable GGUF"):
        write_float32_gguf(tmp_path / "bad.gguf", tmp_path / "o.gguf", progress=False)


def test_a_float32_gguf_says_so_in_its_file_type(tmp_path):
    """A GGUF that declares its file type (llama.cpp's MOSTLY_Q4_1, 3, as the fetched SmolLM2's does) is written
    again declaring ALL_F32 (0), its tensors float32."""
    from minispec.recipes.gguf_float32 import ALL_F32, write_float32_gguf

    w = gguf.GGUFWriter(str(tmp_path / "typed.gguf"), "llama")
    w.add_file_type(3)
    q4 = gguf.GGMLQuantizationType.Q4_1
    w.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(np.linspace(-1, 1, 64 * 4, dtype=np.float32).reshape(4, 64), q4),
                 raw_dtype=q4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    got = gguf.GGUFReader(str(write_float32_gguf(tmp_path / "typed.gguf", tmp_path / "f32.gguf", progress=False)))
    assert got.fields["general.file_type"].contents() == ALL_F32
    assert [t.tensor_type for t in got.tensors] == [gguf.GGMLQuantizationType.F32]


STRING, UINT32, BOOL = gguf.GGUFValueType.STRING, gguf.GGUFValueType.UINT32, gguf.GGUFValueType.BOOL


def existing_dir(d):
    """A directory that holds a model's files already: -> {name: bytes}, to check that they are kept."""
    d.mkdir()
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        (d / name).write_bytes(b"kept " + name.encode())
    return {f.name: f.read_bytes() for f in d.iterdir()}


def test_an_unsupported_tokenizer_is_refused_before_anything_is_written(tmp_path):
    """(bug: model.safetensors, config.json and generation_config.json of an existing directory were overwritten,
    then the tokenizer refused, without the GGUF named)"""
    write_tiny_gguf(tmp_path / "sp.gguf", tiny_config(), meta={"tokenizer.ggml.model": ("llama", STRING)})
    kept = existing_dir(tmp_path / "out")
    with pytest.raises(ModelFormatError, match=r"sp\.gguf: tokenizer model .*'llama' is not supported"):
        convert_gguf(tmp_path / "sp.gguf", tmp_path / "out", progress=False)
    assert {f.name: f.read_bytes() for f in (tmp_path / "out").iterdir()} == kept


def test_a_failed_write_leaves_an_existing_directory_as_it_was(tmp_path, monkeypatch):
    """Every file is written under a .partial name and renamed once all are written: a write that fails (here the
    last, tokenizer_config.json) leaves the old files, and no .partial file."""
    from minispec.recipes import convert

    class FullDisk:  # convert's json, failing on tokenizer_config.json
        @staticmethod
        def dumps(obj, **kw):
            if "tokenizer_class" in obj:
                raise OSError("no space left on device")
            return json.dumps(obj, **kw)

    write_tiny_gguf(tmp_path / "t.gguf", tiny_config())
    kept = existing_dir(tmp_path / "out")
    monkeypatch.setattr(convert, "json", FullDisk)
    with pytest.raises(OSError, match="no space left"):
        convert_gguf(tmp_path / "t.gguf", tmp_path / "out", progress=False)
    assert {f.name: f.read_bytes() for f in (tmp_path / "out").iterdir()} == kept


@pytest.mark.parametrize("meta, expected", [
    ({"tokenizer.ggml.tokens": None}, "no 'tokenizer.ggml.tokens'"),  # (bug: a KeyError)
    ({"llama.attention.head_count": (0, UINT32)}, "llama.attention.head_count must be a positive whole number, got 0"),
    ({"llama.attention.layer_norm_rms_epsilon": None}, "no 'llama.attention.layer_norm_rms_epsilon'"),
    ({"llama.embedding_length": None}, "no 'llama.embedding_length'"),
    ({"tokenizer.ggml.eos_token_id": (999, UINT32)}, "tokenizer.ggml.eos_token_id 999 is not a token id"),
], ids=["no tokens", "head_count 0", "no rms epsilon", "no embedding_length", "eos id out of range"])
def test_missing_or_bad_metadata_is_refused_by_key_before_anything_is_written(tmp_path, meta, expected):
    write_tiny_gguf(tmp_path / "m.gguf", tiny_config(), meta=meta)
    with pytest.raises(ModelFormatError, match=r"m\.gguf: " + expected):
        convert_gguf(tmp_path / "m.gguf", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("meta, expected", [
    ({"tokenizer.ggml.pre": ("llama-bpe", STRING)}, "pre-tokenizer .*'llama-bpe' is not supported .*'gpt-2', 'smollm'"),
    ({"tokenizer.ggml.pre": None}, "pre-tokenizer .*None is not supported"),
    ({"tokenizer.ggml.add_bos_token": (True, BOOL)}, "tokenizer.ggml.add_bos_token is true, which is not supported"),
], ids=["pre llama-bpe", "no pre", "add_bos_token"])
def test_a_tokenizer_it_would_run_differently_is_refused(tmp_path, meta, expected):
    """(bug: any pre-tokenizer but 'smollm' got GPT-2's split, and add_bos_token was ignored: prompts would have
    been tokenized otherwise than llama.cpp tokenizes them)"""
    write_tiny_gguf(tmp_path / "p.gguf", tiny_config(), meta=meta)
    with pytest.raises(ModelFormatError, match=r"p\.gguf: " + expected):
        convert_gguf(tmp_path / "p.gguf", tmp_path / "out", progress=False)


def test_the_gpt2_pre_tokenizer_is_gpt2s_split(tmp_path):
    write_tiny_gguf(tmp_path / "g.gguf", tiny_config(), meta={"tokenizer.ggml.pre": ("gpt-2", STRING)})
    out = convert_gguf(tmp_path / "g.gguf", tmp_path / "out", progress=False)
    assert json.loads((out / "tokenizer.json").read_text())["pre_tokenizer"]["type"] == "ByteLevel"
    assert load_tokenizer(out).encode("abc") == [TOKENS.index("abc")]
