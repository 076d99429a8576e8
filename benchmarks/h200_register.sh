#!/usr/bin/env bash
# Table Gridder fraction of fp32 peak on the H200 (issue 13's >= 50% target):
# the register spread (native PTX atomics) at several geometries ('auto': the
# tuning cache, else the defaults) beside the tile spread (supports <= 33),
# full W-projection and separable tables (real and complex), in one device
# call (under 10 minutes).  Run with the device tool:
#
#   kind nvidia-h200, carry [".whl"], command: bash benchmarks/h200_register.sh
#
# Output: $OUT/register_h200.txt and $OUT/gridding_{full,separable,separable-complex}_h200.json
# (each table within 190 s, so that the call fits the device's 10-minute limit).
set -o pipefail
CLGRID_WHEELS=.whl . benchmarks/h200_setup.sh || exit 1
export PYTHONWARNINGS=ignore
GEOMETRIES=${GEOMETRIES:-"auto 2,2,256,64,2048 4,2,128,64,2048 4,4,64,64,2048"}
FULL_SUPPORTS=${FULL_SUPPORTS:-"8 16 32 64"}
SEPARABLE_SUPPORTS=${SEPARABLE_SUPPORTS:-"64 128 256"}
{
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
    # separable: the real ES table; separable-complex: the same rows times a
    # phase ramp (complex weights)
    for table in full separable separable-complex; do
        supports=$FULL_SUPPORTS
        [[ $table == separable* ]] && supports=$SEPARABLE_SUPPORTS
        timeout 190 python3 benchmarks/gridding.py --device nvidia --peak-gpaps 8.4e12 \
            --gpa-budget 1e12 --repeats 3 --table $table --supports $supports \
            --atomics native-ptx --register $GEOMETRIES \
            --json "$OUT/gridding_${table}_h200.json"
    done
} 2>&1 | grep -v "CompilerWarning\|prg.build\|_create_built" | tee "$OUT/register_h200.txt"
