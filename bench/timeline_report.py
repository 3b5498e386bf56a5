"""Summarize the timelines bench/dropin.py --timeline DIR wrote (bench/timeline/sitecustomize.py).

    python bench/timeline_report.py DIR [--gap 0.3]

    python bench/timeline_report.py DIR --chain [--min 0.05]

    python bench/timeline_report.py DIR --samples [--top 12 --depth 10]

    python bench/timeline_report.py DIR --functions [--top 40]

Per process that compiled: each stage's calls, total and longest seconds (calls on several
threads overlap, so totals may exceed the wall time), and the bursts of kernel compiles that
Inductor handed its pool (a pause longer than --gap seconds starts a new one), each with its
kernels, its span from the first start to the last end, and the longest single compile.
With --chain: each process's main-thread stages in time order, on one clock for all of them
(seconds since the first process began compiling), to follow the critical path across ranks.
With --samples: the stacks sampled in the stages KILN_TIMELINE_SAMPLE named, per process and stage,
the most frequent first, each cut to its innermost --depth frames (a sample is 5 ms).
With --functions: per process and sampled stage, the functions in the most samples, each counted
once per sample however often it recurs in the stack (its inclusive share of the stage).
Times are wall seconds; "cpu" is the calling thread's own CPU time in the same calls, which falls
short of the wall time by what the thread waited for (the GIL among them).
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os

TASK = "kiln.dropin.inductor._compile_triton_here"


def _cpu(event) -> float | None:
    """The thread's CPU seconds in the call (timelines before it was recorded have none)."""
    return event[4] if len(event) > 4 else None


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def stage_rows(events: list) -> list[tuple[str, int, float, float, float | None]]:
    totals = collections.defaultdict(lambda: [0, 0.0, 0.0, None])
    for event in events:
        stage, _thread, start, end = event[:4]
        row = totals[stage]
        row[0] += 1
        row[1] += end - start
        row[2] = max(row[2], end - start)
        if _cpu(event) is not None:
            row[3] = (row[3] or 0.0) + _cpu(event)
    return sorted(((stage, n, total, longest, cpu) for stage, (n, total, longest, cpu) in totals.items()),
                  key=lambda row: -row[2])


def bursts(events: list, gap: float) -> list[dict]:
    """Inductor's kernel compiles grouped by time: a new burst after `gap` seconds without one."""
    tasks = sorted((event[2], event[3]) for event in events if event[0] == TASK)
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
        out += [f"### {os.path.basename(path)}", "", "| stage | calls | total (s) | cpu (s) | longest (s) |",
                "|---|---:|---:|---:|---:|"]
        out += [f"| {stage} | {n} | {total:.3f} | {_seconds(cpu)} | {longest:.3f} |"
                for stage, n, total, longest, cpu in stage_rows(events)]
        out += ["", "| burst | kernels | from (s) | to (s) | span (s) | longest compile (s) |", "|---:|---:|---:|---:|---:|---:|"]
        out += [f"| {i} | {b['kernels']} | {b['first_start']:.2f} | {b['last_end']:.2f} | "
                f"{b['last_end'] - b['first_start']:.2f} | {b['longest']:.2f} |" for i, b in enumerate(bursts(events, gap), 1)]
        out.append("")
    return "\n".join(out) if out else "no process compiled a kernel"


def chain(directory: str, shortest: float) -> str:
    """Each process's main-thread calls of at least `shortest` seconds, on the clock of the first
    compile any process began (Dynamo's `_compile`)."""
    runs = []
    for path in sorted(glob.glob(os.path.join(directory, "timeline-*.json"))):
        with open(path) as f:
            data = json.load(f)
        if "start" in data:
            runs.append((os.path.basename(path), data["start"], data["events"]))
    starts = [t0 + event[2] for _name, t0, events in runs for event in events if event[0].endswith("._compile")]
    if not starts:
        return "no process compiled a graph"
    zero, out = min(starts), []
    for name, t0, events in runs:
        own = sorted((event[2], event[3], _cpu(event), event[0]) for event in events
                     if event[1] == "MainThread" and event[3] - event[2] >= shortest)
        out += [f"### {name}", "", "| from (s) | to (s) | span (s) | cpu (s) | stage |", "|---:|---:|---:|---:|---|"]
        out += [f"| {t0 + b - zero:.2f} | {t0 + e - zero:.2f} | {e - b:.2f} | {_seconds(cpu)} | {stage} |"
                for b, e, cpu, stage in own]
        out.append("")
    return "\n".join(out)


def sampled(directory: str, top: int, depth: int) -> str:
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "timeline-*.json"))):
        with open(path) as f:
            samples = json.load(f).get("samples") or {}
        for stage, stacks in sorted(samples.items()):
            cut = collections.Counter()
            for stack, n in stacks.items():
                cut[" ; ".join(stack.split(";")[-depth:])] += n
            out += [f"### {os.path.basename(path)}: {stage}, {sum(cut.values())} samples", ""]
            out += [f"- {n}: {stack}" for stack, n in cut.most_common(top)]
            out.append("")
    return "\n".join(out) if out else "no samples (KILN_TIMELINE_SAMPLE)"


def functions(directory: str, top: int) -> str:
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "timeline-*.json"))):
        with open(path) as f:
            samples = json.load(f).get("samples") or {}
        for stage, stacks in sorted(samples.items()):
            inclusive, total = collections.Counter(), sum(stacks.values())
            for stack, n in stacks.items():
                for function in {frame.rsplit(":", 1)[0] for frame in stack.split(";")}:
                    inclusive[function] += n
            out += [f"### {os.path.basename(path)}: {stage}, {total} samples", "",
                    "| samples | share | function |", "|---:|---:|---|"]
            out += [f"| {n} | {n / total:.0%} | {function} |" for function, n in inclusive.most_common(top)]
            out.append("")
    return "\n".join(out) if out else "no samples (KILN_TIMELINE_SAMPLE)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds without a compile that end a burst")
    parser.add_argument("--chain", action="store_true", help="each process's main-thread stages on one clock")
    parser.add_argument("--min", type=float, default=0.05, help="--chain: leave out calls shorter than this (s)")
    parser.add_argument("--samples", action="store_true", help="the sampled stages' most frequent stacks")
    parser.add_argument("--functions", action="store_true", help="the sampled stages' functions by inclusive share")
    parser.add_argument("--top", type=int, default=12, help="--samples, --functions: rows per stage")
    parser.add_argument("--depth", type=int, default=10, help="--samples: innermost frames kept of each")
    args = parser.parse_args()
    if args.samples:
        print(sampled(args.directory, args.top, args.depth))
    elif args.functions:
        print(functions(args.directory, args.top))
    else:
        print(chain(args.directory, args.min) if args.chain else report(args.directory, args.gap))


if __name__ == "__main__":
    main()
