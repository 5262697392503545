#!/usr/bin/env bash
# The GPU check, in one go (at most 8 minutes): see docs/gpu/README.md.
#
#   bash scripts/gpu_check.sh            # from the repository root; writes $OUT (default ./gpu-out)
#
# 1. the device-discipline test (CPU, strict stand-in for CuPy)        tests/test_device_discipline.py
# 2. the CUDA tests (skipped, with the reason, without CuPy or a GPU)   python -m pytest -m cuda tests/test_cuda.py
# 3. on a GPU: bench forward, bench decode and a small study with --device cuda, on random weights of
#    SmolLM2-135M's shape; then bench gpu-predict: t(n), r(n), the decode step, c, the launch overhead and
#    the speedups PREDICTED from the CPU study's acceptances (docs/study/study.json)
# 4. gpu_report.json and gpu_report.md in $OUT, with every step's log and exit status
#
# Nothing is downloaded: the project runs from the checkout (PYTHONPATH=.) over the image's packages.
# Without a GPU it runs steps 1 and 2 (2 skips cleanly), a smoke run of gpu-predict on the CPU (a small model,
# labelled DRY RUN), says "no GPU" and exits 0 (1 if the dry run failed). With a GPU it exits 1 if any step failed,
# timed out or was skipped for want of time. The random target takes SmolLM2's tokenizer from the converted target
# (weights/smollm2-135m-instruct/tokenizer.json, 3.5 MB: bring it with the checkout; it is git-ignored).
# GPU_CHECK_SECONDS (default 470) bounds the whole run; GPU_CHECK_SMOKE=1 times a small target, not SmolLM2's shape.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" MINISPEC_NO_CALIBRATION_CACHE=1
PY="${PYTHON:-python}"
DEADLINE=$((SECONDS + ${GPU_CHECK_SECONDS:-470}))
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
: >"$OUT/steps.txt"
rm -f "$OUT/gpu_report.json" "$OUT/gpu_report.md"  # (bug: a report left by an earlier run passed for this one's)
FAILED=0

# step NAME CAP_SECONDS RESERVE_SECONDS CMD...: run CMD under a timeout of min(CAP, time left - RESERVE),
# its output to $OUT/NAME.log (and the terminal's tail), its status to steps.txt
step() {
  local name=$1 cap=$2 reserve=$3
  shift 3
  local left=$((DEADLINE - SECONDS - reserve))
  ((left < cap)) && cap=$left
  if ((cap < 10)); then
    echo "$name: SKIPPED (out of time)" | tee -a "$OUT/steps.txt"
    FAILED=1  # (bug: a run whose steps were all skipped exited 0)
    return
  fi
  echo "== $name (at most ${cap}s): $*"
  timeout "$cap" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 6 "$OUT/$name.log" | sed 's/^/   /'
  local what="ok"
  if ((rc == 5)) && [[ -z "$GPU" ]]; then  # pytest: no test ran (the CUDA tests skip without a GPU)
    what="skipped (no GPU)"
    rc=0
  fi
  ((rc == 124)) && what="TIMED OUT after ${cap}s"
  ((rc != 0 && rc != 124)) && what="FAILED (exit $rc)"
  ((rc != 0)) && FAILED=1
  echo "$name: $what" | tee -a "$OUT/steps.txt"
}

echo "minispec GPU check: $("$PY" -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)')"
"$PY" -c "import minispec" || { echo "cannot import minispec from $PWD"; exit 1; }
GPU="$("$PY" - <<'EOF' 2>/dev/null
try:
    import cupy
    n = cupy.cuda.runtime.getDeviceCount()
    print(f"{n} GPU(s), CuPy {cupy.__version__}" if n else "")
except Exception:
    print("")
EOF
)"
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -rs)

step discipline 60 300 "${PYTEST[@]}" tests/test_device_discipline.py
step cuda_tests 240 150 "${PYTEST[@]}" -m cuda tests/test_cuda.py

ATTACH=(--attach "steps=$OUT/steps.txt" --attach "device discipline (CPU)=$OUT/discipline.log"
        --attach "pytest -m cuda=$OUT/cuda_tests.log")
if [[ -n "$GPU" ]]; then
  echo "GPU: $GPU"
  SMOKE=()  # GPU_CHECK_SMOKE=1: a small target instead of SmolLM2's shape, to try the script out quickly
  [[ "${GPU_CHECK_SMOKE:-0}" == 1 ]] && SMOKE=(--smoke)
  step write_target 60 120 "$PY" -c "from minispec.harness.gpu import random_target; random_target('$WORK/smollm2-shape', smoke=${#SMOKE[@]} > 0)"
  T="$WORK/smollm2-shape"
  step bench_forward 45 120 "$PY" -m minispec bench forward --device cuda --model "$T" --ns 1,2,4,8,16 --json
  step bench_decode 60 110 "$PY" -m minispec bench decode --device cuda --model "$T" --max-new-tokens 64 --repeats 3
  step study 90 100 "$PY" -m minispec bench --device cuda --model "$T" --ks 1,2 --slow-ks 1 --prompts-per-set 1 \
    --max-new-tokens 16 --no-peer --out "$OUT/study-random-weights"
  ATTACH+=(--attach "bench forward --device cuda=$OUT/bench_forward.log"
           --attach "bench decode --device cuda=$OUT/bench_decode.log"
           --attach "study --device cuda (random weights: its acceptances mean nothing)=$OUT/study.log")
  TARGET=(--target "$T")  # the target written above; without it (no tokenizer to write beside it: write_target
  [[ -s "$T/model.safetensors" ]] || TARGET=()  # failed), gpu-predict writes a target of its own and still runs
  step gpu_predict 120 0 "$PY" -m minispec bench gpu-predict --device cuda "${TARGET[@]}" --out "$OUT" --name gpu_report \
    "${SMOKE[@]}" "${ATTACH[@]}"
else
  echo "no GPU: CuPy or a CUDA device is missing; a smoke run of gpu-predict on the CPU instead (DRY RUN, measures nothing)"
  step gpu_predict 120 0 "$PY" -m minispec bench gpu-predict --device cpu --smoke --ns 4 --out "$OUT" --name gpu_report \
    "${ATTACH[@]}"
fi

if [[ ! -s "$OUT/gpu_report.json" ]]; then  # gpu-predict failed: still leave a report of what ran
  "$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
logs = {p.stem: p.read_text()[-4000:] for p in sorted(out.glob("*.log"))}
steps = (out / "steps.txt").read_text()
(out / "gpu_report.json").write_text(json.dumps(dict(label="gpu-predict failed; the steps' logs", steps=steps, logs=logs), indent=1))
(out / "gpu_report.md").write_text("# minispec GPU check: gpu-predict failed\n\n```text\n" + steps + "```\n"
                                   + "".join(f"\n## {k}\n\n```text\n{v}\n```\n" for k, v in logs.items()))
EOF
fi

echo "== steps"
cat "$OUT/steps.txt"
echo "wrote $OUT/gpu_report.json and $OUT/gpu_report.md ($((SECONDS))s)"
if [[ -z "$GPU" ]]; then
  if ((FAILED)); then
    echo "no GPU, and a step of the dry run failed (exit 1): see the steps above"
    exit 1
  fi
  echo "no GPU: the CUDA tests were skipped and nothing was measured on a GPU (exit 0)"
  exit 0
fi
exit $FAILED
