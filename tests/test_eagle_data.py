"""The EAGLE data builder's shards without torch (minispec/recipes/eagle_data.py): the generated windows exported
as token ids and read back for a rebuild, refused under other settings; the kinds' cycle."""

import json

import numpy as np
import pytest

from minispec.recipes import eagle_data


def fake_shards(folder, kinds):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    want = {}
    for i, kind in enumerate(kinds):
        windows = [rng.integers(0, 49152, int(rng.integers(5, 20))) for _ in range(3)]
        starts = np.cumsum([0] + [len(w) for w in windows])
        np.savez(folder / f"shard-{i:05d}.npz", tokens=np.concatenate(windows).astype(np.int32), starts=starts)
        (folder / f"shard-{i:05d}.json").write_text(json.dumps(dict(shard=i, kind=kind, kept=3)))
        if kind != "text":
            want[i] = [w.tolist() for w in windows]
    return want


def test_generated_windows_round_trip_and_other_settings_are_refused(tmp_path):
    want = fake_shards(tmp_path / "data", ["code-greedy", "chat-greedy", "text", "chat-t1"])
    shaping = dict(seed=2, gen_batch=32)
    got = eagle_data.export_generations(tmp_path / "data", tmp_path / "gen.npz", shaping)
    assert got == dict(windows=9, tokens=sum(len(w) for ws in want.values() for w in ws), shards=3)
    assert eagle_data.load_generations(tmp_path / "gen.npz", shaping) == want  # text shards are not exported
    with pytest.raises(ValueError, match="other settings"):
        eagle_data.load_generations(tmp_path / "gen.npz", dict(seed=3, gen_batch=32))


def test_nothing_to_export_is_an_error(tmp_path):
    fake_shards(tmp_path / "data", ["text"])
    with pytest.raises(ValueError, match="no generated shards"):
        eagle_data.export_generations(tmp_path / "data", tmp_path / "gen.npz", {})


def test_every_kind_is_made_and_held_out_shards_meet_every_kind():
    """The trainer holds out every 20th shard (train_eagle_ttt.HELD_OUT); over a few cycles those meet every kind."""
    from minispec.recipes.train_eagle_ttt import HELD_OUT

    kinds = eagle_data.KINDS
    assert {k.split("-")[0] for k in kinds} == {"code", "chat", "text"} and {"code-greedy", "chat-t1"} <= set(kinds)
    held = {kinds[i % len(kinds)] for i in range(HELD_OUT - 1, HELD_OUT * len(kinds), HELD_OUT)}
    assert held == set(kinds)


def test_every_text_shard_reads_its_own_files():
    """Text shards take the standard library's files in turns: no two text shards read the same files (bug: the two
    text shards of a cycle read the same ones)."""
    idx = [eagle_data.text_index(i) for i in range(5 * len(eagle_data.KINDS)) if eagle_data.KINDS[i % len(eagle_data.KINDS)] == "text"]
    assert idx == list(range(len(idx)))
