#!/usr/bin/env bash
# GPU speed check, in one call of under 8 minutes on one H200: (A) forward passes of real-size
# models (Dream-7B, Fast-dLLM v2 7B, LLaDA-8B, SDAR-8B, DiffusionGemma) built on the GPU in bf16
# with random weights, by benchmarks/gpu_forward.py; (B) a ~100M-parameter random checkpoint per
# family, each decoded end to end by `dcode bench speed`.
#
# On a machine with a GPU, from the repository root (the device tool's `run` with a timeout_s of
# about 480, so that the 420-s budget below fits with room to spare), once:
#
#     bash benchmarks/gpu_check.sh "$OUT"
#
# where $OUT is the device tool's output folder: everything the check writes lands there and comes
# back. It needs a Python with torch (a CUDA build), transformers >= 5.11 (DiffusionGemma),
# tokenizers, safetensors and dcode's other dependencies; dcode itself is imported from this checkout.
# CPU smoke test (what tests/test_gpu_check.py runs, ~25 s):
#
#     DEVICE=cpu SIZE=tiny FORWARD_SCALE=toy LIMIT=1 LENGTH=16 REPEATS=1 bash benchmarks/gpu_check.sh /tmp/gpu-check
#
# Steps: (1) an nvidia-smi summary; (1b) benchmarks/gpu_forward.py at real shapes (FORWARD_SCALE)
# under FORWARD_BUDGET: ms per pass at 256 / 1,024 / 4,096-token canvases with and without the
# cache, verify's 1 / 4 / 8 / 16 rows, peak memory, projected tok/s, into OUT/forward/;
# (2) benchmarks/make_checkpoints.py writes one random checkpoint
# per family (qwen2 block-causal, Dream, LLaDA, SDAR, Fast-dLLM v2, DiffusionGemma) in its released on-disk format into a
# temporary folder (removed at exit; weights drawn on the GPU); (3) per family, `python -m dcode.cli
# bench speed` under `timeout`, so one hanging family cannot eat the lease, going on after a failure;
# a family that timed out (which leaves no report) runs once more with LIMIT=1 REPEATS=1 when at
# least 30 s of the budget are left; (4) a summary: one line per setting with ms per forward,
# tokens per forward, tok/s and whether the cache was on, then every family's speed.md.
# (3b) per kind of QUANTIZE and family of QUANT_FAMILIES, `bench speed --quantize KIND` (the fast
# setting, 1 prompt, 1 repeat, no autoregressive baseline) into OUT/<family>-<kind>/: the same
# checkpoint's speed with its linear layers quantised as they load (torchao), beside step 3's.
#
# "With and without the cache": the bench has no cache switch (DCODE_CACHE is not read by it); its
# settings fix the cache. one-per-pass, the reference loop, runs WITHOUT it; the fast settings run
# WITH it. By default each family runs one-per-pass plus one fast setting: threshold-0.9 (qwen2),
# threshold-0.9-block-32 (Dream, LLaDA; they also run threshold-0.9-block-32-no-cache, the same
# blocks without a cache), entropy-bound-0.1 (DiffusionGemma's own rule), plus the
# autoregressive baseline (transformers' generate with its KV cache; not for DiffusionGemma). With
# random weights no position reaches the 0.9 threshold or the entropy bound, so every rule commits
# about one token per pass (DiffusionGemma's fast setting also ends a canvas after 48 passes): the
# rows differ by the cache alone. The cache is exact on qwen2 (keys/values of finished blocks) and
# DiffusionGemma (the context is encoded once per canvas, not every pass); Dream and LLaDA attend
# fully and use Fast-dLLM's approximate dual cache ("dual (approximate)": each block's first pass
# runs the whole canvas, the others the 32-token block alone against the cached rest).
#
# Output under OUT (default gpu-check-results/): gpu_check.log (everything printed), nvidia-smi.txt,
# forward/gpu_forward.json and forward/gpu_forward.md (step 1b), forward.log, checkpoints.log,
# <family>/speed.json, <family>/speed.md, <family>/bench.log (and bench-timed-out.log after a
# retry), summary.md. Exit status: 0 when step 1b measured every model and every family wrote a report.
#
# Environment overrides [defaults]:
#   DEVICE [cuda]   SIZE [100m; tiny: a few hundred K parameters]   LIMIT [3 prompts]
#   LENGTH [256 tokens]   REPEATS [2]   FAMILIES [qwen2,dream,llada,sdar,fast_dllm_v2,diffusion_gemma]
#   FORWARD [1; 0 skips step 1b]   FORWARD_SCALE [real; toy for a CPU]   FORWARD_BUDGET [210 s]
#   FORWARD_MODELS [dream-7b,fast-dllm-v2-7b,llada-8b,sdar-8b,diffusion-gemma]
#   AR [1; 0 skips the autoregressive baseline]   SETTINGS [per family as above; "all" for every
#   setting the bench has; or a comma-separated list valid for every family]
#   QUANTIZE [int8,int4: step 3b times these --quantize kinds; "" skips it]   QUANT_FAMILIES [qwen2,sdar]
#   FAMILY_TIMEOUT [90 s]   BUDGET [420 s for the whole check: a family starts only with 20 s of it
#   left and never runs past it]   PYTHON [python, else python3]
#
# Expected time on one H200 with the defaults, about 5-7 minutes (the budget stops it at 7): step
# 1b ~2-3.5 minutes (CUDA start, each model built in ~5-15 s, ~90 timed passes each, the largest
# 16 x 1,024 tokens); checkpoints ~15 s (imports, 6 x ~100M weights drawn on the GPU, 1.2 GB
# written); then per family ~10 s of imports, CUDA start
# and loading, 2 settings x (16 + 3 x 2 x 256) = ~3,100 passes at ~4-8 ms (launch-bound at this
# size; DiffusionGemma's MoE passes cost 2-3 times more, its fast setting needs only ~300), and
# ~1,550 autoregressive tokens at ~5 ms: ~35-60 s per family.
set -euo pipefail

OUT=${1:-gpu-check-results}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-100m}
LIMIT=${LIMIT:-3}
LENGTH=${LENGTH:-256}
REPEATS=${REPEATS:-2}
FAMILIES=${FAMILIES:-qwen2,dream,llada,sdar,fast_dllm_v2,diffusion_gemma}
FORWARD=${FORWARD:-1}
FORWARD_SCALE=${FORWARD_SCALE:-real}
FORWARD_BUDGET=${FORWARD_BUDGET:-210}
FORWARD_MODELS=${FORWARD_MODELS:-dream-7b,fast-dllm-v2-7b,llada-8b,sdar-8b,diffusion-gemma}
AR=${AR:-1}
QUANTIZE=${QUANTIZE-int8,int4}
QUANT_FAMILIES=${QUANT_FAMILIES:-qwen2,sdar}
SETTINGS=${SETTINGS:-}
FAMILY_TIMEOUT=${FAMILY_TIMEOUT:-90}
BUDGET=${BUDGET:-420}
PYTHON=${PYTHON:-$(command -v python || command -v python3 || echo python)}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # dcode from this checkout, installed or not
CKPT=$(mktemp -d "${TMPDIR:-/tmp}/dcode-gpu-check.XXXXXX")
trap 'rm -rf "$CKPT"' EXIT

# The settings one family runs: without the cache (one-per-pass) and with it (the family's fast setting).
settings_for() {
    case "$SETTINGS" in
        all) echo "" ;;
        "")
            case "$1" in
                dream | llada) echo "one-per-pass,threshold-0.9-block-32-no-cache,threshold-0.9-block-32" ;;
                diffusion_gemma) echo "one-per-pass,entropy-bound-0.1" ;;
                *) echo "one-per-pass,threshold-0.9" ;;
            esac
            ;;
        *) echo "$SETTINGS" ;;
    esac
}

# `timeout SECONDS CMD...` where coreutils has it, else CMD alone.
limited() {
    local seconds=$1
    shift
    if command -v timeout >/dev/null 2>&1; then
        timeout -k 10 "$seconds" "$@"
    else
        "$@"
    fi
}

# bench FAMILY LIMIT REPEATS SECONDS: one `dcode bench speed` run into OUT/FAMILY; its exit status.
bench() {
    local family=$1 prompts=$2 repeats=$3 seconds=$4 choice
    local -a args
    choice=$(settings_for "$family")
    args=(--model "$CKPT/$family" --device "$DEVICE" --limit "$prompts" --length "$LENGTH" --repeats "$repeats"
        --out "$OUT/$family" -q)
    [ -z "$choice" ] || args+=(--settings "$choice")
    [ "$AR" != 0 ] || args+=(--no-ar)
    rm -f "$OUT/$family/speed.json" "$OUT/$family/speed.md"  # never report an earlier run's figures
    echo "== $family: dcode bench speed --limit $prompts --repeats $repeats ${choice:+--settings $choice }(timeout $seconds s)"
    limited "$seconds" "$PYTHON" -m dcode.cli bench speed "${args[@]}" >"$OUT/$family/bench.log" 2>&1
}

# quantized_bench FAMILY KIND SECONDS: `dcode bench speed --quantize KIND` (the fast setting, one
# prompt, one repeat) into OUT/FAMILY-KIND; its exit status.
quantized_bench() {
    local family=$1 kind=$2 seconds=$3 fast
    fast=$(settings_for "$family")
    mkdir -p "$OUT/$family-$kind"
    echo "== $family: dcode bench speed --quantize $kind --settings ${fast##*,} (timeout $seconds s)"
    limited "$seconds" "$PYTHON" -m dcode.cli bench speed --model "$CKPT/$family" --device "$DEVICE" --limit 1 \
        --length "$LENGTH" --repeats 1 --out "$OUT/$family-$kind" -q --no-ar --settings "${fast##*,}" \
        --quantize "$kind" >"$OUT/$family-$kind/bench.log" 2>&1
}

check() {
    local began=$SECONDS family rc left limit
    local -a status=()
    echo "== dcode GPU check: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(uname -n)"
    echo "   DEVICE=$DEVICE SIZE=$SIZE LIMIT=$LIMIT LENGTH=$LENGTH REPEATS=$REPEATS AR=$AR FAMILIES=$FAMILIES"
    echo "   SETTINGS=${SETTINGS:-per family} FAMILY_TIMEOUT=$FAMILY_TIMEOUT BUDGET=$BUDGET PYTHON=$PYTHON OUT=$OUT"
    echo "   QUANTIZE=$QUANTIZE QUANT_FAMILIES=$QUANT_FAMILIES"
    echo "   FORWARD=$FORWARD FORWARD_SCALE=$FORWARD_SCALE FORWARD_BUDGET=$FORWARD_BUDGET FORWARD_MODELS=$FORWARD_MODELS"
    echo "   git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"

    echo "== nvidia-smi"
    if command -v nvidia-smi >/dev/null 2>&1; then
        {
            nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,utilization.gpu --format=csv || true
            nvidia-smi || true
        } >"$OUT/nvidia-smi.txt" 2>&1
        head -n 2 "$OUT/nvidia-smi.txt"
    else
        echo "nvidia-smi not found" | tee "$OUT/nvidia-smi.txt"
    fi

    if [ "$FORWARD" != 0 ]; then
        echo "== forward passes ($FORWARD_SCALE shapes): $FORWARD_MODELS (budget $FORWARD_BUDGET s)"
        rc=0
        limited $((FORWARD_BUDGET + 60)) "$PYTHON" "$ROOT/benchmarks/gpu_forward.py" "$OUT/forward" \
            --scale "$FORWARD_SCALE" --device "$DEVICE" --models "$FORWARD_MODELS" --budget "$FORWARD_BUDGET" \
            --repeats "$([ "$FORWARD_SCALE" = toy ] && echo 1 || echo 5)" 2>"$OUT/forward.log" || rc=$?
        if [ "$rc" -eq 0 ]; then
            status+=("forward: ok in $((SECONDS - began)) s")
        else
            status+=("forward: FAILED (exit $rc)")
            tail -n 15 "$OUT/forward.log" | sed 's/^/   | /'
        fi
        echo "   ${status[-1]}"
    fi

    echo "== checkpoints ($SIZE) into $CKPT"
    rc=0
    limited 150 "$PYTHON" "$ROOT/benchmarks/make_checkpoints.py" "$CKPT" --size "$SIZE" --families "$FAMILIES" \
        --device "$([[ $DEVICE == cuda* ]] && echo "$DEVICE" || echo cpu)" 2>&1 | tee "$OUT/checkpoints.log" || rc=$?
    [ "$rc" -eq 0 ] || echo "!! make_checkpoints exited $rc; timing the families it did write"
    echo "   ($((SECONDS - began)) s so far)"

    for family in ${FAMILIES//,/ }; do
        mkdir -p "$OUT/$family"
        left=$((BUDGET - (SECONDS - began)))
        if [ ! -f "$CKPT/$family/config.json" ]; then
            echo "== $family: SKIPPED (no checkpoint)"
            status+=("$family: no checkpoint")
            continue
        fi
        if [ "$left" -lt 20 ]; then
            echo "== $family: SKIPPED (only $left s of the ${BUDGET}-s budget left)"
            status+=("$family: skipped, budget spent")
            continue
        fi
        limit=$((left < FAMILY_TIMEOUT ? left : FAMILY_TIMEOUT))
        local start=$SECONDS
        rc=0
        bench "$family" "$LIMIT" "$REPEATS" "$limit" || rc=$?
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            # A timeout leaves no report at all: try once more with a sixth of the work, if time allows.
            left=$((BUDGET - (SECONDS - began)))
            if [ "$left" -ge 30 ] && { [ "$LIMIT" != 1 ] || [ "$REPEATS" != 1 ]; }; then
                echo "   timed out after $limit s; once more with LIMIT=1 REPEATS=1"
                limit=$((left < FAMILY_TIMEOUT ? left : FAMILY_TIMEOUT))
                mv "$OUT/$family/bench.log" "$OUT/$family/bench-timed-out.log"
                start=$SECONDS
                rc=0
                bench "$family" 1 1 "$limit" || rc=$?
                [ "$rc" -ne 0 ] || rc=reduced
            fi
        fi
        if [ "$rc" = 0 ] && [ -f "$OUT/$family/speed.json" ]; then
            status+=("$family: ok in $((SECONDS - start)) s")
        elif [ "$rc" = reduced ] && [ -f "$OUT/$family/speed.json" ]; then
            status+=("$family: ok in $((SECONDS - start)) s with LIMIT=1 REPEATS=1, after a timeout")
        elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            status+=("$family: TIMED OUT after $limit s")
        else
            status+=("$family: FAILED (exit $rc) after $((SECONDS - start)) s")
        fi
        echo "   ${status[-1]}"
        [ "$rc" = 0 ] || [ "$rc" = reduced ] || tail -n 15 "$OUT/$family/bench.log" | sed 's/^/   | /'
    done

    local quantized="" kind
    for family in ${QUANT_FAMILIES//,/ }; do
        for kind in ${QUANTIZE//,/ }; do
            [ -f "$CKPT/$family/config.json" ] || continue
            left=$((BUDGET - (SECONDS - began)))
            if [ "$left" -lt 20 ]; then
                status+=("$family --quantize $kind: skipped, budget spent")
                continue
            fi
            quantized+=",$family-$kind"
            local start=$SECONDS
            if quantized_bench "$family" "$kind" $((left < FAMILY_TIMEOUT ? left : FAMILY_TIMEOUT)); then
                status+=("$family --quantize $kind: ok in $((SECONDS - start)) s")
            else
                status+=("$family --quantize $kind: FAILED")
                tail -n 15 "$OUT/$family-$kind/bench.log" | sed 's/^/   | /'
            fi
            echo "   ${status[-1]}"
        done
    done

    echo "== summary ($((SECONDS - began)) s in all)"
    printf '%s\n' "${status[@]}"
    "$PYTHON" - "$OUT" "$FAMILIES$quantized" <<'PY' || echo "!! the summary table failed"
import json
import sys
from pathlib import Path

out, families = Path(sys.argv[1]), [f for f in sys.argv[2].split(",") if f]
lines = [
    "| family | setting | cache | passes | tok/pass | ms/pass | tok/s | first draft s | wall s | peak MiB | prompts × repeats |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
]
for family in families:
    path = out / family / "speed.json"
    if not path.is_file():
        lines.append(f"| {family} | (no report) | | | | | | | | | |")
        continue
    report = json.loads(path.read_text())
    for row in report["settings"]:
        if row["role"] == "autoregressive":
            cache = "KV cache (generate)"
        elif not row["config"]["cache"]:
            cache = "off"
        elif report["attention_block"] is None:
            cache = f"{row['config']['approx_cache']} (approximate)"
        else:
            cache = "on"
        lines.append(
            f"| {family} | {row['setting']} | {cache} | {row['forward_passes']:.0f} | {row['tokens_per_forward']:.2f} "
            f"| {row['ms_per_forward']:.2f} | {row['tokens_per_second']:.1f} | {row['first_draft_seconds']:.3f} "
            f"| {row['wall_seconds']:.3f} | {row['peak_memory_mb']:.1f} | {report['prompts']} × {report['repeats']} |"
        )
text = "\n".join(lines) + "\n"
(out / "summary.md").write_text(text)
print(text)
PY
    for family in ${FAMILIES//,/ }; do
        if [ -f "$OUT/$family/speed.md" ]; then
            echo "--- $family"
            cat "$OUT/$family/speed.md"
            echo
        fi
    done
    for line in "${status[@]}"; do
        case "$line" in *": ok in "*) ;; *) return 1 ;; esac
    done
}

check 2>&1 | tee "$OUT/gpu_check.log"
