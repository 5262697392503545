"""Untrusted input, table-driven: every bad file or argument is refused before any work or output, with an
error (ModelFormatError for files, ValueError or TypeError for arguments; ``error: ...`` and exit code 2 from
the CLI) that names the file, argument or tensor and what was expected. No raw traceback, no silent wrong
result, no hang. Then the cases that must *work*: requests that end at the context limit, and drafts with a
shorter context than the target.
"""

import json
import shutil

import numpy as np
import pytest

from minispec import (
    DraftModel,
    LayerSkip,
    ModelFormatError,
    PromptLookup,
    generate,
    load_model,
    load_tokenizer,
    make_drafter,
    speculative_generate,
    tree_speculative_generate,
)
from minispec.model.tiny import tiny_config, write_random_model

from .helpers import chat_model_dir, edit_config, edit_header, join_safetensors, run_cli, split_safetensors

# --- bad model files: (name, how to spoil a fresh tiny model directory, what the error must mention)


def norm_offsets(d):
    edit_header(d / "model.safetensors", lambda h: h["model.norm.weight"].update(data_offsets=[-100, 28]))


def offsets_off_by(delta):
    def spoil(d):
        def edit(h):
            begin, end = h["model.norm.weight"]["data_offsets"]
            h["model.norm.weight"]["data_offsets"] = [begin, end + delta]
        edit_header(d / "model.safetensors", edit)
    return spoil


def relabel_as_i32(d):
    edit_header(d / "model.safetensors", lambda h: h["model.norm.weight"].update(dtype="I32"))


def drop_offsets(d):
    edit_header(d / "model.safetensors", lambda h: h["model.norm.weight"].pop("data_offsets"))


def nan_weight(d):
    from minispec.model.safetensors_io import read_safetensors, write_safetensors

    t = read_safetensors(d / "model.safetensors")
    t["model.layers.1.mlp.down_proj.weight"][3, 4] = np.nan
    write_safetensors(d / "model.safetensors", t)


def huge_header(d):
    f = d / "model.safetensors"
    f.write_bytes((200_000_000).to_bytes(8, "little") + f.read_bytes()[8:])


def trailing_bytes(d):
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes() + b"\0" * 16)


def weights_dir(d):
    (d / "model.safetensors").unlink()
    (d / "model.safetensors").mkdir()


def index_without_weight_map(d):
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))


def as_int8(d):
    """The model's matrices stored as int8 with a scale per row (safetensors_io's format)."""
    from minispec.model.safetensors_io import read_safetensors, write_safetensors

    t = read_safetensors(d / "model.safetensors")
    write_safetensors(d / "model.safetensors", t, int8=[n for n, a in t.items() if a.ndim == 2])


UP = "model.layers.0.mlp.up_proj.weight"


def int8_then(edit):
    """Store the model as int8, then ``edit(header, body)`` the file's header and data section, in place."""
    def spoil(d):
        as_int8(d)
        header, body = split_safetensors((d / "model.safetensors").read_bytes())
        body = bytearray(body)
        edit(header, body)
        (d / "model.safetensors").write_bytes(join_safetensors(header, bytes(body)))
    return spoil


def scale_value(x):
    def edit(header, body):
        begin = header[UP + "_scale"]["data_offsets"][0]
        body[begin + 4 * 5: begin + 4 * 6] = np.float32(x).tobytes()  # row 5's scale
    return edit


def int8_without_scale(d):
    from minispec.model.safetensors_io import read_safetensors, write_safetensors

    t = read_safetensors(d / "model.safetensors")
    t[UP] = np.zeros(t[UP].shape, np.int8)  # an int8 matrix, written with no scale
    write_safetensors(d / "model.safetensors", t)


def int8_vector(d):
    from minispec.model.safetensors_io import read_safetensors, write_safetensors

    t = read_safetensors(d / "model.safetensors")
    t["model.norm.weight"] = np.ones(t["model.norm.weight"].shape, np.int8)
    write_safetensors(d / "model.safetensors", t)


def bad_index_json(d):
    (d / "model.safetensors.index.json").write_text("{not json")


def config_text(text):
    return lambda d: (d / "config.json").write_text(text)


def config(**changes):
    return lambda d: edit_config(d, **changes)


FILE_CASES = [
    ("offsets [-100, 28]", norm_offsets, ["model.safetensors", "'model.norm.weight'", "data_offsets"]),
    ("offsets 1 byte long", offsets_off_by(1), ["model.safetensors", "'model.norm.weight'", "expected 128"]),
    ("offsets 4 bytes short", offsets_off_by(-4), ["model.safetensors", "'model.norm.weight'", "expected 128"]),
    ("F32 data labelled I32", relabel_as_i32, ["model.safetensors", "'model.norm.weight'", "I32", "float"]),
    ("no data_offsets", drop_offsets, ["model.safetensors", "'model.norm.weight'", "data_offsets"]),
    ("NaN weight", nan_weight, ["model.safetensors", "'model.layers.1.mlp.down_proj.weight'", "finite"]),
    ("header over 100 MB", huge_header, ["model.safetensors", "limit"]),
    ("bytes after the data", trailing_bytes, ["model.safetensors", "after the data"]),
    ("model.safetensors is a directory", weights_dir, ["model.safetensors", "not a file"]),
    ("index without weight_map", index_without_weight_map, ["model.safetensors.index.json", "weight_map"]),
    ("index not JSON", bad_index_json, ["model.safetensors.index.json", "not valid JSON"]),
    ("I8 without its scale", int8_without_scale, ["model.safetensors", f"'{UP}'", f"'{UP}_scale'"]),
    ("I8 vector", int8_vector, ["model.safetensors", "'model.norm.weight'", "2-D"]),
    ("I8 scale of another shape", int8_then(lambda h, b: h[UP + "_scale"].update(shape=[h[UP]["shape"][0] // 2, 2])),
     ["model.safetensors", f"'{UP}_scale'", "shape"]),
    ("I8 scale labelled I32", int8_then(lambda h, b: h[UP + "_scale"].update(dtype="I32")),
     ["model.safetensors", f"'{UP}_scale'", "I32", "float"]),
    ("a scale with no I8 matrix", int8_then(lambda h, b: h[UP].update(dtype="U8")),
     ["model.safetensors", f"'{UP}_scale'", "no I8 tensor"]),
    ("negative scale", int8_then(scale_value(-0.5)), ["model.safetensors", f"'{UP}_scale'", "row 5", "negative"]),
    ("NaN scale", int8_then(scale_value(np.nan)), ["model.safetensors", f"'{UP}_scale'", "row 5", "finite"]),
    ("infinite scale", int8_then(scale_value(np.inf)), ["model.safetensors", f"'{UP}_scale'", "row 5", "finite"]),
    ("config.json not JSON", config_text("{oops"), ["config.json", "not valid JSON"]),
    ("config.json a list", config_text("[1, 2]"), ["config.json", "JSON object"]),
    ("config.json not UTF-8", lambda d: (d / "config.json").write_bytes(b"\xff\xfe{}"), ["config.json", "not valid JSON"]),
    ("rope_scaling a list", config(rope_scaling=[1, 2]), ["config.json", "rope_scaling", "plain RoPE"]),
    ("rope_scaling without a type", config(rope_scaling={"factor": 4.0}), ["config.json", "rope_scaling", "plain RoPE"]),
    ("rope_scaling linear", config(rope_scaling={"type": "linear", "factor": 2.0}), ["config.json", "rope_scaling"]),
    ("num_attention_heads 0", config(num_attention_heads=0), ["config.json", "num_attention_heads", "positive integer"]),
    ("num_key_value_heads -2", config(num_key_value_heads=-2), ["config.json", "num_key_value_heads"]),
    ("hidden_size 'abc'", config(hidden_size="abc"), ["config.json", "hidden_size", "positive integer"]),
    ("vocab_size 64.5", config(vocab_size=64.5), ["config.json", "vocab_size", "positive integer"]),
    ("vocab_size missing", config(vocab_size=...), ["config.json", "vocab_size", "missing"]),
    ("architectures a string", config(architectures="LlamaForCausalLM"), ["config.json", "architectures", "list"]),
    ("architectures empty", config(architectures=[]), ["config.json", "architectures"]),
    ("rms_norm_eps -1", config(rms_norm_eps=-1.0), ["config.json", "rms_norm_eps", "positive number"]),
    ("rope_theta 'big'", config(rope_theta="big"), ["config.json", "rope_theta"]),
    ("tie_word_embeddings 'yes'", config(tie_word_embeddings="yes"), ["config.json", "tie_word_embeddings"]),
    ("eos_token_id 'x'", config(eos_token_id="x"), ["config.json", "eos_token_id"]),
    ("mlp_bias true", config(mlp_bias=True), ["config.json", "mlp_bias"]),
    ("hidden_act gelu", config(hidden_act="gelu"), ["config.json", "hidden_act"]),
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return write_random_model(tmp_path_factory.mktemp("pristine") / "m")


@pytest.mark.parametrize("name, spoil, expected", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_bad_model_file_is_refused_by_name(pristine, tmp_path, name, spoil, expected):
    d = shutil.copytree(pristine, tmp_path / "m")
    spoil(d)
    with pytest.raises(ModelFormatError) as e:
        load_model(d)
    for part in expected:
        assert part in str(e.value), f"{name}: {part!r} not in {str(e.value)!r}"


TOKENIZER_CASES = [
    ("empty tokenizer.json", "tokenizer.json", "", ["tokenizer.json", "not valid JSON"]),
    ("tokenizer.json {}", "tokenizer.json", "{}", ["tokenizer.json", "model"]),
    ("tokenizer.json unreadable model", "tokenizer.json", '{"model": {"type": "nonsense"}}', ["tokenizer.json", "cannot read"]),
    ("tokenizer_config.json not JSON", "tokenizer_config.json", "{", ["tokenizer_config.json", "not valid JSON"]),
    ("generation_config.json a list", "generation_config.json", "[]", ["generation_config.json", "JSON object"]),
    ("generation_config.json eos 'x'", "generation_config.json", '{"eos_token_id": "x"}', ["generation_config.json", "eos_token_id"]),
]


@pytest.mark.parametrize("name, file, text, expected", TOKENIZER_CASES, ids=[c[0] for c in TOKENIZER_CASES])
def test_bad_tokenizer_file_is_refused_by_name(tmp_path, name, file, text, expected):
    d = chat_model_dir(tmp_path / "m")
    (d / file).write_text(text)
    with pytest.raises(ModelFormatError) as e:
        load_tokenizer(d)
    for part in expected:
        assert part in str(e.value), f"{name}: {part!r} not in {str(e.value)!r}"


# --- bad API arguments: (name, call(target, draft) -> anything, the exception type, what the message must mention)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("api")
    target = load_model(write_random_model(d / "t", tiny_config(num_hidden_layers=2), seed=1))
    draft = load_model(write_random_model(d / "d", tiny_config(num_hidden_layers=1), seed=2))
    small_vocab = load_model(write_random_model(d / "s", tiny_config(num_hidden_layers=1, vocab_size=48), seed=3))
    return target, draft, small_vocab


def spec(t, drafter, **kw):
    return speculative_generate(t, drafter, [1, 2, 3], 8, **kw)


def tree(t, drafter, **kw):
    return tree_speculative_generate(t, drafter, [1, 2, 3], 8, **kw)


API_CASES = [
    ("seed 'abc' greedy", lambda t, d, s: generate(t, [1, 2], 4, seed="abc"), ValueError, ["seed", "'abc'"]),
    ("seed -1", lambda t, d, s: spec(t, PromptLookup(), seed=-1), ValueError, ["seed", "non-negative"]),
    ("seed 1.5", lambda t, d, s: tree(t, d, seed=1.5), ValueError, ["seed"]),
    ("temperature '0.8'", lambda t, d, s: generate(t, [1], 4, temperature="0.8"), ValueError, ["temperature", "'0.8'"]),
    ("temperature nan", lambda t, d, s: spec(t, d, temperature=float("nan")), ValueError, ["temperature"]),
    ("temperature inf", lambda t, d, s: spec(t, d, temperature=float("inf")), ValueError, ["temperature", "finite"]),
    ("temperature True", lambda t, d, s: generate(t, [1], 4, temperature=True), ValueError, ["temperature"]),
    ("top_k 2.5", lambda t, d, s: generate(t, [1], 4, top_k=2.5), ValueError, ["top_k"]),
    ("top_p '0.5'", lambda t, d, s: generate(t, [1], 4, top_p="0.5"), ValueError, ["top_p"]),
    ("max_new_tokens '5'", lambda t, d, s: generate(t, [1], "5"), ValueError, ["max_new_tokens"]),
    ("max_new_tokens 2.0", lambda t, d, s: speculative_generate(t, d, [1], 2.0), ValueError, ["max_new_tokens"]),
    ("stop_ids 5", lambda t, d, s: generate(t, [1], 4, stop_ids=5), TypeError, ["stop_ids", "list"]),
    ("stop_ids 'ab'", lambda t, d, s: spec(t, d, stop_ids="ab"), TypeError, ["stop_ids", "list"]),
    ("stop_ids [999, -5]", lambda t, d, s: tree(t, d, stop_ids=[999, -5]), ValueError, ["stop_ids", "999", "0..63"]),
    ("stop_ids [-5]", lambda t, d, s: generate(t, [1], 4, stop_ids=[-5]), ValueError, ["stop_ids", "-5"]),
    ("prompt 'abc'", lambda t, d, s: generate(t, "abc", 4), ValueError, ["token_ids"]),
    ("prompt []", lambda t, d, s: speculative_generate(t, d, [], 4), ValueError, ["token_ids", "non-empty"]),
    ("prompt [1.5]", lambda t, d, s: generate(t, [1.5], 4), ValueError, ["token_ids", "integers"]),
    ("prompt [64]", lambda t, d, s: tree_speculative_generate(t, d, [64], 4), ValueError, ["token id 64", "64"]),
    ("on_token 5", lambda t, d, s: spec(t, d, on_token=5), TypeError, ["on_token"]),
    ("k 'fast'", lambda t, d, s: spec(t, d, k="fast"), ValueError, ["k must be", "'fast'"]),
    ("k -1", lambda t, d, s: spec(t, d, k=-1), ValueError, ["k must be"]),
    ("k 2.5", lambda t, d, s: spec(t, d, k=2.5), ValueError, ["k must be", "2.5"]),
    ("k None", lambda t, d, s: spec(t, d, k=None), ValueError, ["k must be"]),
    ("tree 'fast'", lambda t, d, s: tree(t, d, shape="fast"), ValueError, ["tree shape", "'fast'"]),
    ("tree (2,)", lambda t, d, s: tree(t, d, shape=(2,)), ValueError, ["tree shape", "(2,)"]),
    ("tree None", lambda t, d, s: tree(t, d, shape=None), ValueError, ["tree shape", "None"]),
    ("tree (-1, 2), draft", lambda t, d, s: tree(t, d, shape=(-1, 2)), ValueError, ["tree width", "-1"]),
    ("tree (-1, 2), lookup", lambda t, d, s: tree(t, PromptLookup(), shape=(-1, 2)), ValueError, ["tree width", "-1"]),
    ("tree (2, -3)", lambda t, d, s: tree(t, d, shape=(2, -3)), ValueError, ["tree depth", "-3"]),
    ("tree (2.0, 3)", lambda t, d, s: tree(t, d, shape=(2.0, 3)), ValueError, ["tree width", "2.0"]),
    ("drafter object()", lambda t, d, s: spec(t, object()), TypeError, ["drafter"]),
    ("drafter smaller vocab", lambda t, d, s: spec(t, s), ValueError, ["draft vocabulary (48)", "64"]),
    ("PromptLookup vocab 10", lambda t, d, s: spec(t, PromptLookup(vocab_size=10)), ValueError, ["vocabulary size 10", "64"]),
    ("PromptLookup ngram '3'", lambda t, d, s: PromptLookup("3"), ValueError, ["min_ngram <= max_ngram"]),
    ("PromptLookup ngram True", lambda t, d, s: PromptLookup(True), ValueError, ["min_ngram <= max_ngram"]),
    ("PromptLookup ngram 2.0", lambda t, d, s: PromptLookup(2.0), ValueError, ["min_ngram <= max_ngram"]),
    ("DraftModel(None)", lambda t, d, s: DraftModel(None), TypeError, ["DraftModel", "Model"]),
    ("LayerSkip 0 layers", lambda t, d, s: LayerSkip(t, 0), ValueError, ["layers", "1..2", "0"]),
    ("LayerSkip 5 layers", lambda t, d, s: LayerSkip(t, 5), ValueError, ["layers", "1..2", "5"]),
    ("layers with prompt lookup", lambda t, d, s: make_drafter("prompt-lookup", t, 1), ValueError, ["layers", "layer-skip"]),
    ("drafter spec 3", lambda t, d, s: make_drafter(3, t), TypeError, ["drafter spec"]),
    ("drafter spec nonsense", lambda t, d, s: make_drafter("fastest", t), ValueError, ["'fastest'", "prompt-lookup"]),
    ("drafter spec ''", lambda t, d, s: make_drafter("", t), ValueError, ["drafter spec is empty"]),  # not the cwd
    ("past the context", lambda t, d, s: speculative_generate(t, d, [1], 256), ValueError, ["exceeds", "256"]),
]


@pytest.mark.parametrize("name, call, error, expected", API_CASES, ids=[c[0] for c in API_CASES])
def test_bad_argument_is_refused_by_name(models, name, call, error, expected):
    with pytest.raises(error) as e:
        call(*models)
    for part in expected:
        assert part in str(e.value), f"{name}: {part!r} not in {str(e.value)!r}"


def test_draft_directory_without_tokenizer_is_refused(tmp_path):
    target_dir = chat_model_dir(tmp_path / "t")
    draft_dir = write_random_model(tmp_path / "d", tiny_config(vocab_size=49152, num_hidden_layers=1))
    with pytest.raises(ModelFormatError, match="no tokenizer.json; the draft needs one"):
        make_drafter(str(draft_dir), load_model(target_dir))


# --- the CLI: (name, argv with {model}, {draft}, {file} and {dir} filled in, what stderr must mention)

CLI_CASES = [
    ("--max-new-tokens 0", ["generate", "--model", "{model}", "--prompt", "a", "--max-new-tokens", "0"], ["--max-new-tokens", ">= 1"]),
    ("--max-new-tokens 0 --tree", ["generate", "--model", "{model}", "--prompt", "a", "--max-new-tokens", "0", "--tree", "2x2"],
     ["--max-new-tokens", ">= 1"]),
    ("--seed -1", ["generate", "--model", "{model}", "--prompt", "a", "--seed", "-1"], ["--seed", ">= 0", "'-1'"]),
    ("--layers 0", ["generate", "--model", "{model}", "--prompt", "a", "--draft", "layer-skip", "--layers", "0"], ["--layers", ">= 1"]),
    ("--layers 9", ["generate", "--model", "{model}", "--prompt", "a", "--draft", "layer-skip", "--layers", "9"], ["layers", "1..2"]),
    ("--layers without layer-skip", ["generate", "--model", "{model}", "--prompt", "a", "--layers", "1"], ["--layers", "layer-skip"]),
    ("--k -1", ["generate", "--model", "{model}", "--prompt", "a", "--k", "-1"], ["--k", "non-negative"]),
    ("--tree fast", ["generate", "--model", "{model}", "--prompt", "a", "--tree", "fast"], ["--tree", "WIDTHxDEPTH"]),
    ("--tree 0x3", ["generate", "--model", "{model}", "--prompt", "a", "--tree", "0x3"], ["--tree", ">= 1"]),
    ("--tree dynamic:0x3x4", ["generate", "--model", "{model}", "--prompt", "a", "--tree", "dynamic:0x3x4"],
     ["--tree", "top_k must be a positive integer"]),
    ("--tree dynamic without a head", ["generate", "--model", "{model}", "--prompt", "a", "--tree", "dynamic",
                                       "--draft", "prompt-lookup"], ["does not grow dynamic trees", "WIDTHxDEPTH"]),
    ("--temperature -1", ["generate", "--model", "{model}", "--prompt", "a", "--temperature", "-1"], ["temperature", ">= 0"]),
    ("--top-p 2", ["generate", "--model", "{model}", "--prompt", "a", "--top-p", "2"], ["top_p", "(0, 1]"]),
    ("--top-k 0", ["generate", "--model", "{model}", "--prompt", "a", "--top-k", "0"], ["top_k", "positive"]),
    ("past the context", ["generate", "--model", "{model}", "--prompt", "a b c", "--max-new-tokens", "300"], ["exceeds", "256"]),
    ("--prompt empty", ["generate", "--model", "{dir}/nope", "--prompt", ""], ["--prompt is empty"]),  # before the model
    # the processors' values: refused before the model loads ({dir}/nope is no model)
    ("--repetition-penalty 0", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--repetition-penalty", "0"],
     ["repetition penalty must be > 0", "got 0.0"]),
    ("--frequency-penalty nan", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--frequency-penalty", "nan"],
     ["frequency penalty must be a finite number", "nan"]),
    ("--no-repeat-ngram 0", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--no-repeat-ngram", "0"],
     ["no-repeat n-gram size", ">= 1"]),
    ("--min-new-tokens -2", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--min-new-tokens", "-2"],
     ["minimum new tokens", ">= 0"]),
    ("--choices with an empty one", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--choices", "yes||no"],
     ["a choice is empty", "yes||no"]),
    ("--choices --no-stop", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--choices", "yes", "--no-stop"],
     ["--choices", "drop --no-stop"]),
    ("--choices too long", ["generate", "--model", "{model}", "--prompt", "a", "--choices", "one two three|four five six",
                            "--max-new-tokens", "2"], ["no choice fits in max_new_tokens = 2"]),
    # pure argument checks, refused before the model loads ({dir}/nope is no model; bug: they came after the load)
    ("--trace into a missing folder", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--trace", "{dir}/no/t.json"],
     ["trace file", "does not exist"]),
    ("--trace a directory", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--trace", "{dir}/adir.json"],
     ["trace file", "is a directory"]),
    ("--show --draft none", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--show", "--draft", "none"],
     ["--show and --trace", "not --draft none"]),
    ("--tree --rule block", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--tree", "2x2", "--rule", "block"],
     ["--rule block applies to chains"]),
    ("--draft empty", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--draft", ""], ["--draft is empty"]),
    ("--tree dynamic with 4 numbers", ["generate", "--model", "{dir}/nope", "--prompt", "a", "--tree", "dynamic:4x5x16x9"],
     ["--tree", "three numbers, got 4"]),
    ("check --runs 1", ["check", "--model", "{dir}/nope", "--runs", "1"], ["--runs 1", "at least 2"]),
    ("check --json into a missing folder", ["check", "--model", "{dir}/nope", "--json", "{dir}/no/x.json"],
     ["--json", "does not exist"]),
    ("check --repetition-penalty -1", ["check", "--model", "{dir}/nope", "--repetition-penalty", "-1"],
     ["repetition penalty must be > 0"]),
    ("check --tree without a head", ["check", "--model", "{model}", "--draft", "layer-skip", "--tree", "--quick"],
     ["--tree", "layer-skip", "does not grow dynamic trees"]),
    ("--model missing", ["generate", "--model", "{dir}/nope", "--prompt", "a"], ["nope", "not a directory"]),
    ("--model config a list", ["generate", "--model", "{listconfig}", "--prompt", "a"], ["config.json", "JSON object"]),
    ("--model empty tokenizer", ["generate", "--model", "{emptytok}", "--prompt", "a"], ["tokenizer.json", "not valid JSON"]),
    ("--draft without tokenizer", ["generate", "--model", "{model}", "--prompt", "a", "--draft", "{draft}"],
     ["no tokenizer.json", "the draft needs one"]),
    ("--draft nonsense", ["generate", "--model", "{model}", "--prompt", "a", "--draft", "fastest"], ["'fastest'", "not a model directory"]),
    ("convert into a file", ["convert", "{file}", "{file}"], ["output directory", "not a directory"]),
    ("convert a missing file", ["convert", "{dir}/none.gguf", "{dir}/out"], ["none.gguf", "no such file"]),
]


@pytest.fixture(scope="module")
def cli_paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    model = chat_model_dir(d / "model")
    listconfig = shutil.copytree(model, d / "listconfig")
    (listconfig / "config.json").write_text("[]")
    emptytok = shutil.copytree(model, d / "emptytok")
    (emptytok / "tokenizer.json").write_text("")
    draft = write_random_model(d / "draft", tiny_config(vocab_size=49152, num_hidden_layers=1, tie_word_embeddings=True))
    (d / "afile").write_text("not a gguf")
    (d / "adir.json").mkdir()
    return dict(model=model, listconfig=listconfig, emptytok=emptytok, draft=draft, file=d / "afile", dir=d)


@pytest.mark.parametrize("name, argv, expected", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_refuses_bad_input_by_name_before_any_output(cli_paths, name, argv, expected):
    code, out, err = run_cli([a.format(**cli_paths) for a in argv])
    assert code == 2, (code, err)
    assert "Traceback" not in err and "error" in err, err
    assert out == "", f"{name}: output before the error: {out!r}"
    for part in expected:
        assert part in err, f"{name}: {part!r} not in {err!r}"


def test_no_stop_wins_over_chat(cli_paths, monkeypatch):
    import minispec.cli

    seen = {}

    def fake_generate(model, prompt_ids, n, **kw):
        seen.update(kw)
        return [5] * n

    monkeypatch.setattr(minispec.cli, "generate", fake_generate)
    code, _, err = run_cli(["generate", "--model", str(cli_paths["model"]), "--prompt", "hi", "--chat", "--no-stop",
                            "--draft", "none", "--max-new-tokens", "3"])
    assert code == 0, err
    assert seen["stop_ids"] == []


def test_cli_seed_repeats_with_auto_k(cli_paths):
    argv = ["generate", "--model", str(cli_paths["model"]), "--prompt", "a b a b a b", "--max-new-tokens", "12",
            "--temperature", "1.0", "--seed", "3", "--no-compare"]
    assert run_cli(argv)[1] == run_cli(argv)[1]


# --- requests near the context limit must work


@pytest.fixture(scope="module")
def short_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("short")
    t64 = load_model(write_random_model(d / "t64", tiny_config(max_position_embeddings=64), seed=1))
    d64 = load_model(write_random_model(d / "d64", tiny_config(max_position_embeddings=64, num_hidden_layers=1), seed=2))
    t32 = load_model(write_random_model(d / "t32", tiny_config(max_position_embeddings=32), seed=1))
    return t64, d64, t32


@pytest.mark.parametrize("shape", ["auto", (2, 4)])
@pytest.mark.parametrize("which", ["draft", "lookup"])
def test_tree_request_ending_at_the_context_limit_works(short_models, shape, which):
    t64, d64, _ = short_models
    prompt = [3, 4, 5, 3, 4, 5, 3, 4]
    drafter = d64 if which == "draft" else PromptLookup()
    res = tree_speculative_generate(t64, drafter, prompt, 64 - len(prompt), shape=shape, seed=0)
    assert res.tokens == generate(t64, prompt, 64 - len(prompt))


@pytest.mark.parametrize("which", ["draft", "lookup"])
def test_auto_k_on_a_32_position_model(short_models, which):
    _, _, t32 = short_models
    drafter = LayerSkip(t32, 1) if which == "draft" else PromptLookup()
    prompt = [3, 4, 5, 3]
    assert speculative_generate(t32, drafter, prompt, 28, k="auto").tokens == generate(t32, prompt, 28)
    assert tree_speculative_generate(t32, drafter, prompt, 28, shape="auto").tokens == generate(t32, prompt, 28)


@pytest.mark.parametrize("which", ["draft", "lookup"])
def test_tree_4x64_at_128_tokens(models, which):
    target, draft, _ = models
    prompt = [3, 4, 5, 3, 4, 5]
    drafter = draft if which == "draft" else PromptLookup()
    res = tree_speculative_generate(target, drafter, prompt, 128, shape=(4, 64))
    assert res.tokens == generate(target, prompt, 128)


def test_cli_tree_4x64_at_the_default_128_tokens(cli_paths):
    code, out, err = run_cli(["generate", "--model", str(cli_paths["model"]), "--prompt", "a b a b", "--tree", "4x64",
                              "--no-compare", "--no-stop"])
    assert code == 0 and "128 tokens" in err, err


# --- a draft with a shorter context than the target: plain rounds once it is full (item 4)


@pytest.mark.parametrize("how", [dict(k=4), dict(k="auto"), dict(shape=(2, 3)), dict(shape="auto")])
def test_draft_with_a_shorter_context_falls_back_to_plain_rounds(models, tmp_path, how):
    target, _, _ = models
    short = load_model(write_random_model(tmp_path / "d", tiny_config(num_hidden_layers=1, max_position_embeddings=32), seed=2))
    prompt, n = [3, 4, 5, 6], 60
    loop = tree_speculative_generate if "shape" in how else speculative_generate
    streamed = []
    res = loop(target, short, prompt, n, on_token=streamed.append, **how)
    assert res.tokens == streamed == generate(target, prompt, n)  # greedy: the target's own tokens, all of them
    sampled = loop(target, short, prompt, n, temperature=0.8, seed=1, **how)
    assert len(sampled.tokens) == n


def test_stop_ids_as_a_numpy_array_or_a_tuple_work(models):
    target, draft, _ = models
    for stop in (np.array([1, 2]), (1, 2), []):
        plain = generate(target, [3, 4], 6, stop_ids=stop)
        assert speculative_generate(target, draft, [3, 4], 6, stop_ids=stop).tokens == plain
