"""The interquartile mean over tasks of two variants' scores, each task's scores normalized from the random policy (0)
to the base variant's mean (1), with rliable's 95% stratified-bootstrap intervals: how a variant (envpool's MuJoCo, say)
scores against its base (gymnasium's) across tasks whose returns have unlike scales.

    python benchmark/normalized_iqm.py benchmark/results/mujoco-envpool --base gymnasium --variant envpool \\
        --random benchmark/results/table1/data/random.csv
    python benchmark/normalized_iqm.py benchmark/results/mujoco-99 --base-results benchmark/results/mujoco \\
        --base default --variant default --random benchmark/results/table1/data/random.csv   # a rerun against a table

RESULTS is a report folder (its data/, as benchmark/report.py writes it); a run's score is report.py's (the mean of its
last --last episodes); the random policy's score is the mean return of its episodes in --random
(benchmark/random_scores.py writes such a file).
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from report_data import read_data, summarize  # beside this file
from report_stats import iqm_interval


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a report folder with data/")
    parser.add_argument("--base", required=True, help="the variant whose mean is 1 on each task")
    parser.add_argument("--variant", required=True, help="the variant set against it")
    parser.add_argument("--random", type=Path, required=True, help="the random policy's episodes (env_id, return)")
    parser.add_argument("--last", type=int, default=100, help="episodes at the end of each run that make its score")
    parser.add_argument("--base-results", type=Path, help="a report folder to read --base from (RESULTS: --variant)")
    args = parser.parse_args(argv)
    folders = [args.results] + ([args.base_results] if args.base_results else [])
    tables = [read_data(folder / "data") for folder in folders]
    for folder, table in zip(folders, tables):
        if table is None:
            parser.error(f"{folder} has no data/runs.csv; pass a report folder (benchmark/report.py --output writes one)")
    if not args.random.is_file():
        parser.error(f"--random {args.random}: no such file; benchmark/random_scores.py --output writes one")
    random = pd.read_csv(args.random)
    if not {"env_id", "return"} <= set(random.columns):
        parser.error(f"--random {args.random} has no env_id and return columns; pass benchmark/random_scores.py's CSV")
    runs, random = summarize(tables[0], args.last), random.groupby("env_id")["return"].mean()
    if args.base_results:  # the base's runs from the other folder, named apart from the variant's (they may share a name)
        base_runs = summarize(tables[1], args.last)
        args.base = f"{args.base} ({args.base_results.name})"
        base_runs = base_runs[base_runs.variant == args.base.rsplit(" (", 1)[0]].assign(variant=args.base)
        runs = pd.concat([base_runs, runs[runs.variant == args.variant]])
    tasks = sorted(set(runs[runs.variant == args.base].env_id) & set(runs[runs.variant == args.variant].env_id))
    missing = [task for task in tasks if task not in random.index]
    if not tasks or missing:
        print(f"error: {'no task has both variants' if not tasks else f'--random has no episodes of {missing[0]}'}",
              file=sys.stderr)  # fmt: skip
        return 2
    lines = [f"| variant | tasks | seeds per task | IQM of (score - random) / ({args.base}'s mean - random) [95% CI] |",
             "| --- | ---: | --- | ---: |"]  # fmt: skip
    for variant in (args.base, args.variant):
        columns = []
        for task in tasks:
            base = runs[(runs.variant == args.base) & (runs.env_id == task)].score.mean()
            scores = runs[(runs.variant == variant) & (runs.env_id == task)].sort_values("seed").score.to_numpy()
            columns.append((scores - random[task]) / (base - random[task]))
        seeds = min(len(column) for column in columns)
        point, low, high = iqm_interval(np.stack([column[:seeds] for column in columns], axis=1))
        lines.append(f"| {variant} | {len(tasks)} | {seeds} | {point:.2f} [{low:.2f}, {high:.2f}] |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
