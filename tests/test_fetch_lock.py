"""Fetching is one process at a time (recipes/fetch.py, ``one_fetch_at_a_time``): two test workers on a fresh machine
would otherwise download and convert SmolLM2 into the same files at once."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minispec.recipes.fetch import one_fetch_at_a_time, resolve_model

pytest.importorskip("fcntl")

CHILD = """
import sys
from minispec.recipes.fetch import one_fetch_at_a_time
print("waiting", flush=True)
with one_fetch_at_a_time():
    print("in", flush=True)
"""


def test_a_second_process_waits_for_the_first_fetch_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("MINISPEC_CACHE", str(tmp_path))
    env = dict(os.environ, MINISPEC_CACHE=str(tmp_path))
    with one_fetch_at_a_time():
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, env=env)
        assert child.stdout.readline().strip() == "waiting"  # the child is at the lock...
        time.sleep(1.0)
        assert child.poll() is None  # ...and still there while this process holds it
    out, _ = child.communicate(timeout=60)
    assert out.strip() == "in" and child.returncode == 0  # let in once it is released
    assert (tmp_path / "fetch.lock").exists()


def test_an_empty_model_path_is_refused_not_taken_for_the_default(tmp_path, monkeypatch):
    """(bug: --model "", say an unset shell variable, fetched and loaded the default model); None is the default."""
    monkeypatch.setenv("MINISPEC_WEIGHTS", str(tmp_path))  # no default model here, and none fetched (auto_fetch=False)
    for empty in ("", " "):
        with pytest.raises(ValueError, match="the model path is empty"):
            resolve_model(empty, auto_fetch=False)
    with pytest.raises(FileNotFoundError, match="default model not found"):
        resolve_model(None, auto_fetch=False)
    assert resolve_model("some/model") == Path("some/model")
