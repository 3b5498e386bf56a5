"""`kiln.profiler.viewer` (`triton.profiler.viewer` under the drop-in; `kiln-proton-viewer` or
`python -m kiln.profiler.viewer` on the command line): a profile's call tree with metrics derived
from what the session measured, as proton's viewer prints it.

    tree, metrics = viewer.parse(["tflop16/s", "time/ms"], "matmul.hatchet")
    viewer.print_tree(tree, metrics)

It reads the hatchet JSON a session writes (`[tree, devices]`; `kiln.profiler`), sums each frame's
measured metrics over its subtree (inclusive, as proton's viewer shows them), and derives:
- time/s, time/ms, time/us, time/ns: the frame's kernel time;
- avg_time/s, ... : that time over the frame's launch count;
- flop/s, gflop/s, tflop/s and flop<8|16|32|64>/s, ...: the frame's `flops<width>` over its time
  (without a width: all widths together);
- byte/s, gbyte/s, tbyte/s: the frame's `bytes` over its time.
Any other name is read as a measured metric itself (`count`, `time (ns)`, `flops16`, ...).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field

_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_PREFIXES = {"": 1.0, "g": 1e9, "t": 1e12}
_FLOP_WIDTHS = (8, 16, 32, 64)
_TIME = re.compile(r"(avg_)?time/(s|ms|us|ns)\Z")
_RATE = re.compile(r"([gt]?)(flop|byte)(8|16|32|64)?/s\Z")


@dataclass
class Frame:
    """A frame of the call tree: its name and the metrics measured in it and below it."""
    name: str
    own: dict = field(default_factory=dict)      # measured in the frame itself
    children: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)  # measured in it and below it (`_sum`)
    values: dict = field(default_factory=dict)   # the derived metrics `parse` asked for


def read(filename: str) -> tuple[Frame, list]:
    """(the root frame with inclusive metrics, the devices' properties) of a hatchet file."""
    with open(filename) as f:
        data = json.load(f)
    if not (isinstance(data, list) and data and isinstance(data[0], dict)):
        raise ValueError(f"{filename}: not a profile (expected proton's hatchet JSON: [tree, devices])")
    devices = data[1] if len(data) > 1 else []
    return _sum(_frame(data[0], filename)), devices


def _frame(node: dict, filename: str) -> Frame:
    name = (node.get("frame") or {}).get("name")
    if not isinstance(name, str):
        raise ValueError(f"{filename}: a frame without a name")
    own = {k: v for k, v in (node.get("metrics") or {}).items()
           if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "device_id"}
    return Frame(name, own, [_frame(child, filename) for child in node.get("children") or []])


def _sum(frame: Frame) -> Frame:
    """Each frame's metrics over its subtree (inclusive, as the viewer shows them)."""
    frame.metrics = dict(frame.own)
    for child in frame.children:
        for key, value in _sum(child).metrics.items():
            frame.metrics[key] = frame.metrics.get(key, 0) + value
    return frame


def derive(frame: Frame, metric: str) -> float:
    """The value of `metric` (a derived name of the module's doc, or a measured one) at `frame`;
    NaN where the frame has none of what it needs."""
    m = frame.metrics
    seconds = m.get("time (ns)", math.nan) * 1e-9
    time = _TIME.match(metric)
    if time:
        value = seconds / _TIME_UNITS[time.group(2)]
        return value / m.get("count", math.nan) if time.group(1) else value
    rate = _RATE.match(metric)
    if rate:
        prefix, kind, width = rate.groups()
        if kind == "byte":
            if width:
                raise ValueError(f"unknown metric {metric!r}: bytes have no width (byte/s, gbyte/s, tbyte/s)")
            amount = m.get("bytes", math.nan)
        elif width:
            amount = m.get(f"flops{width}", math.nan)
        else:
            found = [m[f"flops{w}"] for w in _FLOP_WIDTHS if f"flops{w}" in m]
            amount = sum(found) if found else math.nan
        return amount / seconds / _PREFIXES[prefix] if seconds else math.nan
    if metric == "util":
        raise ValueError("metric 'util' needs the GPU's peak rates, which kiln's viewer does not model")
    return float(m.get(metric, math.nan))


def parse(metrics, filename: str, include: str | None = None, exclude: str | None = None,
          threshold: float | None = None) -> tuple[Frame, list]:
    """(the tree with each frame's `metrics` in `values`, the metric names). `include` / `exclude`:
    regular expressions on frame names (a frame is kept if it or a frame below it matches
    `include`, and dropped with its subtree if it matches `exclude`); `threshold`: frames whose
    first metric is below this fraction of the root's are dropped."""
    root, _ = read(filename)
    metrics = list(metrics)
    for metric in metrics:
        derive(root, metric)  # a malformed name raises here
        if not (_TIME.match(metric) or _RATE.match(metric) or metric in _measured(root)):
            raise ValueError(f"metric {metric!r} is not in {filename}: it has {sorted(_measured(root))}; "
                             "derived: time/<s|ms|us|ns>, avg_time/..., [g|t]flop[<width>]/s, [g|t]byte/s")
    root = _filtered(root, include and re.compile(include), exclude and re.compile(exclude)) or Frame("ROOT")
    _fill(_sum(root), metrics)  # what was left out no longer counts in the frames above it
    if threshold is not None and metrics:
        floor = threshold * root.values[metrics[0]]
        root.children = [c for c in (_above(child, metrics[0], floor) for child in root.children) if c]
    return root, metrics


def _measured(frame: Frame) -> set:
    names, stack = set(), [frame]
    while stack:
        node = stack.pop()
        names.update(node.metrics)
        stack.extend(node.children)
    return names


def _fill(frame: Frame, metrics: list) -> None:
    frame.values = {metric: derive(frame, metric) for metric in metrics}
    for child in frame.children:
        _fill(child, metrics)


def _filtered(frame: Frame, include, exclude) -> Frame | None:
    if exclude is not None and exclude.search(frame.name):
        return None
    children = [c for c in (_filtered(child, include, exclude) for child in frame.children) if c]
    if include is not None and not include.search(frame.name) and not children and frame.name != "ROOT":
        return None
    return Frame(frame.name, frame.own, children)


def _above(frame: Frame, metric: str, floor: float) -> Frame | None:
    value = frame.values.get(metric, math.nan)
    if not math.isnan(value) and value < floor:
        return None
    frame.children = [c for c in (_above(child, metric, floor) for child in frame.children) if c]
    return frame


def print_tree(tree: Frame, metrics, depth: int = 100, format: str | None = None, print_sorted: bool = False,
               file=None) -> None:
    """The tree, a frame a line: its metrics' values, then its name, indented as a tree.
    `format`: "full" (the default), "file_function_line", "function_line" or "file_function" cut
    `file:line@function` names down; `print_sorted`: children by the first metric, largest first."""
    out = file or sys.stdout
    metrics = list(metrics)

    def line(frame: Frame, lead: str, branch: str, level: int):
        values = " ".join(_number(frame.values.get(m, math.nan)) for m in metrics)
        print(f"{lead}{branch}{values} {_name(frame.name, format)}", file=out)
        if level >= depth:
            return
        children = frame.children
        if print_sorted and metrics:
            children = sorted(children, key=lambda c: -_sortable(c.values.get(metrics[0], math.nan)))
        for i, child in enumerate(children):
            last = i == len(children) - 1
            line(child, lead + ("" if not branch else ("   " if branch.startswith("└") else "│  ")),
                 "└─ " if last else "├─ ", level + 1)
    line(tree, "", "", 0)
    if metrics:
        print(f"\nmetrics: {', '.join(metrics)}", file=out)


def _number(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3f}"


def _sortable(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _name(name: str, format: str | None) -> str:
    if format in (None, "full") or "@" not in name:
        return name
    location, _, function = name.rpartition("@")
    file, _, lineno = location.rpartition(":")
    short = file.rsplit("/", 1)[-1]
    return {"file_function_line": f"{short}@{function}:{lineno}", "function_line": f"{function}:{lineno}",
            "file_function": f"{short}@{function}"}.get(format, name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kiln-proton-viewer", description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--metrics", default="time/s", help="comma-separated metrics (default time/s)")
    parser.add_argument("-i", "--include", help="keep frames (and their callers) whose name matches this regex")
    parser.add_argument("-e", "--exclude", help="drop frames (and their callees) whose name matches this regex")
    parser.add_argument("-t", "--threshold", type=float, help="drop frames below this fraction of the first metric")
    parser.add_argument("-d", "--depth", type=int, default=100, help="the deepest level printed")
    parser.add_argument("-f", "--format", default="full",
                        choices=("full", "file_function_line", "function_line", "file_function"))
    parser.add_argument("--print-sorted", action="store_true", help="children by the first metric, largest first")
    parser.add_argument("-l", "--list", action="store_true", help="list the metrics the file measured")
    parser.add_argument("file")
    args = parser.parse_args(argv)
    try:
        if args.list:
            print("\n".join(sorted(_measured(read(args.file)[0]))))
            return 0
        tree, metrics = parse(args.metrics.split(","), args.file, args.include, args.exclude, args.threshold)
    except (OSError, ValueError) as error:
        print(f"kiln-proton-viewer: {error}", file=sys.stderr)
        return 2
    print_tree(tree, metrics, args.depth, args.format, args.print_sorted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
