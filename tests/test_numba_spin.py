"""The numba kernel bounds how long OpenMP's waiting threads spin (numba_kernel.SPIN, set as GOMP_SPINCOUNT before
numba starts its threads), and leaves a setting the user made alone. Checked in fresh processes: the variable is
read once, when numba's OpenMP layer starts."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

SHOW = ("import os, minispec.model.numba_kernel as k; "
        "print(k.SPIN, os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))")


def fresh(**env):
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", SHOW], env=dict(base, **env), capture_output=True, text=True,
                         timeout=120, check=True)
    return out.stdout.split()


def test_the_kernel_sets_its_spin_when_the_user_has_not():
    spin, got, policy = fresh()
    assert got == spin and policy == "None"


def test_a_users_setting_is_left_as_it_is():
    assert fresh(GOMP_SPINCOUNT="123")[1] == "123"
    assert fresh(OMP_WAIT_POLICY="active")[1:] == ["None", "active"]  # the user chose libgomp's wait: no spin set
