#!/usr/bin/env bash
# Issue 35 on a lent GPU in one device call (about 6-8 minutes on an H100):
# the call users make in each style (queue=, context=, no device argument)
# beside queue=, with and without w, 20 calls in a row each, then the
# imaging table with the peers.  Run with the device tool:
#
#   carry [".whl", ".whl-fftbackend", ".cufinufft"], command:
#   bash benchmarks/gpu_calls.sh
#
# Needs the folders benchmarks/h200_prepare.sh builds.  Output:
# $OUT/calls_gpu.txt, $OUT/call_styles_gpu.json, $OUT/imaging_calls_gpu.json.
set -o pipefail
. benchmarks/h200_peers.sh || exit 1
{
    nvidia-smi --query-gpu=name,memory.total --format=csv
    timeout 280 python3 benchmarks/call_styles.py --device nvidia --calls 20 \
        --json "$OUT/call_styles_gpu.json"
    timeout 280 python3 benchmarks/imaging.py --device nvidia --no-vla --epsilon 1e-5 \
        --repeats 3 --json "$OUT/imaging_calls_gpu.json"
} 2>&1 | grep -v "CompilerWarning\|prg.build\|_create_built" | tee "$OUT/calls_gpu.txt"
