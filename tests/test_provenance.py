"""What a stored measurement records of its run (harness/provenance.py): a command a reader can type again, and the
commit of minispec's own checkout only."""

import shlex
import subprocess
from pathlib import Path

from minispec.harness.provenance import command, commit

ROOT = Path(__file__).resolve().parents[1]


def test_a_recorded_command_types_back_as_the_arguments_it_ran_with():
    """(bug: the arguments were joined with spaces, so a prompt with a space or a ';' read back as other arguments)"""
    argv = ["/x/bin/minispec", "generate", "--prompt", "Write a haiku; rm -rf x", "--out", "my dir/a.json", "--k", "4"]
    line = command(argv)
    assert line.startswith("minispec generate ") and shlex.split(line)[1:] == argv[1:]
    module = command(["/src/minispec/recipes/train_draft.py", "--out", "a b"])
    assert shlex.split(module) == ["python", "-m", "minispec.recipes.train_draft", "--out", "a b"]
    assert command(["minispec", "bench", "forward", "--kernel", "numba"]) == "minispec bench forward --kernel numba"


def test_the_commit_is_minispecs_own_checkouts_or_none(tmp_path):
    """(bug: a minispec installed in another repository's .venv recorded that repository's commit)"""
    other = tmp_path / "project"
    site = other / ".venv" / "lib" / "site-packages"
    (site / "minispec").mkdir(parents=True)
    (site / "minispec" / "__init__.py").write_text("")
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@b", "-C", str(other)]
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    (other / "notes.txt").write_text("the user's project\n")
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "theirs"], check=True)
    assert commit(site) is None
    ours = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if ours.returncode == 0:  # a checkout (CI's is a clone): its commit, with or without local changes
        assert commit(ROOT).split("+")[0] == ours.stdout.strip()
