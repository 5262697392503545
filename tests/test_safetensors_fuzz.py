"""Mutated safetensors files: each one is refused with a ModelFormatError that names the file (and the tensor,
when one tensor's entry is wrong), or it loads exactly what the reference ``safetensors`` package loads.

Mutations: data_offsets, dtypes, shapes, the header-length field, the file's length, the header's JSON
(entries dropped or retyped, ``__metadata__``, raw bytes flipped). Two readers: ``read_safetensors`` (any
dtype) and the model's ``Checkpoint`` (float weights only, every value finite), which ``load_model`` uses.
"""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minispec import ModelConfig, ModelFormatError
from minispec.model.safetensors_io import read_safetensors, write_safetensors
from minispec.model.tiny import tiny_config, write_random_model
from minispec.model.weights import load_weights

from .helpers import join_safetensors, split_safetensors

safetensors_numpy = pytest.importorskip("safetensors.numpy")

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
DTYPE_NAMES = ["F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL", "U16", "F8_E4M3", "f32", "", 4, None]
NUMBERS = st.one_of(st.integers(-300, 300), st.sampled_from([2**63, 2**64 + 8, 1.5, "8", True, None]))


def reference(path):
    """What the safetensors package loads, floats as float32 (BF16, which NumPy lacks, through torch)."""
    header, _ = split_safetensors(path.read_bytes())
    if any(isinstance(v, dict) and v.get("dtype") == "BF16" for v in header.values()):
        import safetensors.torch
        import torch

        loaded = safetensors.torch.load_file(str(path))
        return {k: (v.float() if v.dtype == torch.bfloat16 else v).numpy() for k, v in loaded.items()}
    return safetensors_numpy.load_file(str(path))


@st.composite
def mutations(draw, names):
    """(kind, the tensor it targets or None, a function (header dict, data) -> file bytes)."""
    kind = draw(st.sampled_from(["offsets", "shift", "dtype", "shape", "drop-field", "entry", "metadata",
                                 "header-length", "file-length", "flip-byte"]))
    name = draw(st.sampled_from(names))
    if kind == "offsets":
        value = draw(st.one_of(st.lists(NUMBERS, min_size=0, max_size=3), NUMBERS))
        return kind, name, lambda h, b: join_safetensors({**h, name: {**h[name], "data_offsets": value}}, b)
    if kind == "shift":
        which, delta = draw(st.integers(0, 1)), draw(st.integers(-9, 9))

        def shift(h, b):
            offsets = list(h[name]["data_offsets"])
            offsets[which] += delta
            return join_safetensors({**h, name: {**h[name], "data_offsets": offsets}}, b)
        return kind, name, shift
    if kind == "dtype":
        value = draw(st.sampled_from(DTYPE_NAMES))
        return kind, name, lambda h, b: join_safetensors({**h, name: {**h[name], "dtype": value}}, b)
    if kind == "shape":
        value = draw(st.one_of(st.lists(st.integers(-2, 9), max_size=3), NUMBERS))
        return kind, name, lambda h, b: join_safetensors({**h, name: {**h[name], "shape": value}}, b)
    if kind == "drop-field":
        field = draw(st.sampled_from(["dtype", "shape", "data_offsets"]))
        return kind, name, lambda h, b: join_safetensors(
            {**h, name: {k: v for k, v in h[name].items() if k != field}}, b)
    if kind == "entry":
        value = draw(st.sampled_from([None, [], "x", 3, {}]))
        return kind, name, lambda h, b: join_safetensors({**h, name: value}, b)
    if kind == "metadata":
        value = draw(st.sampled_from([{"a": "b"}, {"a": 1}, [], "x", None, {}]))
        return kind, None, lambda h, b: join_safetensors({**h, "__metadata__": value}, b)
    if kind == "header-length":
        delta = draw(st.sampled_from([-9, -1, 1, 7, 2**40, 2**63]))

        def relength(h, b):
            raw = join_safetensors(h, b)
            n = max(0, int.from_bytes(raw[:8], "little") + delta) % 2**64
            return n.to_bytes(8, "little") + raw[8:]
        return kind, None, relength
    if kind == "file-length":
        delta = draw(st.integers(-40, 40))
        return kind, None, lambda h, b: join_safetensors(h, b[:delta] if delta < 0 else b + b"\0" * delta)
    position, byte = draw(st.integers(0, 10_000)), draw(st.integers(0, 255))

    def flip(h, b):
        raw = bytearray(json.dumps(h).encode())
        raw[position % len(raw)] = byte
        return join_safetensors(bytes(raw), b)
    return kind, None, flip


def check_mutant(path, load, names, kind, target):
    """Refused with a named error, or equal to the reference."""
    try:
        ours = load(path)
    except ModelFormatError as e:
        msg = str(e)
        assert str(path) in msg, msg
        if kind in ("offsets", "dtype", "shape", "drop-field", "entry"):
            assert any(repr(n) in msg for n in names), f"{kind} of {target!r}: no tensor named in {msg!r}"
        return
    ref = reference(path)  # we accepted it, so the reference must accept it too, with the same values
    assert set(ours) <= set(ref)
    for name, arr in ours.items():
        expected = ref[name].astype(np.float32) if ref[name].dtype.kind == "f" else ref[name]
        assert arr.shape == expected.shape and arr.dtype == expected.dtype, name
        assert np.array_equal(arr, expected, equal_nan=True), name


MIXED = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(4, dtype=np.int32),
         "c.bias": np.linspace(-1, 1, 5, dtype=np.float32), "empty": np.zeros((0, 3), np.float32),
         "flags": np.array([True, False, True])}


@pytest.fixture(scope="module")
def mixed_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("fuzz") / "mixed.safetensors"
    write_safetensors(f, MIXED, "F16")
    return f


@FUZZ
@given(data=st.data())
def test_mutated_file_is_refused_or_loads_like_the_reference(mixed_file, tmp_path_factory, data):
    kind, target, mutate = data.draw(mutations(sorted(MIXED)))
    header, body = split_safetensors(mixed_file.read_bytes())
    header.pop("__metadata__", None)
    f = tmp_path_factory.getbasetemp() / "mutant.safetensors"
    f.write_bytes(mutate(header, body))
    check_mutant(f, read_safetensors, list(MIXED), kind, target)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    d = write_random_model(tmp_path_factory.mktemp("fuzz_model") / "m", tiny_config(num_hidden_layers=1))
    return d, ModelConfig.from_dir(d)


@FUZZ
@given(data=st.data())
def test_mutated_model_file_is_refused_or_loads_like_the_reference(model_file, data):
    d, cfg = model_file
    original = (d / "model.safetensors").read_bytes()
    header, body = split_safetensors(original)
    header.pop("__metadata__", None)
    names = sorted(header)
    kind, target, mutate = data.draw(mutations(names))
    f = d / "model.safetensors"
    try:
        f.write_bytes(mutate(header, body))
        check_mutant(f, lambda _: dict(load_weights(d, cfg).items()), names, kind, target)
    finally:
        f.write_bytes(original)


def test_the_unmutated_files_load_like_the_reference(mixed_file, model_file):
    check_mutant(mixed_file, read_safetensors, list(MIXED), "none", None)
    d, cfg = model_file
    check_mutant(d / "model.safetensors", lambda _: dict(load_weights(d, cfg).items()), [], "none", None)


def test_a_header_integer_too_long_to_read_is_refused_by_name(tmp_path):
    """(bug: an integer of more than 4300 digits raised Python's own ValueError, with no file named)"""
    f = tmp_path / "long.safetensors"
    raw = b'{"a": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 8]}}'
    f.write_bytes(join_safetensors(raw, bytes(8)))
    with pytest.raises(ModelFormatError, match="long.safetensors: corrupt safetensors header"):
        read_safetensors(f)
