"""Where and how a benchmark writes its figures: DIR/<stem>.json (the data) and
DIR/<stem>.md (the table the README quotes)."""
from __future__ import annotations

import json
import os


def stem(date, machine: str, kind: str = "") -> str:
    """`<date>-<machine>[-<kind>]`, spaces in the machine's name as underscores."""
    return f"{date}-{machine.replace(' ', '_')}" + (f"-{kind}" if kind else "")


def save(out_dir: str, stem: str, data, markdown: str) -> str:
    """Write `data` and `markdown` beside each other; returns the path without suffix."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, stem)
    with open(path + ".json", "w") as f:
        json.dump(data, f, indent=1)
    with open(path + ".md", "w") as f:
        f.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return path


def save_today(out_dir: str, kind: str, data, markdown: str) -> str:
    """`save` under today's stem for this process's GPU (the benchmarks that run on one)."""
    import datetime

    import torch
    return save(out_dir, stem(datetime.date.today().isoformat(), torch.cuda.get_device_name(), kind), data, markdown)


def report(out_dir: str | None, kind: str, lines: list[str], rows: list) -> str:
    """Print a benchmark's markdown table (`lines`) and, with `out_dir`, save it beside its `rows`
    with the machine, the date and the versions of torch and Triton that ran them."""
    import datetime

    import torch
    text = "\n".join(lines) + "\n"
    print(text)
    if out_dir:
        import triton
        results = {"gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
                   "torch": torch.__version__, "triton_version": triton.__version__, "rows": rows}
        save_today(out_dir, kind, results, text)
    return text
