"""The quantized target: Q4_1 blocks (minispec/model/q4_1.py) as ggml makes them, stored in a model directory and
refused when malformed (safetensors_io), multiplied in place by the numba kernel (``numba_kernel.q4_1_rows``):
the same numbers as the dequantized matrix, rows bitwise the same whatever the pass (a twin whose order depends on
the number of rows is caught), and a quantized model that is its own target: greedy speculation gives its tokens."""

import json

import numpy as np
import pytest

from minispec import ModelFormatError
from minispec.model import load_model
from minispec.model.config import ModelConfig
from minispec.model.q4_1 import Q4Blocks, dequantize, from_gguf, quantize
from minispec.model.safetensors_io import read_header, read_safetensors, write_safetensors
from minispec.model.tiny import random_tensors, tiny_config

from .helpers import edit_header

WIDE = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, vocab_size=80)


def random_blocks(out_dim=40, in_dim=96, seed=0) -> tuple[np.ndarray, Q4Blocks]:
    w = np.random.default_rng(seed).standard_normal((out_dim, in_dim)).astype(np.float32)
    return w, quantize(w)


def test_quantize_and_dequantize_match_the_gguf_package_ggml_port():
    gguf = pytest.importorskip("gguf")
    w, b = random_blocks()
    q4 = gguf.GGMLQuantizationType.Q4_1
    raw = gguf.quants.quantize(w, q4)  # [40, 3 blocks x 20 bytes]
    from minispec.model.q4_1 import from_gguf

    theirs = from_gguf(raw, (40, 96))
    assert np.array_equal(theirs.qs, b.qs) and np.array_equal(theirs.d, b.d) and np.array_equal(theirs.m, b.m)
    assert np.array_equal(dequantize(b), gguf.quants.dequantize(raw, q4).reshape(40, 96))  # bitwise
    d, m = (a.astype(np.float32)[..., None] for a in (b.d, b.m))  # [40, 3, 1]
    err = np.abs(dequantize(b) - w).reshape(40, 3, 32)
    assert (err <= d / 2 + (np.abs(m) + 15 * d) * 2.0 ** -11 + 1e-6).all()  # half a step, and d, m rounded to float16
    with pytest.raises(ValueError, match="takes 2400 bytes, got 2399"):
        from_gguf(raw.ravel()[:-1], (40, 96))
    with pytest.raises(ValueError, match="multiple of 32"):
        from_gguf(raw, (40, 95))
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize(w[:, :95])
    with pytest.raises(ValueError, match="NaN or infinite"):
        Q4Blocks(b.qs, b.d, np.where(np.arange(3) == 2, np.float16(np.inf), b.m))


def test_a_hand_written_ggml_block_reads_and_quantizes_as_ggml_lays_it_out():
    """Two ggml block_q4_1 blocks written byte by byte (d float16, m float16, 16 bytes of nibbles: byte i holds q_i in
    its low half and q_{i+16} in its high half; w = q * d + m), their weights worked out here from those literals: the
    nibble order, d and m are checked without the gguf package (a twin that swaps the halves in both quantize and
    dequantize round-trips, and is caught here)."""
    raw = bytes.fromhex("0038" "00bc" "f0e1d2c3b4a5968778695a4b3c2d1e0f"  # d = 0.5, m = -1.0; bytes 0xf0, 0xe1, ...
                        "0040" "0034" + "0f" * 16)  # d = 2.0, m = 0.25; every byte 0x0f
    low = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]  # row 0: the low halves, q_0 .. q_15
    high = [15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]  # and the high halves, q_16 .. q_31
    want = np.array([[q * 0.5 - 1.0 for q in low + high],
                     [q * 2.0 + 0.25 for q in [15] * 16 + [0] * 16]], np.float32)
    b = from_gguf(np.frombuffer(raw, np.uint8), (2, 32))
    assert b.d.tolist() == [[0.5], [2.0]] and b.m.tolist() == [[-1.0], [0.25]]
    assert np.array_equal(dequantize(b), want)
    back = quantize(want)  # each row spans q = 0..15 exactly, so ggml's quantizer gives these very bytes
    assert back.qs.tobytes() == raw[4:20] + raw[24:40]
    assert back.d.tolist() == [[0.5], [2.0]] and back.m.tolist() == [[-1.0], [0.25]]


@pytest.mark.parametrize("shape", [(0, 32), (-1, -32), (2, 0), (3, 16), (1, 48)])
def test_a_shape_without_whole_blocks_is_refused_by_name(shape):
    """No rows, negative sizes, rows shorter than a block or not whole blocks: refused naming the shape, before any
    reshape (bug: (0, 32) failed inside NumPy's reshape, (-1, -32) reached the byte count)."""
    words = rf"out at least 1 and in a positive multiple of 32, got shape \({shape[0]}, {shape[1]}\)"
    with pytest.raises(ValueError, match=words):
        from_gguf(np.zeros(abs(shape[0] * shape[1]) // 32 * 20, np.uint8), shape)  # the bytes such a shape would take
    if min(shape) >= 0:
        with pytest.raises(ValueError, match=words):
            quantize(np.zeros(shape, np.float32))


def test_a_shape_of_other_than_two_whole_numbers_is_refused():
    for shape in [(1.5, 32), ("1", 32), (1, 32, 1), 32]:
        with pytest.raises(ValueError, match="of two whole numbers, got shape"):
            from_gguf(np.zeros(20, np.uint8), shape)


@pytest.mark.parametrize("w, says", [(np.full((2, 64), 7e4, np.float32), "block 0 of row 0 .* has d = 0 and m = 70000"),
                                     (np.arange(64, dtype=np.float32).reshape(2, 32) * 1e5, "block 0 of row 0 .* has d = 206667"),
                                     (np.full((1, 32), 1e39), "beyond float32's range")])
def test_weights_beyond_float16s_d_and_m_are_refused_by_name(w, says):
    """d and m are float16: a block whose step or minimum overflows it is refused naming the block and float16 (bug:
    refused as "Q4_1 m holds NaN or infinite values", as if the weights were)."""
    with pytest.raises(ValueError, match=says) as e:
        quantize(w)
    assert "float16" in str(e.value) and "NaN" not in str(e.value)
    assert quantize(np.full((1, 32), -65504, np.float32)).m.tolist() == [[-65504.0]]  # the edge itself is float16: kept


def test_q4_1_in_safetensors_round_trips_and_malformed_parts_are_refused(tmp_path):
    _, b = random_blocks()
    f = tmp_path / "m.safetensors"
    write_safetensors(f, {"w": b, "n": np.ones(3, np.float32)})
    header, _ = read_header(f)
    assert header["w"]["dtype"] == "Q4_1" and header["w"]["shape"] == [40, 96] and set(header) == {"w", "n"}
    assert np.array_equal(read_safetensors(f)["w"], dequantize(b))
    qs, d16 = b.qs.reshape(40, 48), b.d.astype(np.float16)
    for parts, words in [({"w": qs, "dd": d16}, "lacks 'w_q4_1_m'"),  # m missing
                         ({"w": qs[:, :40], "dd": d16, "mm": d16}, "multiple of 32"),  # rows of 80 inputs
                         ({"w": qs.reshape(-1), "dd": d16, "mm": d16}, r"expected \[rows, cols/2\]"),
                         ({"w": qs, "dd": d16, "mm": d16[:, :2]}, r"expected a float .* of shape \(40, 3\)"),
                         ({"w": qs.astype(np.float32), "dd": d16, "mm": d16}, "is F32, expected U8"),
                         ({"w": qs, "dd": d16.astype(np.int16), "mm": d16}, "is I16 of shape")]:
        g = tmp_path / "bad.safetensors"
        write_safetensors(g, parts)  # under names of their own, renamed as parts of "w" after: the layout stays valid
        edit_header(g, lambda h: h.update({new: h.pop(old) for old, new in (("dd", "w_q4_1_d"), ("mm", "w_q4_1_m"))
                                           if old in h}))
        with pytest.raises(ModelFormatError, match=words):
            read_header(g)
    with pytest.raises(ValueError, match="kept for the parts of a Q4_1 matrix"):
        write_safetensors(tmp_path / "x.safetensors", {"a_q4_1_d": np.ones(2, np.float32)})
    for bad, words in ((np.where(np.arange(3) == 1, np.float16(np.nan), d16), "NaN or infinite"),
                       (np.where(np.arange(3) == 1, np.float16(-1), d16), "negative step")):
        write_safetensors(tmp_path / "x.safetensors", {"w": qs, "dd": bad, "mm": d16})
        edit_header(tmp_path / "x.safetensors", lambda h: h.update(w_q4_1_d=h.pop("dd"), w_q4_1_m=h.pop("mm")))
        with pytest.raises(ModelFormatError, match=words):
            read_safetensors(tmp_path / "x.safetensors")


def test_a_part_without_its_matrix_is_refused(tmp_path):
    f = tmp_path / "m.safetensors"
    write_safetensors(f, {"w": np.ones((2, 32), np.float32)})
    edit_header(f, lambda h: h.update(w_q4_1_d=h.pop("w")))
    with pytest.raises(ModelFormatError, match="three tensors"):
        read_header(f)


def twin_q4_matmul(x, qt, dt, mt):
    """The planted twin: the right numbers, summed over the inputs forwards for one row and backwards for more."""
    w = dequantize(Q4Blocks(qt.transpose(2, 0, 1), dt.T, mt.T))  # [out, in]
    order = range(w.shape[1]) if len(x) == 1 else reversed(range(w.shape[1]))
    out = np.zeros((len(x), w.shape[0]), np.float32)
    for e in order:
        out += x[:, e, None] * w[None, :, e]
    return out


def rows_alone_and_together(matmul, x) -> bool:
    together = matmul(x)
    return all(np.array_equal(matmul(x[t: t + 1])[0], together[t]) for t in range(len(x)))


@pytest.mark.parametrize("out_dim,in_dim", [(40, 96), (576, 64), (300, 32)])
def test_the_kernel_multiplies_in_the_blocks_and_its_rows_are_bitwise_invariant(out_dim, in_dim, monkeypatch):
    pytest.importorskip("numba")
    from minispec.model import numba_kernel
    from minispec.model.kernel import Q4Matrix

    w, b = random_blocks(out_dim, in_dim, seed=out_dim)
    m = Q4Matrix(b)
    assert m.shape == (in_dim, out_dim) and np.array_equal(np.asarray(m), dequantize(b).T)
    assert m.nbytes < dequantize(b).nbytes / 4  # 6 bits a weight, not 32
    x = np.random.default_rng(1).standard_normal((16, in_dim)).astype(np.float32)
    np.testing.assert_allclose(m.rmatmul(x), x @ dequantize(b).T, rtol=1e-5, atol=1e-4)
    assert np.array_equal(m.rmatmul(np.eye(in_dim, dtype=np.float32)), dequantize(b).T)  # its weights, bitwise
    for T in (2, 3, 4, 5, 8, 9, 16):
        assert rows_alone_and_together(m.rmatmul, x[:T]), T
    monkeypatch.setattr(m, "_matmul", twin_q4_matmul)
    assert not rows_alone_and_together(m.rmatmul, x[:8])  # the twin is caught
    with pytest.raises(TypeError, match="float32"):
        numba_kernel.q4_1_matmul(x.astype(np.float64), m.qt, m.dt, m.mt)
    with pytest.raises(ValueError, match="inputs"):
        numba_kernel.q4_1_matmul(x[:, :-1], m.qt, m.dt, m.mt)


def write_q4_model(path, seed=3):
    """A tiny model directory whose matrices (not the embedding) are stored in Q4_1 blocks."""
    cfg = tiny_config(**WIDE)
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    t = random_tensors(ModelConfig.from_dict(cfg), seed)
    write_safetensors(path / "model.safetensors",
                      {n: quantize(a) if a.ndim == 2 and "embed" not in n else a for n, a in t.items()})
    return path


def test_a_quantized_model_is_its_own_target(tmp_path):
    pytest.importorskip("numba")
    from minispec import generate
    from minispec.drafters import DraftModel
    from minispec.harness import batch_invariance
    from minispec.model.kernel import Q4Matrix
    from minispec.speculative import speculative_generate

    d = write_q4_model(tmp_path / "q4")
    q4 = load_model(d, kernel="numba")
    ref = load_model(d, kernel="numpy")  # the reference: the same blocks, dequantized at load
    assert isinstance(q4.layers[0].w_qkv, Q4Matrix) and isinstance(q4.layers[1].w_down, Q4Matrix)
    assert type(ref.layers[0].w_qkv) is np.ndarray
    ids = [3, 4, 5, 30, 31, 7, 9, 60]
    np.testing.assert_allclose(q4.forward(ids, q4.new_cache(16)), ref.forward(ids, ref.new_cache(16)), atol=1e-4)
    got = batch_invariance.measure(q4, [int(t) for t in np.random.default_rng(0).integers(0, 80, 40)], prefix=16)
    assert all(got[str(n)]["identical_rows"] == 1.0 for n in batch_invariance.NS), got
    assert got["tree"]["identical_rows"] == 1.0
    # the consequence, on this tiny model (the bitwise rows above are what a broken kernel would fail)
    plain = generate(q4, [1, 2, 3], 24)
    for k in (1, 3, 5):
        assert speculative_generate(q4, DraftModel(ref.truncated(1)), [1, 2, 3], 24, k=k).tokens == plain


def test_bench_forward_times_a_q4_1_directory_beside_a_float32_one_under_both_kernels(tmp_path, capsys):
    """The Q4_1 directory is skipped under NumPy, which reads it dequantized (the float32 row), and timed under numba
    (bug: its format was read off the model NumPy had loaded, always float32, so it was refused as a second float32
    model)."""
    pytest.importorskip("numba")
    from minispec.harness.bench import main as bench_main
    from minispec.model.tiny import write_random_model

    q4 = write_q4_model(tmp_path / "q4")
    f32 = write_random_model(tmp_path / "f32", tiny_config(**WIDE), seed=3)
    assert bench_main(["forward", "--model", str(f32), "--model", str(q4), "--kernel", "numpy,numba", "--ns", "1,2",
                       "--repeats", "1", "--context", "4", "--json"]) == 0
    captured = capsys.readouterr()
    res = json.loads(captured.out)
    assert list(res["kernels"]) == ["numpy float32", "numba float32", "numba q4_1"]
    assert [v["format"] for v in res["kernels"].values()] == ["float32", "float32", "q4_1"]
    assert "skipped under numpy, which reads its q4_1 blocks dequantized" in captured.err
