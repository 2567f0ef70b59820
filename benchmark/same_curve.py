"""Where two runs of one seed part: reads two run folders written by benchmark/run.py (ours at the flags that compute
CleanRL's numbers, say, and CleanRL's own: docs/cleanrl.md) and compares, exactly as TensorBoard holds them, their
episodes (the step each ended at and its return) one by one, and the explained variance of each update (both
scripts compute it alike; their logged losses differ by design: CleanRL's are its last minibatch's).

    python benchmark/same_curve.py benchmark/runs/pong-pair/PongNoFrameskip-v4/same-numbers/seed1 \\
        benchmark/runs/pong-pair/PongNoFrameskip-v4/cleanrl/seed1

Prints how far the two agree and, if they part, the first episode and the first update that differ. Exit status 0
where they agree to the end of the shorter, 1 where they part, 2 for bad input."""

import argparse
import sys
from pathlib import Path

from report_data import read_run  # beside this file


def alike(a, b, column):
    """(rows alike from the start, rows compared) of tables a and b in step and `column`: of the shorter's rows, how many
    come before the first that differs (all of them where none does)."""
    n = min(len(a), len(b))
    same = (a[["step", column]].iloc[:n].to_numpy() == b[["step", column]].iloc[:n].to_numpy()).all(axis=1)
    return (n if same.all() else int((~same).argmax())), n


def read(folder: Path):
    """(episodes, updates' statistics or None) of a run folder; exits with status 2 where it logged no episodes."""
    run = read_run(folder)
    if run is None or run[0].empty:
        print(f"error: {folder}: no episodes in its TensorBoard logs; pass a run folder (seed<k>) of benchmark/run.py",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    return run[0], run[1]


def compare(folder_a: Path, folder_b: Path):
    """{(table, column): (rows alike from the start, rows compared, the first differing rows of a and b or None)} for
    the episodes' returns and, where both runs log it, the updates' explained variance."""
    (episodes_a, stats_a), (episodes_b, stats_b) = read(folder_a), read(folder_b)
    tables = {("episodes", "episodic_return"): (episodes_a, episodes_b)}
    if all(stats is not None and "explained_variance" in stats for stats in (stats_a, stats_b)):
        tables[("updates", "explained_variance")] = (stats_a, stats_b)
    found = {}
    for (rows, column), (a, b) in tables.items():
        same, compared = alike(a, b, column)
        found[(rows, column)] = same, compared, None if same == compared else (a.iloc[same], b.iloc[same])
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path, help="a run folder: <out>/<env id>/<variant>/seed<k>")
    parser.add_argument("run_b", type=Path, help="the other run folder")
    options = parser.parse_args(argv)
    for folder in (options.run_a, options.run_b):
        if not folder.is_dir():
            parser.exit(2, f"error: {folder}: no such folder; pass a run folder (seed<k>) of benchmark/run.py\n")
    found = compare(options.run_a, options.run_b)
    for (rows, column), (same, compared, parted) in found.items():
        if parted is None:
            print(f"{column}: the same in all {compared} {rows}")
        else:
            ra, rb = parted
            print(
                f"{column}: the same in {same} {rows}, then {rows} {same + 1} differs: step {int(ra['step']):,}, "
                f"{ra[column]!r} against step {int(rb['step']):,}, {rb[column]!r}"
            )
    return 0 if all(parted is None for _, _, parted in found.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
