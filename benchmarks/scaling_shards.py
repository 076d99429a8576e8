"""Where multi-GPU vis2dirty loses its scaling: each shard of a two-device
MultiDeviceImager timed alone and both at once, from host arrays (pinned
staging included) and from device-resident visibilities.  SKA-mid case of
benchmarks/scaling.py (116 M visibilities, 4096^2, epsilon 1e-5), w and no w.

    python3 benchmarks/scaling_shards.py      # needs two GPUs (nvidia-h200-x2)
"""
import sys, time, numpy as np, pyopencl as cl, pyopencl.array as cla, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, ".")
from benchmarks.scaling import imaging_observation
from clgrid.scaleout.multidevice import MultiDeviceImager, _take
from clgrid.scaleout.partition import all_gpus_or_best
from clgrid.gridders.uvprep import SPEED_OF_LIGHT_M_S
uvw, freq, _ = imaging_observation(False)
cell = 1.0 / (3.0 * np.hypot(uvw[:, 0], uvw[:, 1]).max() * freq.max() / SPEED_OF_LIGHT_M_S)
vis = (np.random.default_rng(1).standard_normal((uvw.shape[0], freq.size)) * (1 + 1j)).astype(np.complex64)
devs = all_gpus_or_best()
for do_w in (True, False):
    m = MultiDeviceImager(devs[:2], uvw=uvw, freq=freq, npix_x=4096, npix_y=4096, pixsize_x=cell, pixsize_y=cell, epsilon=1e-5, do_wgridding=do_w)
    pieces = [_take(vis, r) for r in m.shard_rows]
    dev = [cla.to_device(s.queue, p) for s, p in zip(m.shards, pieces)]
    def best(f, n=3):
        f(); ts = []
        for _ in range(n):
            t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
        return min(ts) * 1e3
    for name, call in (("host", lambda d: m.shards[d].vis2dirty(pieces[d])),
                       ("device", lambda d: (m.shards[d].vis2dirty_device(dev[d]), m.shards[d].queue.finish()))):
        a = best(lambda: call(0)); b = best(lambda: call(1)); both = best(lambda: m._map(call))
        print(f"w={do_w} {name}: shard0 alone {a:.1f} ms, shard1 alone {b:.1f} ms, both at once {both:.1f} ms", flush=True)
    m.close()
