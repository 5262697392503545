#!/usr/bin/env bash
# The EAGLE head at scale, in one resumable command: the data, the training-time test, the stored head, its acceptance.
#
#   bash scripts/eagle_recipe.sh [TOKENS] [OUT]      # from the repository root; defaults 2100000 and
#                                                    # $MINISPEC_CACHE/eagle-recipe (~/.cache/minispec/eagle-recipe)
#
# Hours on 2 cores: start it in the background (nohup), and run it again after any interruption. Each stage resumes
# where it stopped, or is skipped once its output is there:
# 1. data      python -m minispec.recipes.eagle_data: the committed generated windows (weights/eagle-data/) get their
#              features, the rest is generated with them, by shard, in $MINISPEC_CACHE/eagle-data-v2
# 2. export    the generated windows, token ids only, back into weights/eagle-data/generations-s2.npz (commit it:
#              features are gigabytes and stay in the cache; windows are a byte a token, and a rebuild reuses them)
# 3. train     python -m minispec.recipes.train_eagle_ttt from the committed candidate (weights/eagle-smollm2-135m-ttt),
#              one epoch over every token, checkpointed every 20 steps in its run folder
# 4. store     the head in bfloat16 (recipes/store_bf16.py), as the repository keeps heads
# 5. measure   acceptance by depth on minispec/data's code and chat prompts (8 a set, greedy and at T = 1), in OUT
#
# Every stage prints the time it ends; THREADS (default 2) is the threads each uses. PRECISION (default float32) is
# the training's products: bfloat16 (torch's autocast) trains about twice as fast on CPUs that multiply bfloat16
# natively (Intel's AMX, AVX512-BF16), and slower elsewhere; the run's training.json records which.
set -euo pipefail
cd "$(dirname "$0")/.."
TOKENS="${1:-2100000}"
CACHE="${MINISPEC_CACHE:-$HOME/.cache/minispec}"
OUT="${2:-$CACHE/eagle-recipe}"
THREADS="${THREADS:-2}"
PRECISION="${PRECISION:-float32}"
GENERATIONS=weights/eagle-data/generations-s2.npz
case "$TOKENS" in ''|*[!0-9]*) echo "error: TOKENS must be a positive integer, got '$TOKENS'" >&2; exit 2;; esac
[ "$TOKENS" -gt 0 ] || { echo "error: TOKENS must be positive" >&2; exit 2; }
case "$PRECISION" in float32|bfloat16) ;; *) echo "error: PRECISION must be float32 or bfloat16, got '$PRECISION'" >&2; exit 2;; esac
mkdir -p "$OUT"
stage() { echo "[$(date '+%Y-%m-%d %H:%M:%S')] $*"; }

stage "1. data toward $TOKENS tokens"
python -m minispec.recipes.eagle_data --generations "$GENERATIONS" --tokens "$TOKENS" --threads "$THREADS"
stage "2. export the generated windows to $GENERATIONS"
python -m minispec.recipes.eagle_data --export "$GENERATIONS"
if [ ! -f "$OUT/head/eagle.safetensors" ]; then
  stage "3. train from weights/eagle-smollm2-135m-ttt ($PRECISION)"
  python -m minispec.recipes.train_eagle_ttt --out "$OUT/head" --init weights/eagle-smollm2-135m-ttt --unroll 4 \
    --epochs 1 --max-tokens "$TOKENS" --threads "$THREADS" --checkpoint-every 20 \
    --precision "$PRECISION"
  stage "4. store in bfloat16"
  python -m minispec.recipes.store_bf16 "$OUT/head" --file eagle.safetensors
fi
stage "5. acceptance by depth on minispec/data"
minispec bench eagle --eagle "$OUT/head" --sizes 6144 --prompts-per-set 8 --max-new-tokens 64 --k 4 \
  --acceptance-only --json "$OUT/acceptance.json"
stage "done: $OUT/head, $OUT/acceptance.json"
