#!/usr/bin/env bash
# Issue 39 on a lent NVIDIA GPU: the table Gridder's GCF read paths (buffer,
# image, image-linear) for real and complex separable tables (supports
# 8-256) and full W-projection tables (8-64, 32 w planes), register spread,
# four polarisations, the accuracy beside the speed; "accuracy": the
# accuracy against the table's oversampling as the GPU's texture filter
# gives it (8-bit interpolation weights).  Arguments: what to run (default
# all; each table takes up to 280 s, so use three device calls of at most
# 10 minutes each):
#
#   carry [".whl"], command: bash benchmarks/gpu_gcf_reads.sh separable
#   carry [".whl"], command: bash benchmarks/gpu_gcf_reads.sh separable-complex
#   carry [".whl"], command: bash benchmarks/gpu_gcf_reads.sh full accuracy
#
# (.whl: the wheels of benchmarks/h200_prepare.sh.)  Output: $OUT/gcf_reads_<parts>_gpu.txt,
# $OUT/gcf_reads_<table>_gpu.json, $OUT/gcf_accuracy_gpu.json.
set -o pipefail
. benchmarks/h200_setup.sh || exit 1
OUT=${OUT:-.}
SEPARABLE_SUPPORTS=${SEPARABLE_SUPPORTS:-"8 16 32 64 128 256"}
FULL_SUPPORTS=${FULL_SUPPORTS:-"8 16 32 64"}
parts=("$@")
[[ ${#parts[@]} -eq 0 ]] && parts=(separable separable-complex full accuracy)
name=$(IFS=_; echo "${parts[*]}")
{
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
    for part in "${parts[@]}"; do
        if [[ $part == accuracy ]]; then
            timeout 150 python3 benchmarks/gridding.py --device nvidia --accuracy-only \
                --table separable separable-complex full --supports 8 32 \
                --gcf-reads buffer image image-linear --accuracy-oversamples 2 4 8 16 32 \
                --json "$OUT/gcf_accuracy_gpu.json"
            continue
        fi
        supports=$SEPARABLE_SUPPORTS
        [[ $part == full ]] && supports=$FULL_SUPPORTS
        timeout 280 python3 benchmarks/gridding.py --device nvidia --peak-gpaps 8.4e12 \
            --gpa-budget 1e12 --repeats 3 --no-peer --core-methods register \
            --table "$part" --supports $supports --gcf-reads buffer image image-linear \
            --json "$OUT/gcf_reads_${part}_gpu.json"
    done
} 2>&1 | grep -v "CompilerWarning\|prg.build\|_create_built" | tee "$OUT/gcf_reads_${name}_gpu.txt"
