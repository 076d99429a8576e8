#!/usr/bin/env bash
# The streaming-store lead (benchmarks/RESULTS.md, "Host copies with glibc's
# streaming stores") on a lent GPU, in one device call (about 2 minutes on an
# H100): host copy rates, then one Imager's vis2dirty from numpy and from
# pinned memory (trace_call.py), alternating without and with
# GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=0x100000.  Run with the
# device tool:
#
#   carry [".whl-slim", ".whl-fftbackend"], command:
#   CLGRID_WHEELS=.whl-slim bash benchmarks/gpu_host_copies.sh
#
# Output: $OUT/host_copies_gpu.txt.
set -o pipefail
. benchmarks/h200_setup.sh > /tmp/setup.log 2>&1 || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    .whl-fftbackend/*.whl 2>/dev/null
export PYTHONWARNINGS=ignore
streaming=glibc.cpu.x86_non_temporal_threshold=0x100000
{
    nvidia-smi --query-gpu=name --format=csv,noheader
    ldd --version | head -1
    for tunables in "" "$streaming"; do
        GLIBC_TUNABLES=$tunables python3 benchmarks/host_copy.py --mbytes 1024 \
            --threads 1 8 16 --chunks-mib 1 8 32 --repeats 3
    done
    for tunables in "" "$streaming" "" "$streaming"; do
        GLIBC_TUNABLES=$tunables timeout 120 python3 benchmarks/trace_call.py --device nvidia \
            --repeats 5 --label "GLIBC_TUNABLES=$tunables" | grep median | sed 's/; median call.*//'
    done
} 2>&1 | tee "${OUT:-.}/host_copies_gpu.txt"
