"""List OpenCL devices and histogram complex values with float atomics.

Runs on a laptop's Intel OpenCL CPU runtime (pip install "clgrid[intel]")
or any other device: python examples/devices_and_atomics.py [DEVICE]
"""

import sys

import numpy as np

import clgrid

for profile in clgrid.devices():
    print(f"{profile.platform_key:8s} {profile.device_name:40s} atomics: {profile.atomic_f32}")

context = clgrid.create_context(sys.argv[1] if len(sys.argv) > 1 else None)
rng = np.random.default_rng(0)
index = rng.integers(0, 100, 100_000).astype(np.uint32)
values = (rng.standard_normal(100_000) + 1j * rng.standard_normal(100_000)).astype(np.complex64)
histogram = clgrid.ScatterAdd(context, np.complex64)(index, values, n_out=100).get()
reference = clgrid.scatter_add_reference(index, values, 100)
print("max |device - float64 numpy| =", np.abs(histogram - reference).max())
