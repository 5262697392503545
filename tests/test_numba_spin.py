"""The numba kernel bounds how long OpenMP's waiting threads spin (numba_kernel.SPIN, chosen from the machine's load
and set as GOMP_SPINCOUNT before numba starts its threads), leaves a setting the user made alone, and a child process
chooses again what its parent chose. Checked in fresh processes: the variable is read once, when numba's OpenMP
layer starts."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

from minispec.model import threads

SHOW = ("import os, minispec.model.numba_kernel as k; "
        "print(k.SPIN, os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'), "
        "os.environ.get('MINISPEC_SPIN_CHOSEN_BY_PARENT'))")


def fresh(**env):
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", threads.SPIN_MARK)}
    out = subprocess.run([sys.executable, "-c", SHOW], env=dict(base, **env), capture_output=True, text=True,
                         timeout=120, check=True)
    return out.stdout.split()


def test_the_kernel_sets_its_spin_when_the_user_has_not():
    spin, got, policy, mark = fresh()
    assert got == spin == mark and policy == "None" and int(spin) in (0, threads.QUIET_SPIN)


def test_a_users_setting_is_left_as_it_is():
    assert fresh(GOMP_SPINCOUNT="123") == ["123", "123", "None", "None"]
    assert fresh(OMP_WAIT_POLICY="active")[:3] == ["None", "None", "active"]  # libgomp's wait chosen: no spin set


def test_a_child_chooses_again_what_its_parent_chose():
    spin, got, _, mark = fresh(GOMP_SPINCOUNT="77", MINISPEC_SPIN_CHOSEN_BY_PARENT="77")
    assert got == spin == mark and int(spin) in (0, threads.QUIET_SPIN)
