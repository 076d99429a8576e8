#!/usr/bin/env bash
# benchmarks/h200_setup.sh plus what the imaging benchmarks compare with on
# the lent GPU machine: pyvkfft (.whl-fftbackend/), ducc0 (in .whl/) and
# cuFINUFFT (.cufinufft/); carry [".whl", ".whl-fftbackend", ".cufinufft"].
# Source it:
#   . benchmarks/h200_peers.sh && python3 benchmarks/imaging.py --device nvidia ...
CLGRID_WHEELS=.whl . benchmarks/h200_setup.sh || return 1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
    .whl-fftbackend/*.whl || echo "h200_peers: no pyvkfft wheel; reikna only"
python3 -c "import ctypes; ctypes.CDLL('libOpenCL.so.1')" 2>/dev/null || {
    ln -sf /tmp/site/pyopencl/.libs/libOpenCL-*.so.1.0.0 /tmp/site/libOpenCL.so.1
    export LD_LIBRARY_PATH=/tmp/site:${LD_LIBRARY_PATH:-}; }
eval "$(bash .cufinufft/install.sh)" || echo "h200_peers: cuFINUFFT not installed"
export PYTHONWARNINGS=ignore
