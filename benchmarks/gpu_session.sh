#!/usr/bin/env bash
# Everything a CUDA GPU is for, in one run of about 9 minutes on a machine that has one:
#
#   1. dcode-tiny trained further in block diffusion (benchmarks/gpu_train.sh, from INIT), and side by
#      side on the same GPU the autoregressive yardstick from scratch to token milestones
#      (benchmarks/yardstick.py train): both for MINUTES;
#   2. the CUDA decoding paths: `dcode bench speed` on the freshly trained dcode-tiny, then
#      benchmarks/gpu_check.sh's random ~100M checkpoints of every family, for at most CHECK_BUDGET
#      seconds and never past DEADLINE seconds from the start.
#
# What it needs: a checkout of dcode, Python with torch (CUDA) and transformers, and beside the tree
# the data, the start weights and, where the GPU machine has no package index, the tree-sitter wheels
# (about 35 MB, ignored by git; `pip list | grep tree-sitter` gives the NAME==VERSION list):
#     python -m dcode.train pack --out .train/gpu
#     python -m dcode.train export --run .train/run --out .train/gpu-init --dtype float16
#     python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl tree-sitter==... ...
# How to run it, on the GPU machine, from the checkout:
#     OUT=/path/to/results bash benchmarks/gpu_session.sh
# What it prints: the GPU, a progress line of each training every 30 s, each part's exit status, the
# speed table of dcode-tiny on CUDA and gpu_check.sh's summary. What it writes to $OUT, each file as
# soon as its part ends (a run cut short still leaves the parts that finished), at most 16 MB each:
#     dcode-tiny.tar (the trained model folder, float16), ar-<tokens>M.tar (a yardstick folder each),
#     check.tar (speed reports), logs.tar (every log).
# Then, on the CPU machine: untar; compare with benchmarks/checkpoints.py; score the yardsticks with
# `python benchmarks/yardstick.py evaluate ...`.
set -uo pipefail
: "${OUT:?set OUT to the folder the results go to}"
DATA=${DATA:-.train/gpu}
INIT=${INIT:-.train/gpu-init}
DEVICE=${DEVICE:-cuda}
MINUTES=${MINUTES:-5}
BATCH=${BATCH:-256}
AR_BATCH=${AR_BATCH:-32}
MILESTONES=${MILESTONES:-31.4e6,110e6}
CHECK_BUDGET=${CHECK_BUDGET:-110}  # seconds for gpu_check.sh at most
DEADLINE=${DEADLINE:-530}  # seconds after the start by which gpu_check.sh must have ended
PYTHON=${PYTHON:-python3}
WORK=${WORK:-/tmp/dcode-gpu-session}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHON
# dcode from this checkout (the machine's Python has torch and transformers, not dcode), and the
# wheels carried in .whl (tree-sitter: `dcode new` checks every draft, even with repair off).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/dcode-site .whl/*.whl &&
        export PYTHONPATH="$PYTHONPATH:/tmp/dcode-site"
fi
mkdir -p "$OUT" "$WORK/bd" "$WORK/ar" "$WORK/check" "$WORK/logs"
began=$SECONDS

logs() { tar -cf "$OUT/logs.tar" -C "$WORK" logs; }

echo "== $(date -u '+%F %T UTC') DEVICE=$DEVICE MINUTES=$MINUTES BATCH=$BATCH AR_BATCH=$AR_BATCH MILESTONES=$MILESTONES"
if [ "$DEVICE" != cpu ]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; fi

# 1) both trainings at once: small models leave most of the GPU idle, so they barely slow each other.
OUT="$WORK/bd" INIT="$INIT" DATA="$DATA" DEVICE="$DEVICE" BATCH="$BATCH" MINUTES="$MINUTES" RUN="$WORK/bd-run" \
    bash benchmarks/gpu_train.sh >"$WORK/logs/bd.log" 2>&1 &
bd=$!
"$PYTHON" benchmarks/yardstick.py train --data "$DATA" --run "$WORK/ar-run" --out "$WORK/ar" --device "$DEVICE" \
    --batch "$AR_BATCH" --milestones "$MILESTONES" --minutes "$MINUTES" >"$WORK/logs/ar.log" 2>&1 &
ar=$!
while kill -0 "$bd" 2>/dev/null || kill -0 "$ar" 2>/dev/null; do
    sleep 30
    echo "-- $((SECONDS - began)) s: bd $(tail -n 1 "$WORK/bd-run/log.jsonl" 2>/dev/null | cut -c1-160)"
    echo "   ar $(tail -n 1 "$WORK/ar-run/log.jsonl" 2>/dev/null | cut -c1-160)"
done
wait "$bd"; echo "== block diffusion exited $? after $((SECONDS - began)) s"
wait "$ar"; echo "== yardstick exited $? after $((SECONDS - began)) s"
tail -n 3 "$WORK/logs/bd.log" "$WORK/logs/ar.log"
[ -d "$WORK/bd/dcode-tiny" ] && tar -cf "$OUT/dcode-tiny.tar" -C "$WORK/bd" dcode-tiny
cp "$WORK/bd-run/log.jsonl" "$WORK/logs/bd-log.jsonl" 2>/dev/null
cp "$WORK/ar-run/log.jsonl" "$WORK/logs/ar-log.jsonl" 2>/dev/null
for folder in "$WORK"/ar/ar-*; do
    [ -d "$folder" ] && tar -cf "$OUT/$(basename "$folder").tar" -C "$WORK/ar" "$(basename "$folder")"
done
logs

# 2) the CUDA decoding paths, the trained dcode-tiny first (no training runs beside them now).
if [ -d "$WORK/bd/dcode-tiny" ]; then
    echo "== dcode bench speed, dcode-tiny on $DEVICE"
    timeout -k 5 60 "$PYTHON" -m dcode.cli bench speed --model "$WORK/bd/dcode-tiny" --device "$DEVICE" --limit 3 \
        --repeats 1 --out "$WORK/check/dcode-tiny" -q >"$WORK/logs/tiny-speed.log" 2>&1
    echo "   exited $?"
    cat "$WORK/check/dcode-tiny/speed.md" 2>/dev/null
fi
left=$((DEADLINE - (SECONDS - began)))
[ "$left" -gt "$CHECK_BUDGET" ] && left=$CHECK_BUDGET
if [ "$left" -ge 40 ]; then
    echo "== gpu_check.sh, $left s"
    DEVICE="$DEVICE" LIMIT=1 REPEATS=1 BUDGET="$left" FAMILY_TIMEOUT=45 bash benchmarks/gpu_check.sh "$WORK/check/families" \
        >"$WORK/logs/gpu-check.log" 2>&1
    echo "   exited $?"
    cat "$WORK/check/families/summary.md" 2>/dev/null
fi
tar -cf "$OUT/check.tar" -C "$WORK" check
logs
echo "== done in $((SECONDS - began)) s"
