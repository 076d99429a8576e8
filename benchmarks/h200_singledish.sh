#!/usr/bin/env bash
# Single-dish benchmark on the lent H200 machine against cygrid on its cores.
# cygrid's wheels need numpy < 2 and the image has numpy 2, so two runs on
# the same machine in one call: clgrid alone in the image's numpy 2 with
# healpy's compiled ang2pix, then clgrid (numpy ang2pix) and cygrid side by
# side in a numpy 1.26 environment.  Wheels carried in .whl-sd/{common,np1,hp}.
#   bash benchmarks/h200_singledish.sh "--samples 1.5e8 --cells 90 --order random" tag
#   SKIP_CYGRID=1 bash ...   runs the first (healpy) part only
set -e
rm -rf /tmp/site /tmp/np1 /tmp/hp   # a warm machine keeps an earlier call's packages
CLGRID_WHEELS=.whl-sd/common . benchmarks/h200_setup.sh >/dev/null
install() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$1" "${@:2}"; }
install /tmp/np1 .whl-sd/np1/*.whl
install /tmp/hp .whl-sd/hp/*.whl
cases=$1
tag=${2:-run}
PYTHONPATH=/tmp/site:/tmp/hp:$PWD python3 benchmarks/singledish.py --device nvidia --no-cygrid \
    $cases --json "${OUT:-.}/sd_h200_${tag}_healpy.json" 2>&1 | grep -v Warn
[ -n "$SKIP_CYGRID" ] && exit 0
PYTHONPATH=/tmp/np1:/tmp/site:$PWD python3 benchmarks/singledish.py --device nvidia \
    $cases --json "${OUT:-.}/sd_h200_${tag}_cygrid.json" 2>&1 | grep -v Warn
