"""Two results folders of the same tasks side by side (each one's committed data/, as benchmark/report.py keeps it):
per task, each folder's mean ± sample std (ddof 1) over seeds of the score (the mean return of a run's last episodes,
as the report scores it), its seeds' scores, whether the second folder's mean lies within the first's seeds' range,
and the second's mean minus the first's with its 95% percentile-bootstrap interval (each folder's seeds resampled).

    python benchmark/compare_results.py benchmark/results/mujoco benchmark/results/mujoco-seeds --variant default
"""

import argparse
import sys
from pathlib import Path

from report_data import read_data, summarize  # beside this file
from report_stats import difference_interval
from report_tables import mean_std


def scores(folder: Path, variant: str, last: int):
    tables = read_data(folder / "data")
    if tables is None:
        sys.exit(f"error: {folder}/data holds no runs; pass a results folder written by benchmark/report.py")
    runs = summarize(tables, last)
    return runs[runs["variant"] == variant]


def short(score):
    return f"{score:.0f}" if abs(score) >= 100 else f"{score:.1f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", help="a results folder (the baseline)")
    parser.add_argument("second", help="a results folder of the same tasks")
    parser.add_argument("--variant", default="default", help="the variant compared in both")
    parser.add_argument("--last", type=int, default=100, help="episodes at the end of each run that make its score")
    args = parser.parse_args(argv)
    first, second = (scores(Path(folder), args.variant, args.last) for folder in (args.first, args.second))
    names = Path(args.first).name, Path(args.second).name
    lines = [
        (
            f"| task | {names[0]}: mean ± sample std (seeds) | {names[1]}: mean ± sample std (seeds) | "
            f"{names[1]}'s mean within {names[0]}'s seeds' range | {names[1]} - {names[0]} [95% CI] |"
        ),
        "| --- | ---: | ---: | --- | ---: |",
    ]
    for env_id in sorted(set(first["env_id"]) & set(second["env_id"])):
        a, b = (runs[runs["env_id"] == env_id].sort_values("seed") for runs in (first, second))
        cells = [f"{mean_std(r['score'])} ({', '.join(map(short, r['score']))})" for r in (a, b)]
        low, high, mean = a["score"].min(), a["score"].max(), b["score"].mean()
        where = "yes" if low <= mean <= high else ("above" if mean > high else "below")
        d_low, d_high = difference_interval(b["score"], a["score"])
        difference = f"{short(mean - a['score'].mean())} [{short(d_low)}, {short(d_high)}]"
        lines.append(f"| {env_id} | {cells[0]} | {cells[1]} | {where} ({short(low)} to {short(high)}) | {difference} |")
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
