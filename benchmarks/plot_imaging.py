"""Bar chart of a `benchmarks/imaging.py` JSON: clgrid beside ducc0 and cuFINUFFT.

One panel per direction (vis2dirty, dirty2vis); per case (epsilon, w) the
seconds of clgrid end to end and device-resident, ducc0, and cuFINUFFT end to
end and on the device where the run had it, on a log axis.  Run
``python benchmarks/plot_imaging.py results/imaging_h200_pinned_2026-11-26.json
--title "..." --output docs/images/imaging_h200.png``.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

#: (JSON key suffix, legend label, colour) per bar, in order
SERIES = (("e2e", "clgrid, end to end", "#1f77b4"),
          ("dev", "clgrid, data on the device", "#aec7e8"),
          ("ducc0", "ducc0, all host cores", "#d62728"),
          ("cufi", "cuFINUFFT, end to end", "#2ca02c"),
          ("cufi dev", "cuFINUFFT, execute only", "#98df8a"))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="output of benchmarks/imaging.py --json")
    parser.add_argument("--output", required=True, help="PNG to write")
    parser.add_argument("--title", default="")
    return parser.parse_args(argv)


def _seconds(row: dict, direction: str, series: str) -> float:
    key = {"e2e": f"{direction} e2e", "dev": f"{direction} dev",
           "ducc0": f"ducc0 {direction}", "cufi": f"cufi {direction}",
           "cufi dev": f"cufi {direction} dev"}[series]
    value = row.get(key)
    return float(value) if value not in (None, "") else np.nan


def main(argv=None) -> int:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    args = parse_args(argv)
    with open(args.json) as handle:
        rows = json.load(handle)["rows"]
    labels = [f"eps {row['epsilon']:g}\n{'w' if row['w'] else 'no w'}" for row in rows]
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    width = 0.8 / len(SERIES)
    for axis, (direction, name) in zip(axes, (("v2d", "vis2dirty"), ("d2v", "dirty2vis"))):
        for k, (series, label, colour) in enumerate(SERIES):
            values = [_seconds(row, direction, series) for row in rows]
            if np.all(np.isnan(values)):
                continue
            axis.bar(np.arange(len(rows)) + (k - len(SERIES) / 2 + 0.5) * width,
                     values, width, label=label, color=colour)
        axis.set_xticks(np.arange(len(rows)), labels)
        axis.set_yscale("log")
        axis.set_title(name)
        axis.grid(axis="y", which="both", alpha=0.3)
    axes[0].set_ylabel("seconds per call (log)")
    handles, names = axes[0].get_legend_handles_labels()
    figure.legend(handles, names, fontsize=8, loc="lower center", ncol=len(names))
    if args.title:
        figure.suptitle(args.title, fontsize=10)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
