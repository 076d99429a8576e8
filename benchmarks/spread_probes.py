"""Where the GPU spread kernel's time goes, by subtraction: the register
kernel (``templates/core_spread.cl.mako``, kernel ``spread``, ES source) timed
with one part of its work taken out, on the observation of spread_tiles.py.
The images of a probe are wrong on purpose; only the times mean something.
No profiler reads NVIDIA's OpenCL kernels, hence this.

    python benchmarks/spread_probes.py --probe cheap-kernel -- --device nvidia --w both

Probes (each a text change to a copy of the templates, in this process only):

* ``none``: the kernel as shipped (the baseline of the same run);
* ``cheap-kernel``: the staged kernel values from one multiply-add instead of
  the ES formula (exp and sqrt): what evaluating the kernel costs;
* ``few-adds``: each group adds only the first point of every staged batch:
  what the register accumulation costs;
* ``no-value-loads``: the fractions and values of staged points are constants
  (cells are still read for the footprint test): what those loads cost.

The arguments after ``--`` go to spread_tiles.py (default: its default tile).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mako.lookup import TemplateLookup  # noqa: E402

import clgrid.device.kernels as kernels  # noqa: E402
import spread_tiles  # noqa: E402

#: probe -> (text in core_spread.cl.mako, its replacement)
PROBES = {
    "none": [],
    "cheap-kernel": [
        ("s_ku[tid][a] = es_kernel(xu + (${real})a);",
         "s_ku[tid][a] = xu * (${real})0.01 + (${real})a;"),
        ("s_kv[tid][a] = value * es_kernel(xv + (${real})a);",
         "s_kv[tid][a] = value * (xv * (${real})0.01 + (${real})a);")],
    "few-adds": [
        ("            for (int p = group; p < n_here; p += GROUPS) {\n"
         "                const int b = lane - s_dv[p];",
         "            for (int p = group; p < min(n_here, GROUPS); p += GROUPS) {\n"
         "                const int b = lane - s_dv[p];")],
    "no-value-loads": [
        ("                    const ${real}4 t = fracs[base + tid];\n"
         "                    const ${real} xu = t.x - HALF_SUPPORT, xv = t.y - HALF_SUPPORT;\n"
         "                    ${vec} value = values[base + tid];",
         "                    const ${real}4 t = (${real}4)((${real})0.25);\n"
         "                    const ${real} xu = t.x - HALF_SUPPORT, xv = t.y - HALF_SUPPORT;\n"
         "                    ${vec} value = (${vec})((${real})1, (${real})0);")],
}


def patched_templates(probe: str) -> Path:
    """A copy of the templates with ``probe``'s changes, each checked to apply once."""
    folder = Path(tempfile.mkdtemp(prefix="clgrid-probe-"))
    shutil.copytree(kernels.templates_dir(), folder, dirs_exist_ok=True)
    source = folder / "core_spread.cl.mako"
    text = source.read_text()
    for old, new in PROBES[probe]:
        if text.count(old) != 1:
            raise SystemExit(f"probe {probe!r}: its text is not in the template once: {old!r}")
        text = text.replace(old, new)
    source.write_text(text)
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", choices=sorted(PROBES), default="none")
    args, rest = parser.parse_known_args(argv)
    rest = [part for part in rest if part != "--"]
    kernels._lookup = TemplateLookup(directories=[str(patched_templates(args.probe))],
                                     strict_undefined=True, filesystem_checks=False)
    print(f"probe {args.probe}", flush=True)
    return spread_tiles.main(rest)


if __name__ == "__main__":
    sys.exit(main())
