#!/usr/bin/env bash
# Every committed figure of the shipped EAGLE head, measured again: what a new head in weights/eagle-smollm2-135m
# needs before it lands (docs/eagle/scaling.md, "What is left").
#
#   bash scripts/eagle_promote.sh [STAGE ...]      # from the repository root; default: every stage, in this order
#
# Hours on 2 cores: start it in the background (nohup) and run it again after an interruption; a stage whose output
# is in OUT is skipped. OUT is $MINISPEC_CACHE/eagle-promote-<the head's sha256, 12 digits>, so another head starts
# afresh. Stages, each a command of the project's own (its JSON records date, commit, command and machine):
#
#   not timed (p-values, acceptance, identity: they may run beside other work)
#     level4       check, the chain, 192 paired runs      -> docs/level4_eagle.json
#     tree-quick   check --tree --quick --runs 24         -> docs/level4_eagle_tree_quick.json
#     tree         check --tree --runs 192, numba         -> docs/level4_eagle_tree.json (optional: not in the default
#                  list, about 45 minutes on 2 vCPUs; without it, install removes the file, whose figures are another head's)
#     near-ties    harness.near_ties on the committed cases (every drafter, both kernels) -> docs/kernel/near_ties.json
#     bf16         scripts/eagle_bf16.py $F32 (the head as its training run wrote it, float32) -> docs/eagle/bf16.json
#     trees        bench eagle --acceptance-only --trees 4x5x16 (tokens a pass, the default tree at its fixed shape)
#                  -> docs/eagle/trees_shipped.json
#   timed (each waits until the 1-minute load average is below 0.5, and records the load before and after)
#     memory       bench eagle --sizes 6144 (c, memory)   -> docs/eagle/bench_eagle_shipped.json
#     study        bench (every drafter, K 1,2,3,4,6)     -> docs/study/
#     kernel-numba, kernel-numpy, kernel-float32, kernel-q4_1
#                  bench --drafters eagle,draft,prompt-lookup per kernel and weight format -> docs/kernel/study_*.json
#                  (kernel-q4_1 needs the quantized target: minispec fetch smollm2 --q4_1)
#     auto-honest, auto-corrupted
#                  bench auto                             -> docs/policy/auto_*.json
#     specbench    bench specbench --per-task 1           -> docs/specbench/first_look.json
#     examples     harness.example_times                  -> docs/examples/times.json
#     rules        bench rules                            -> docs/block/rules.json
#   install        copy OUT's figures to their docs/ paths, then regenerate the tables (harness/docs_tables.py); it
#                  refuses while a figure is missing, unless PARTIAL=1, which installs the rest and names the missing
#
# A level-4 stage whose verdict fails (minispec check exits 1) keeps its figures and the script goes on: a failed
# verdict is a result to report, not a run to repeat. Every stage runs under the defaults (MINISPEC_KERNEL and
# MINISPEC_TRUST_CALIBRATION are unset), as the committed figures did.
set -euo pipefail
unset MINISPEC_KERNEL MINISPEC_TRUST_CALIBRATION
cd "$(dirname "$0")/.."
HEAD_DIR=weights/eagle-smollm2-135m
CACHE="${MINISPEC_CACHE:-$HOME/.cache/minispec}"
SHA=$(sha256sum "$HEAD_DIR/eagle.safetensors" | cut -c1-12)
OUT="${OUT:-$CACHE/eagle-promote-$SHA}"
SPECBENCH="${SPECBENCH:-../shared/external_prompts/spec_bench_question.jsonl}"
NOT_TIMED="level4 tree-quick near-ties bf16 trees"  # and, by name only, tree
TIMED="memory study kernel-numba kernel-numpy kernel-float32 kernel-q4_1 auto-honest auto-corrupted specbench examples rules"
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<< "$NOT_TIMED $TIMED install"
for s in "${STAGES[@]}"; do
  case " $NOT_TIMED tree $TIMED install " in *" $s "*) ;; *) echo "error: no stage '$s' (stages: $NOT_TIMED tree $TIMED install)" >&2; exit 2;; esac
done
mkdir -p "$OUT"
say() { echo "[$(date '+%Y-%m-%d %H:%M:%S')] $*"; }
load1() { cut -d' ' -f1 /proc/loadavg; }
quiet() {  # wait (at most an hour) for a quiet machine: the 1-minute load average below 0.5
  local waited=0
  while awk -v l="$(load1)" 'BEGIN { exit !(l >= 0.5) }'; do
    [ $((waited % 300)) -eq 0 ] && say "waiting for a quiet machine: load $(load1)"
    [ "$waited" -ge 3600 ] && { say "error: the machine stayed busy for an hour; timed stages stop here"; exit 3; }
    sleep 15; waited=$((waited + 15))
  done
}
done_already() { [ -e "$OUT/$1" ] && say "$2: $OUT/$1 is there, skipped"; }
run() {  # run STAGE OUTPUT TIMED COMMAND...: skipped when OUTPUT is there; a failed stage leaves no OUTPUT
  local stage=$1 output=$2 timed=$3 rc=0; shift 3
  done_already "$output" "$stage" && return
  [ "$timed" = yes ] && quiet
  local before start; before=$(load1); start=$(date +%s)
  say "$stage: $* (load $before)"
  "$@" > "$OUT/$stage.out" 2> "$OUT/$stage.log" || rc=$?  # what it prints; its progress and notes
  if [ "$rc" -eq 1 ] && [ "$1" = minispec ] && [ "$2" = check ] && [ -e "$OUT/$output" ] && \
     python -c 'import json, sys; sys.exit(all(json.load(open(sys.argv[1]))["passed"].values()))' "$OUT/$output"; then
    say "$stage: a verdict failed (see $OUT/$stage.out); its figures are kept"
  elif [ "$rc" -ne 0 ]; then
    say "error: $stage failed (exit $rc), see $OUT/$stage.log"; rm -rf "${OUT:?}/$output"; exit 1
  fi
  say "$stage: done in $(( ($(date +%s) - start) / 60 )) min (load $before before, $(load1) after)"
  echo "$stage $(date -u '+%Y-%m-%d %H:%M UTC') $(( $(date +%s) - start )) s, load $before before, $(load1) after" >> "$OUT/stages.txt"
}
study() {  # study OUTPUT_DIR BENCH_ARGS...: the study writes a folder
  local dir=$1; shift; rm -rf "${OUT:?}/$dir.tmp"  # a failed run's leftovers
  minispec bench --out "$OUT/$dir.tmp" "$@" && mv "$OUT/$dir.tmp" "$OUT/$dir"
}
near_ties() {  # every drafter's identity on the committed cases (which depend on the target, not the head)
  cp docs/kernel/near_ties.json "$OUT/near_ties.tmp.json"
  python -m minispec.harness.near_ties --json "$OUT/near_ties.tmp.json" && mv "$OUT/near_ties.tmp.json" "$OUT/near_ties.json"
}
say "head $HEAD_DIR (sha256 $SHA...), figures in $OUT"
for s in "${STAGES[@]}"; do
  case $s in
    level4) run "$s" level4_eagle.json no minispec check --draft "$HEAD_DIR" --no-calibration --json "$OUT/level4_eagle.json";;
    tree-quick) run "$s" level4_eagle_tree_quick.json no minispec check --draft "$HEAD_DIR" --tree --quick --runs 24 \
                  --json "$OUT/level4_eagle_tree_quick.json";;
    tree) run "$s" level4_eagle_tree.json no minispec check --draft "$HEAD_DIR" --tree --runs 192 --no-calibration \
            --kernel numba --json "$OUT/level4_eagle_tree.json";;
    near-ties) run "$s" near_ties.json no near_ties;;
    bf16) done_already bf16.json "$s" && continue
          [ -f "${F32:-}/eagle.safetensors" ] || { say "error: F32=DIR must name the head in float32, as trained"; exit 2; }
          run "$s" bf16.json no python scripts/eagle_bf16.py "$F32" "$OUT/bf16.json";;
    trees) run "$s" trees_shipped.json no minispec bench eagle --eagle "$HEAD_DIR" --sizes 6144 --prompts-per-set 8 \
             --max-new-tokens 64 --k 4 --acceptance-only --trees 4x5x16 --json "$OUT/trees_shipped.json";;
    memory) run "$s" bench_eagle_shipped.json yes minispec bench eagle --eagle "$HEAD_DIR" --sizes 6144 --prompts-per-set 6 \
              --json "$OUT/bench_eagle_shipped.json";;
    study) run "$s" study yes study study --prompts-per-set 6 --ks 1,2,3,4,6 --slow-ks 1;;
    kernel-numba|kernel-numpy) run "$s" "$s" yes study "$s" --kernel "${s#kernel-}" --drafters eagle,draft,prompt-lookup \
                                 --ks 1,2,4 --prompts-per-set 3 --no-peer;;
    kernel-float32) run "$s" "$s" yes study "$s" --kernel numba --model weights/smollm2-135m-instruct \
                      --drafters eagle,draft,prompt-lookup --ks 1,2,4 --prompts-per-set 3 --no-peer;;
    kernel-q4_1) done_already kernel-q4_1 "$s" && continue
                 [ -f weights/smollm2-135m-instruct-q4_1/config.json ] || minispec fetch smollm2 --q4_1
                 run "$s" "$s" yes study "$s" --kernel numba --model weights/smollm2-135m-instruct-q4_1 \
                   --drafters eagle,draft,prompt-lookup --ks 1,2,4 --prompts-per-set 3 --no-peer;;
    auto-honest|auto-corrupted) run "$s" "$s.json" yes minispec bench auto --calibration "${s#auto-}" --json "$OUT/$s.json";;
    specbench) done_already first_look.json "$s" && continue
               [ -f "$SPECBENCH" ] || { say "error: no Spec-Bench questions at $SPECBENCH (SPECBENCH=PATH)"; exit 2; }
               run "$s" first_look.json yes minispec bench specbench "$SPECBENCH" --per-task 1 --max-new-tokens 64 \
                 --out "$OUT/specbench.jsonl" --json "$OUT/first_look.json";;
    examples) run "$s" times.json yes python -m minispec.harness.example_times --json "$OUT/times.json";;
    rules) run "$s" rules.json yes minispec bench rules --prompts 2 --seeds 2 --tokens 32 --json "$OUT/rules.json";;
    install)
      [ -e "$OUT/first_look.json" ] && [ ! -e "$OUT/first_look.png" ] && \
        python -m minispec.harness.specbench_figures "$OUT/first_look.json" "$OUT/first_look.png"
      # what each stage made -> where it goes in docs/ (a folder's files by name)
      INSTALL=(
        "level4_eagle.json docs/level4_eagle.json" "level4_eagle_tree_quick.json docs/level4_eagle_tree_quick.json"
        "near_ties.json docs/kernel/near_ties.json" "bf16.json docs/eagle/bf16.json" "trees_shipped.json docs/eagle/trees_shipped.json"
        "bench_eagle_shipped.json docs/eagle/bench_eagle_shipped.json" "study docs/study"
        "kernel-numba/study.json docs/kernel/study_numba.json" "kernel-numpy/study.json docs/kernel/study_numpy.json"
        "kernel-float32/study.json docs/kernel/study_numba_float32.json"
        "kernel-q4_1/study.json docs/kernel/study_numba_q4_1.json"
        "auto-honest.json docs/policy/auto_honest.json" "auto-honest.out docs/policy/auto_honest.md"
        "auto-corrupted.json docs/policy/auto_corrupted.json" "auto-corrupted.out docs/policy/auto_corrupted.md"
        "first_look.json docs/specbench/first_look.json" "first_look.png docs/specbench/first_look.png"
        "times.json docs/examples/times.json" "rules.json docs/block/rules.json")
      missing=""
      for pair in "${INSTALL[@]}"; do
        read -r src dest <<< "$pair"; [ -e "$OUT/$src" ] || missing="$missing $dest"
      done
      if [ -n "$missing" ] && [ "${PARTIAL:-}" != 1 ]; then
        say "error: not measured yet, for:$missing (run the stages that make them, or PARTIAL=1 to install the rest)"
        exit 1
      fi
      for pair in "${INSTALL[@]}"; do
        read -r src dest <<< "$pair"; [ -e "$OUT/$src" ] || continue
        if [ -d "$OUT/$src" ]; then cp "$OUT/$src"/study.json "$OUT/$src"/report.md "$dest"/
          cp "$OUT/$src"/*.png "$dest"/ 2> /dev/null || say "note: $OUT/$src has no figures (.png)"
        else cp "$OUT/$src" "$dest"; fi
      done
      if [ -e "$OUT/level4_eagle_tree.json" ]; then cp "$OUT/level4_eagle_tree.json" docs/
      elif [ -e docs/level4_eagle_tree.json ]; then
        rm docs/level4_eagle_tree.json
        say "no 192-run tree check of this head: docs/level4_eagle_tree.json, another head's, removed"
      fi
      python -m minispec.harness.docs_tables
      if grep -rln "⟨" README.md docs weights --include='*.md'; then  # a figure the docs wait for, by hand
        say "installed, but the files above still hold a ⟨placeholder⟩ to fill from $OUT"
      fi
      [ -z "$missing" ] || say "PARTIAL=1: these still hold the first head's figures (say so in docs/eagle.md):$missing"
      say "installed: review git diff, then commit with $OUT/stages.txt's minutes in the message";;
  esac
done
say "done: $OUT"
