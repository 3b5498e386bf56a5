"""Summarize the timelines bench/dropin.py --timeline DIR wrote (bench/timeline/sitecustomize.py).

    python bench/timeline_report.py DIR [--gap 0.3]

Per process that compiled: each stage's calls, total and longest seconds (calls on several
threads overlap, so totals may exceed the wall time), and the bursts of kernel compiles that
Inductor handed its pool (a pause longer than --gap seconds starts a new one), each with its
kernels, its span from the first start to the last end, and the longest single compile.
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os

TASK = "kiln.dropin.inductor._compile_triton_here"


def stage_rows(events: list) -> list[tuple[str, int, float, float]]:
    totals = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for stage, _thread, start, end in events:
        row = totals[stage]
        row[0] += 1
        row[1] += end - start
        row[2] = max(row[2], end - start)
    return sorted(((stage, n, total, longest) for stage, (n, total, longest) in totals.items()),
                  key=lambda row: -row[2])


def bursts(events: list, gap: float) -> list[dict]:
    """Inductor's kernel compiles grouped by time: a new burst after `gap` seconds without one."""
    tasks = sorted((start, end) for stage, _thread, start, end in events if stage == TASK)
    groups: list[list] = []
    for start, end in tasks:
        if groups and start - max(e for _s, e in groups[-1]) <= gap:
            groups[-1].append((start, end))
        else:
            groups.append([(start, end)])
    return [{"kernels": len(g), "first_start": g[0][0], "last_end": max(e for _s, e in g),
             "longest": max(e - s for s, e in g)} for g in groups]


def report(directory: str, gap: float) -> str:
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "timeline-*.json"))):
        with open(path) as f:
            events = json.load(f)["events"]
        if not any(stage == TASK for stage, *_ in events):
            continue  # a process that compiled nothing (it loaded what another compiled)
        out += [f"### {os.path.basename(path)}", "", "| stage | calls | total (s) | longest (s) |", "|---|---:|---:|---:|"]
        out += [f"| {stage} | {n} | {total:.3f} | {longest:.3f} |" for stage, n, total, longest in stage_rows(events)]
        out += ["", "| burst | kernels | from (s) | to (s) | span (s) | longest compile (s) |", "|---:|---:|---:|---:|---:|---:|"]
        out += [f"| {i} | {b['kernels']} | {b['first_start']:.2f} | {b['last_end']:.2f} | "
                f"{b['last_end'] - b['first_start']:.2f} | {b['longest']:.2f} |" for i, b in enumerate(bursts(events, gap), 1)]
        out.append("")
    return "\n".join(out) if out else "no process compiled a kernel"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds without a compile that end a burst")
    args = parser.parse_args()
    print(report(args.directory, args.gap))


if __name__ == "__main__":
    main()
