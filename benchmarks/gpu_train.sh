#!/usr/bin/env bash
# Train dcode-tiny further on a CUDA GPU, from data packed on the CPU machine.
#
# What it needs: a checkout of dcode with Python, torch (CUDA) and transformers, and the packed data
# beside the tree (about 17 MB, ignored by git):
#     python -m dcode.train pack --out .train/gpu
# How to run it, on the GPU machine, from the checkout:
#     OUT=/path/to/results bash benchmarks/gpu_train.sh
# What it prints: the GPU, torch's and transformers' versions, then fit's progress and the export.
# Back on the CPU machine, the returned folder becomes a CPU run that can keep training, and the export:
#     python -m dcode.train fit --run .train/run-gpu --init <results>/dcode-tiny --minutes 0
#     python -m dcode.train export --run .train/run-gpu
#
# It starts from the shipped weights (INIT) with a fresh optimizer, trains block diffusion for
# MINUTES on DEVICE in bfloat16 autocast with BATCH rows per step, and writes to $OUT: the best
# weights as a float16 model folder (14 MB), the log and fit's output.
# Every setting can be overridden from the environment (the tests run it on the CPU, tiny).
set -euo pipefail
: "${OUT:?set OUT to the folder the results go to}"
DATA=${DATA:-.train/gpu}
INIT=${INIT:-dcode/assets/dcode-tiny}
DEVICE=${DEVICE:-cuda}
BATCH=${BATCH:-256}
CANVASES=${CANVASES:-64,128,256,512}
MINUTES=${MINUTES:-7}
RUN=${RUN:-/tmp/dcode-gpu-run}
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p "$OUT"

if [ "$DEVICE" != cpu ]; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true; fi
"$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
"$PYTHON" -m dcode.train fit --data "$DATA" --run "$RUN" --init "$INIT" --device "$DEVICE" \
    --batch "$BATCH" --canvases "$CANVASES" --ar-tokens 0 --minutes "$MINUTES" 2>&1 | tee "$OUT/fit.log"
"$PYTHON" -m dcode.train export --data "$DATA" --run "$RUN" --device "$DEVICE" --out "$OUT/dcode-tiny" \
    --dtype float16 2>&1 | tee -a "$OUT/fit.log"
cp "$RUN/log.jsonl" "$OUT/log.jsonl"
