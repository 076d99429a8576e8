#!/usr/bin/env bash
# Here, before the device call of benchmarks/h200_core.sh: build the three
# git-ignored folders it carries (about 58 MB; the call's limit is 64 MiB with
# the checkout).  Run from the repository root; needs pip, and apt for
# pyvkfft's OpenCL headers.
#   .whl/            cp312 wheels the H200 image lacks
#   .whl-fftbackend/ pyvkfft built for cp312 with only its OpenCL backend
#   .cufinufft/      cuFINUFFT packed by ../shared/tools/cufinufft/prepare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for folder in /.whl/ /.whl-fftbackend/ /.cufinufft/; do
    grep -qxF "$folder" .git/info/exclude 2>/dev/null || echo "$folder" >> .git/info/exclude
done
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
           manylinux1_x86_64 manylinux_2_24_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 any; do
    platforms+=(--platform "$tag")
done
mkdir -p .whl
# funcsigs: reikna imports it (without it reikna is absent there and the GPU FFT falls back)
for package in pyopencl pytools siphash24 platformdirs mako funcparserlib funcsigs ducc0 tqdm; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${platforms[@]}" -d .whl "$package"
done
python3 -m pip wheel -q --no-deps -w .whl reikna           # pure Python, sdist only
# pyvkfft: no binary wheel on PyPI; build the OpenCL backend only (nvcc is on
# PATH here, which would otherwise pull in its CUDA backend and fail).
if ! ls .whl-fftbackend/pyvkfft-*.whl >/dev/null 2>&1; then
    apt-get install -y -qq opencl-c-headers ocl-icd-opencl-dev >/dev/null
    mkdir -p .whl-fftbackend
    PYENV_VERSION=3.12.1 VKFFT_BACKEND=opencl python3.12 -m pip wheel -q --no-deps \
        -w .whl-fftbackend "pyvkfft==2025.1.1"
fi
[[ -d .cufinufft ]] || bash ../shared/tools/cufinufft/prepare.sh .cufinufft
du -sh .whl .whl-fftbackend .cufinufft
