#!/usr/bin/env bash
# Single-dish benchmark on the lent H200 machine.  clgrid runs in the image's
# numpy 2 with the carried wheels (.whl: pyopencl and friends); it needs
# nothing else since the pre-ordering moved to the device.  cygrid's wheels
# need numpy < 2: when .whl-sd/np1 holds numpy 1.26 + astropy 6.1 + cygrid
# wheels (and SKIP_CYGRID is unset), a second run puts cygrid beside clgrid in
# that environment on the same machine.
#   bash benchmarks/h200_singledish.sh "--samples 1.5e8 --cells 90 --order random" tag
set -e
rm -rf /tmp/site /tmp/np1   # a warm machine keeps an earlier call's packages
CLGRID_WHEELS=${CLGRID_WHEELS:-.whl} . benchmarks/h200_setup.sh >/dev/null
cases=$1
tag=${2:-run}
python3 benchmarks/singledish.py --device nvidia --no-cygrid $cases \
    --json "${OUT:-.}/sd_h200_${tag}.json" 2>&1 | grep -v Warn
if [ -z "$SKIP_CYGRID" ] && [ -d .whl-sd/np1 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target /tmp/np1 .whl-sd/np1/*.whl
    PYTHONPATH=/tmp/np1:/tmp/site:$PWD python3 benchmarks/singledish.py --device nvidia \
        $cases --json "${OUT:-.}/sd_h200_${tag}_cygrid.json" 2>&1 | grep -v Warn
fi
