"""llama.cpp beside minispec (harness/llama_cpp_times.py, ``bench forward --gguf``; specbench_peers.py): what can be checked
without llama-cpp-python, and, where it is installed, its timing and its greedy tokens on a tiny GGUF."""

import json

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from minispec import load_model  # noqa: E402
from minispec.harness import llama_cpp_times  # noqa: E402
from minispec.harness.bench import gguf_matrices, matrix_weights  # noqa: E402
from minispec.harness.bench import main as bench_main  # noqa: E402
from minispec.model.tiny import tiny_config  # noqa: E402
from minispec.recipes.convert import convert_gguf  # noqa: E402

from .test_convert import write_tiny_gguf  # noqa: E402

CFG = dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)


@pytest.mark.parametrize("tied", [True, False])
def test_a_ggufs_flops_per_row_are_minispecs(tmp_path, tied):
    """``gguf_matrices``' FLOPs per row, read from the GGUF's tensors, are those minispec multiplies in the same model
    (2 per weight of every matrix and the head; a tied head is the embedding, counted once)."""
    write_tiny_gguf(tmp_path / "q.gguf", tiny_config(**CFG, tie_word_embeddings=tied), qtype=gguf.GGMLQuantizationType.Q4_1)
    fmt, flop = gguf_matrices(tmp_path / "q.gguf")
    model = load_model(convert_gguf(tmp_path / "q.gguf", tmp_path / "hf", progress=False))
    assert fmt == "q4_1" and flop == 2 * matrix_weights(model)


def test_bench_forward_refuses_a_missing_gguf(tmp_path):
    with pytest.raises(FileNotFoundError, match="--gguf .*nothing.gguf: no such file"):
        bench_main(["forward", "--gguf", str(tmp_path / "nothing.gguf"), "--ns", "1,2", "--repeats", "1"])


def test_a_bad_gguf_is_refused_before_anything_is_timed(tmp_path):
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
    with pytest.raises(ValueError, match="bad.gguf: not a readable GGUF"):
        gguf_matrices(tmp_path / "bad.gguf")
    w = gguf.GGUFWriter(str(tmp_path / "embedding.gguf"), "llama")
    w.add_tensor("token_embd.weight", np.ones((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match="no matrix besides the embedding"):
        gguf_matrices(tmp_path / "embedding.gguf")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    if not llama_cpp_times.installed():
        pytest.skip("llama-cpp-python is not installed (optional: it builds from source, over 10 minutes on 2 cores)")
    path = tmp_path_factory.mktemp("llama") / "tiny.gguf"
    write_tiny_gguf(path, tiny_config(**CFG))
    return path


def test_bench_forward_times_llama_cpp_beside_minispec(tiny_gguf, tmp_path, capsys):
    model = convert_gguf(tiny_gguf, tmp_path / "hf", progress=False)
    assert bench_main(["forward", "--model", str(model), "--gguf", str(tiny_gguf), "--ns", "1,2,4", "--repeats", "2",
                       "--context", "8", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["kernels"]
    peer = rows["llama.cpp float32"]
    assert set(peer["ms"]) == {"1", "2", "4"} and all(v > 0 for v in peer["ms"].values())
    assert peer["r"]["4"] == pytest.approx(peer["ms"]["4"] / peer["ms"]["1"], rel=1e-3) and peer["context"] == 8
    assert len(rows) == 2  # minispec's kernel and llama.cpp, in one run
    with pytest.raises(ValueError, match="a file named twice"):
        bench_main(["forward", "--model", str(model), "--gguf", str(tiny_gguf), "--gguf", str(tiny_gguf)])
    (tmp_path / "copy.gguf").write_bytes(tiny_gguf.read_bytes())
    with pytest.raises(ValueError, match="two files of one format"):
        bench_main(["forward", "--model", str(model), "--gguf", str(tiny_gguf), "--gguf", str(tmp_path / "copy.gguf")])


def test_llama_cpp_greedy_tokens_are_minispecs_on_the_same_weights(tiny_gguf, tmp_path):
    """The peer's plain decoding and prompt lookup on a GGUF, and minispec's plain decoding on its conversion: the same
    greedy tokens wherever the target's top-2 logit margin is not a near tie."""
    from minispec.generate import generate
    from minispec.harness.specbench_peers import llama_cpp_modes

    model = load_model(convert_gguf(tiny_gguf, tmp_path / "hf", progress=False))
    modes = llama_cpp_modes(tiny_gguf, 12, [2], n_ctx=64)
    assert set(modes) == {"llama.cpp plain", "llama.cpp prompt-lookup"}
    prompt = [5, 9, 14, 5, 9, 14, 5]
    want = generate(model, prompt, 12, stop_ids=[2])
    logits = model.forward(prompt + want, model.new_cache(len(prompt) + len(want)))[len(prompt) - 1:]
    top2 = np.sort(logits, axis=-1)[:, -2:]
    for name, run in modes.items():
        got = run(prompt)
        assert got and (len(got) == 12 or got[-1] == 2), (name, got)
        j = next((i for i, (a, b) in enumerate(zip(got + [-1], want + [-2])) if a != b), None) if got != want else None
        assert j is None or top2[j, 1] - top2[j, 0] < 1e-3, (name, got, want, j)
    with pytest.raises(ValueError, match="exceed its n_ctx 64"):
        modes["llama.cpp plain"](list(range(60)))


def test_llama_cpp_prompt_lookup_reads_a_prompt_longer_than_its_batch(tiny_gguf):
    """llama-cpp-python 0.3.36 sizes its logits buffer by ``logits_all`` (n_batch = 512 rows without it) but turns
    ``logits_all`` on itself when given a draft: a 600-token prompt overflowed it until the peer asked for it."""
    from minispec.harness.specbench_peers import llama_cpp_modes

    modes = llama_cpp_modes(tiny_gguf, 4, [2], n_ctx=1024)
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, 64, 600)]
    for run in modes.values():
        got = run(prompt)
        assert 1 <= len(got) <= 4
