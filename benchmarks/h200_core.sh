#!/usr/bin/env bash
# The gridding core's H200 measurements in one device call (5-9 minutes;
# an H100 needs the longer end),
# for the issue-13 table in benchmarks/RESULTS.md.  Run with the device tool:
#
#   kind nvidia-h200, carry [".whl", ".whl-fftbackend", ".cufinufft"], command:
#   bash benchmarks/h200_core.sh [--fft]
#
# Needs here, before the call (all git-ignored; `bash benchmarks/h200_prepare.sh` builds them):
#   .whl/           cp312 wheels: pyopencl pytools siphash24 platformdirs mako
#                   reikna funcparserlib ducc0 (see /work/.library/device/README.md)
#   .whl-fftbackend/ pyvkfft cp312 wheel (benchmarks/RESULTS.md, "To measure on the H200")
#   .cufinufft/     bash ../shared/tools/cufinufft/prepare.sh .cufinufft
# Output: $OUT/core_h200.txt (stage profiles and the imaging table),
#         $OUT/imaging_h200.json, and with --fft $OUT/fft_h200.json.
set -o pipefail
. benchmarks/h200_peers.sh || exit 1
{
    if [[ "${1:-}" == --fft ]]; then
        timeout 120 python3 benchmarks/fft.py --device nvidia --large --json "$OUT/fft_h200.json"
    fi
    timeout 100 python3 benchmarks/profile_core.py --device nvidia --repeats 3
    [[ "${1:-}" == --one-block ]] && timeout 100 python3 benchmarks/profile_core.py --device nvidia --repeats 3 --vis-per-block 0
    timeout 150 python3 benchmarks/profile_core.py --device nvidia --repeats 2 --w
    timeout 330 python3 benchmarks/imaging.py --device nvidia --no-vla --epsilon 1e-5 1e-4 \
        --repeats 3 --json "$OUT/imaging_h200.json"
} 2>&1 | grep -v "CompilerWarning\|prg.build\|_create_built" | tee "$OUT/core_h200.txt"
