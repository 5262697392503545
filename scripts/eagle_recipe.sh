#!/usr/bin/env bash
# The shipped EAGLE head, in one resumable command: the data, the training-time test, the stored head, its acceptance.
#
#   bash scripts/eagle_recipe.sh [OUT]      # from the repository root; default $MINISPEC_CACHE/eagle-recipe-lower
#                                           # (~/.cache/minispec/...)
#
# Hours on 2 cores: start it in the background (nohup), and run it again after any interruption. Each stage resumes
# where it stopped, or is skipped once its output is there; each prints the time it starts:
# 1. data      python -m minispec.recipes.eagle_data, three folders in $MINISPEC_CACHE: the committed generated
#              windows (weights/eagle-data/) get their features again, one teacher-forced pass per batch, and the
#              standard-library text shards of eagle-data-v2 are cut again from this Python's own files. A folder
#              already there must hold what its committed manifest (docs/eagle/data_manifest*.json) says, no more,
#              unless this recipe built it (its file recipe-built)
#                eagle-data-asked        chat requests the target wrote itself, and its answers (--asked 0.9)
#                eagle-data-code-asked   function heads the target wrote itself, and its continuations (--asked-code 0.9)
#                eagle-data-v2           code, chat and standard-library text from prompts built here
# 2. init      the head it starts from, head-s10 (weights/eagle-smollm2-135m-ttt at commit 00935b1: git show, so a
#              clone with its history, not a shallow one), into
#              $MINISPEC_CACHE/eagle-init-00935b1
# 3. train     python -m minispec.recipes.train_eagle_ttt --lower-layers (EAGLE-3's lower layers, w_lower starting at
#              zero), one epoch over the first TOKENS of the three folders, checkpointed every 20 steps; the two
#              self-prompted folders are read up to the shards they had when the shipped head was trained (DIR:N,
#              ASKED_SHARDS and CODE_SHARDS), so that windows generated since for the next head do not change it
# 4. store     the head in bfloat16 (recipes/store_bf16.py), as the repository keeps heads
# 5. measure   acceptance by depth on minispec/data's code and chat prompts (8 a set, greedy and at T = 1), in OUT
#
# The settings are the shipped head's (weights/eagle-smollm2-135m/training.json): 2 threads and bfloat16 products,
# which train about twice as fast as float32 on CPUs that multiply bfloat16 natively (Intel's AMX, AVX512-BF16) and
# slower elsewhere. Rerun on the machine that made the shipped head, from its cached folders, the head's checksum is
# the shipped one (SHA256SUMS; a run interrupted and resumed gives the same bytes). A rebuild elsewhere computes the
# features by a teacher-forced pass, not the generation's own, on another CPU: the same head to within rounding,
# not to the byte; its held-out acceptance is the one to compare.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${MINISPEC_CACHE:-$HOME/.cache/minispec}"
[ $# -le 1 ] || { echo "error: one argument at most, the output folder OUT (got $#: $*)" >&2; exit 2; }
OUT="${1:-$CACHE/eagle-recipe-lower}"
[ ! -e "$OUT" ] || [ -d "$OUT" ] || { echo "error: OUT must be a folder, and $OUT is a file" >&2; exit 2; }
INIT_COMMIT=00935b1
INIT="$CACHE/eagle-init-$INIT_COMMIT"
TOKENS=1300000  # the first TOKENS training tokens of the three folders, in this order
ASKED_SHARDS=83 CODE_SHARDS=67  # the self-prompted folders' shards when the shipped head was trained (step 3)
mkdir -p "$OUT"
stage() { echo "[$(date '+%Y-%m-%d %H:%M:%S')] $*"; }
built() {  # built FOLDER MANIFEST: "tokens shards" of the folder's manifest, or of the committed one
  python -c "import json, sys; m = json.load(open(sys.argv[1])); print(m['tokens'], m['shards'])" "$1"
}
data() {  # data FOLDER MANIFEST EAGLE_DATA_ARGS...: the folder built from the committed windows, or checked
  local folder=$1 manifest=docs/eagle/$2 want have; shift 2
  want=$(built "$manifest")
  if [ -f "$folder/recipe-built" ]; then stage "$folder: built by this recipe"; return; fi
  if [ -f "$folder/manifest.json" ]; then
    have=$(built "$folder/manifest.json")
    if [ "$have" = "$want" ]; then stage "$folder holds the committed $want (tokens shards)"; return; fi
    if [ "${have%% *}" -ge "${want%% *}" ]; then
      echo "error: $folder holds $have (tokens shards), the committed windows $want: another build; move it away" >&2
      exit 1
    fi
  fi
  python -m minispec.recipes.eagle_data --out "$folder" --tokens "${want%% *}" --threads 2 "$@"
  have=$(built "$folder/manifest.json")  # the text shards come from this Python's own files: their count may differ
  [ "$have" = "$want" ] || stage "note: $folder holds $have (tokens shards), the committed build $want"
  touch "$folder/recipe-built"
}

stage "1. data: the committed windows and their features"
data "$CACHE/eagle-data-asked" data_manifest_asked.json --generations weights/eagle-data/generations-asked-s3.npz \
  --seed 3 --kinds chat-greedy,chat-t1,chat-greedy --asked 0.9
data "$CACHE/eagle-data-code-asked" data_manifest_code_asked.json \
  --generations weights/eagle-data/generations-code-asked-s3.npz --seed 3 --kinds code-greedy,code-t1 --asked-code 0.9
data "$CACHE/eagle-data-v2" data_manifest.json --generations weights/eagle-data/generations-s2.npz
if [ ! -f "$INIT/eagle.safetensors" ]; then
  stage "2. the head it starts from: head-s10, weights/eagle-smollm2-135m-ttt at commit $INIT_COMMIT"
  rm -rf "$INIT.tmp"; mkdir -p "$INIT.tmp"
  for f in config.json eagle.safetensors frequent_tokens.json token_frequency_order.json training.json; do
    git show "$INIT_COMMIT:weights/eagle-smollm2-135m-ttt/$f" > "$INIT.tmp/$f"
  done
  mv -T "$INIT.tmp" "$INIT"
fi
if [ ! -f "$OUT/head/eagle.safetensors" ]; then
  stage "3. train from $INIT, $TOKENS tokens"
  python -m minispec.recipes.train_eagle_ttt --out "$OUT/head-f32" --run-dir "$OUT/run" \
    --data "$CACHE/eagle-data-asked:$ASKED_SHARDS" "$CACHE/eagle-data-code-asked:$CODE_SHARDS" "$CACHE/eagle-data-v2" --init "$INIT" \
    --lower-layers --unroll 4 --epochs 1 --max-tokens "$TOKENS" --precision bfloat16 --threads 2 --checkpoint-every 20
  stage "4. store in bfloat16 (the float32 head stays in $OUT/head-f32: scripts/eagle_bf16.py compares them)"
  rm -rf "$OUT/head.tmp"; cp -r "$OUT/head-f32" "$OUT/head.tmp"
  python -m minispec.recipes.store_bf16 "$OUT/head.tmp" --file eagle.safetensors
  mv -T "$OUT/head.tmp" "$OUT/head"
fi
if [ ! -f "$OUT/acceptance.json" ] || [ "$OUT/head/eagle.safetensors" -nt "$OUT/acceptance.json" ]; then
  stage "5. acceptance by depth on minispec/data"
  python -m minispec bench eagle --eagle "$OUT/head" --sizes 6144 --prompts-per-set 8 --max-new-tokens 64 --k 4 \
    --acceptance-only --json "$OUT/acceptance.json"
fi
made=$(sha256sum "$OUT/head/eagle.safetensors" | cut -c1-16)
shipped=$(grep eagle.safetensors weights/eagle-smollm2-135m/SHA256SUMS | cut -c1-16)
stage "done: $OUT/head (eagle.safetensors sha256 $made...; the shipped head's $shipped...), $OUT/acceptance.json"
