#!/usr/bin/env bash
# Issue 39 on a lent NVIDIA GPU in one device call (about 5-8 minutes):
# the table Gridder's GCF read paths (buffer, image, image-linear) for real
# and complex separable tables (supports 8-256) and full W-projection tables
# (8-64, 32 w planes), register spread, four polarisations, the accuracy
# beside the speed; then the accuracy against the table's oversampling as
# the GPU's texture filter gives it (8-bit interpolation weights).  Run
# with the device tool:
#
#   carry [".whl"], command: bash benchmarks/gpu_gcf_reads.sh
#
# (.whl: the wheels of benchmarks/h200_setup.sh.)  Output: $OUT/gcf_reads_gpu.txt,
# $OUT/gcf_reads_<table>_gpu.json, $OUT/gcf_accuracy_gpu.json.
set -o pipefail
. benchmarks/h200_setup.sh || exit 1
OUT=${OUT:-.}
SEPARABLE_SUPPORTS=${SEPARABLE_SUPPORTS:-"8 16 32 64 128 256"}
FULL_SUPPORTS=${FULL_SUPPORTS:-"8 16 32 64"}
{
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
    for table in separable separable-complex full; do
        supports=$SEPARABLE_SUPPORTS
        [[ $table == full ]] && supports=$FULL_SUPPORTS
        timeout 170 python3 benchmarks/gridding.py --device nvidia --peak-gpaps 8.4e12 \
            --gpa-budget 1e12 --repeats 3 --no-peer --core-methods register \
            --table $table --supports $supports --gcf-reads buffer image image-linear \
            --json "$OUT/gcf_reads_${table}_gpu.json"
    done
    timeout 120 python3 benchmarks/gridding.py --device nvidia --accuracy-only \
        --table separable separable-complex full --supports 8 32 \
        --gcf-reads buffer image image-linear --accuracy-oversamples 2 4 8 16 32 \
        --json "$OUT/gcf_accuracy_gpu.json"
} 2>&1 | grep -v "CompilerWarning\|prg.build\|_create_built" | tee "$OUT/gcf_reads_gpu.txt"
