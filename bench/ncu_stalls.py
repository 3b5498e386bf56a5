"""The instructions a kernel's warps stalled at most, from an ncu report's source page (SASS), where the
summary's stall reasons do not say which instruction:

    ncu --section WarpStateStats --section SourceCounters -o report ...   # then:
    ncu --import report.ncu-rep --page source --print-source sass --csv > source.csv
    python bench/ncu_stalls.py source.csv [--top 30]

Prints each of the top instructions' share of the sampled stalls, its address and SASS, and its largest
stall reasons (the per-reason sample columns ncu gives)."""
import argparse
import csv
import sys


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    with open(args.csv, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own messages are unquoted
    header = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), 0)  # after "Kernel Name"
    rows = list(csv.DictReader(lines[header:]))
    if not rows:
        sys.exit("no source rows in " + args.csv)
    total_column = next((c for c in rows[0] if c.startswith("Warp Stall Sampling (All")), None)
    if total_column is None:
        sys.exit("no 'Warp Stall Sampling (All Samples)' column: was SourceCounters collected?")
    reasons = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(_number(r[total_column]) for r in rows) or 1.0
    for row in sorted(rows, key=lambda r: -_number(r[total_column]))[:args.top]:
        share = _number(row[total_column]) / total
        top = sorted(((_number(row[c]), c) for c in reasons), reverse=True)[:3]
        why = ", ".join(f"{c} {v:.0f}" for v, c in top if v)
        print(f"{share:6.1%}  {row.get('Address', ''):>6}  {row.get('Source', '')[:70]:70}  {why}")


if __name__ == "__main__":
    main()
