"""The CPU a run is on, as Linux describes it (``/proc/cpuinfo``): its name, its generation and its widest vector
extension. One name ("AMD EPYC") covers generations whose vector units differ twofold (Zen 1 splits a 256-bit
operation in two), so the generation is read too. Measurements record it (``harness/provenance.py``) and the cost
model keys its calibrations by it (``policy/calibration.py``)."""

from __future__ import annotations

import platform


def cpu_fields() -> dict[str, str]:
    """The first CPU's ``key: value`` fields; empty where ``/proc/cpuinfo`` cannot be read (not Linux)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first CPU's fields end at the first blank line
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_name() -> str:
    """The CPU's name, and its family and model where given: "AMD EPYC family 23 model 1"."""
    fields = cpu_fields()
    name = fields.get("model name") or platform.processor() or platform.machine()
    return f"{name} family {fields['cpu family']} model {fields['model']}" if "cpu family" in fields else name


def widest_simd(fields: dict[str, str]) -> str:
    """The widest vector extension among the CPU's flags: avx512f, avx2, avx, sse4_2, or "none listed"."""
    flags = fields.get("flags", "").split()
    return next((f for f in ("avx512f", "avx2", "avx", "sse4_2") if f in flags), "none listed")
