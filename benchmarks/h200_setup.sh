#!/usr/bin/env bash
# Environment for the lent H200 machine (no package registry there): install
# the carried wheels from .whl/ (or $CLGRID_WHEELS) into /tmp/site and register NVIDIA's OpenCL
# driver (not registered with the ICD loader on that image), keeping the
# system's own drivers (PoCL 5) visible too.  Source it:
#   . benchmarks/h200_setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site ${CLGRID_WHEELS:-.whl}/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/icd
cp /etc/OpenCL/vendors/*.icd /tmp/icd/ 2>/dev/null
library=$(find / -name 'libnvidia-opencl.so*' -not -path '/proc/*' 2>/dev/null | head -1)
echo "$library" > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd
export PYTHONUNBUFFERED=1
