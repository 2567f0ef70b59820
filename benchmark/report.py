"""Summarizes a results folder written by benchmark/run.py: a Markdown table (mean +- std over seeds of each run's
mean episodic return over its last 100 episodes, and SPS), learning curves as PNGs, an aggregate IQM with a bootstrap
confidence interval (rliable) when several tasks are present, and, when a `default` variant is present, each
variant's effect relative to it (the ablation table), or, for a peer (another project's script, benchmark/run.py
--peer), the difference of ours from it with a bootstrap interval and a verdict: below, level or above, and the
training statistics of both (losses, KL, clip fraction, entropy, episode length) side by side at equal steps. With
the random policy's episodes in data/random.csv (benchmark/random_scores.py) and the table1 preset's settings, the
PPO paper's Table 1 first, in place of the IQM: each setting's average normalized score beside the paper's, and
each task's raw means.

    python benchmark/report.py benchmark/runs/mujoco --output benchmark/results/mujoco   # runs -> data -> report
    python benchmark/report.py benchmark/results/mujoco                                 # rebuilt from the data alone

The report is always built from compact data kept beside it, in <output>/data/: episodes.csv.gz (env_id, variant,
seed, step, episodic_return, episodic_length of every episode of every run), runs.csv (env_id, variant, seed, sps,
wall time, commit, machine, peer) and stats.csv.gz (each update's logged losses/<name>), small enough to commit.
Reading a runs folder adds its runs to that data (replacing runs of the same env, variant and seed, keeping the
others), so a matrix can be finished over several sittings and machines, and benchmark/run.py skips the runs the data
already holds. A run that has not finished, or whose logs end short of the steps it was run for (an event file cut
short), is left out of the data and named, on stderr and in the README; a data file cut mid-line or damaged is refused
in one line.
"""

import argparse
import csv
import gzip
import io
import itertools
import json
import re
import shlex
import shutil
import sys
import warnings
import zlib
from glob import glob
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

# Published scores beside ours, by env id: (score, source); SOURCES says where each number comes from.
SOURCES = {
    "PPO paper": "Schulman et al. 2017, Proximal Policy Optimization Algorithms, Table 6: PPO's mean return over the last "
    "100 episodes after 10M steps (40M frames), 3 seeds",
    "CleanRL": "CleanRL's ppo_continuous_action.py, a reproduction of openai/baselines ppo2, on MuJoCo v4 tasks at 1M steps "
    "(vwxyzjn/cleanrl, docs/benchmark/ppo_continuous_action.md, tag pr-424); our v5 tasks differ from v4 in details",
}
REFERENCE_STEPS = {"PPO paper": 10_000_000, "CleanRL": 1_000_000}  # the steps at which each source's scores were taken
REFERENCE_SCORES = {
    "BeamRiderNoFrameskip-v4": (1590.0, "PPO paper"),
    "BreakoutNoFrameskip-v4": (274.8, "PPO paper"),
    "PongNoFrameskip-v4": (20.7, "PPO paper"),
    "HalfCheetah-v5": (1442.64, "CleanRL"),
    "Hopper-v5": (2382.86, "CleanRL"),
    "Walker2d-v5": (2287.95, "CleanRL"),
    "InvertedPendulum-v5": (963.09, "CleanRL"),
}
CURVE_POINTS = 100  # points of each learning curve on a common step grid
# Training statistics kept per update (TensorBoard's losses/<name>, the names of ours and of CleanRL's scripts)
STATS = ["policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac", "explained_variance"]
# The score of leaving a game's floor, by env id: a run has left it once the mean of its last FLOOR_WINDOW episodes
# exceeds this (Pong's floor is -21, every point lost); games without one get no floor table
FLOOR_THRESHOLDS = {"PongNoFrameskip-v4": -15.0}
FLOOR_WINDOW = 20  # episodes in the trailing mean that must exceed the threshold


def read_run(folder: Path):
    """(episodes, stats, sps, last_step, iteration) of one run folder (seed<k>), read from its TensorBoard event files:
    each episode's end step, return and length; each update's step and training statistics (STATS, those logged); the
    last SPS; the last step anything was logged at; and the steps of one iteration (the spacing of charts/SPS, logged
    once per iteration; 0 where it was not logged). An event file cut short reads as a shorter run, silently."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdirs = sorted({str(Path(f).parent) for f in glob(str(folder / "runs" / "*" / "events.out.tfevents*"))})
    if not logdirs:
        return None
    accumulator = EventAccumulator(logdirs[-1], size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]

    def series(tag, name):
        events = accumulator.Scalars(tag) if tag in tags else []
        return pd.Series([e.value for e in events], index=pd.Index([e.step for e in events], name="step"), name=name)

    returns, lengths = series("charts/episodic_return", "episodic_return"), series("charts/episodic_length", "episodic_length")
    episodes = pd.DataFrame({"step": returns.index, "episodic_return": returns.to_numpy()})
    if len(lengths) == len(returns):  # logged with each return, at the same steps
        episodes["episodic_length"] = lengths.to_numpy()
    logged = [series(f"losses/{name}", name) for name in STATS if f"losses/{name}" in tags]
    stats = pd.concat([s[~s.index.duplicated(keep="last")] for s in logged], axis=1).reset_index() if logged else None
    sps = accumulator.Scalars("charts/SPS")[-1].value if "charts/SPS" in tags else np.nan
    last_step = max((accumulator.Scalars(tag)[-1].step for tag in tags), default=0)
    sps_steps = [0] + [e.step for e in accumulator.Scalars("charts/SPS")] if "charts/SPS" in tags else [0]
    iteration = float(np.median(np.diff(sps_steps))) if len(sps_steps) > 1 else 0.0
    return episodes, stats, sps, last_step, iteration


KEYS = ["env_id", "variant", "seed"]


class Tables(NamedTuple):
    """A results folder's data: every episode, one row per run, every update's training statistics (None if none)."""

    episodes: pd.DataFrame
    runs: pd.DataFrame
    stats: pd.DataFrame | None


def budget_of(command):
    """The --total-timesteps of a run's command (done.json's), or None where it gives none."""
    words = shlex.split(command or "")
    values = [after for word, after in zip(words, words[1:] + [""]) if word == "--total-timesteps"]
    values += [word.split("=", 1)[1] for word in words if word.startswith("--total-timesteps=")]
    return int(values[-1]) if values and values[-1].isdigit() else None


def read_runs_folder(root: Path, left_out=None):
    """(episodes, runs, stats) tables of the finished runs (those with done.json) of a folder written by benchmark/run.py:
    the episodes and the updates' statistics from its TensorBoard logs; per run the last logged SPS and, from done.json,
    the wall time, the commit, the machine and the peer. A run not finished, or whose logs end an iteration or more
    short of the --total-timesteps of its command, is left out, named on stderr and, with why, in `left_out` (a list)."""
    episodes, runs, stats = [], [], []

    def skip(folder, why, fix=""):  # stderr names the folder; the README the run
        print(f"skipped {folder}: {why}{fix}", file=sys.stderr)
        if left_out is not None:
            left_out.append(f"{folder.parts[-3]} {folder.parts[-2]} seed {folder.name[len('seed') :]}: {why}")

    for folder in sorted(root.glob("*/*/seed*")):
        done = json.loads((folder / "done.json").read_text()) if (folder / "done.json").exists() else {}
        if done.get("returncode") != 0:  # still running, stopped, or failed: its last episodes are not its score
            skip(folder, "not finished (no done.json)", "; run benchmark/run.py again to finish it")
            continue
        run = read_run(folder)
        if run is None or run[0].empty:
            skip(folder, "no episodes logged")
            continue
        run_episodes, run_stats, sps, last_step, iteration = run
        budget = budget_of(done.get("command"))
        # a whole run logs its last iteration's end: less than one iteration short of its budget
        if budget is not None and budget - last_step >= max(iteration, 1):
            why = f"its logs end at step {last_step} of {budget} (an event file cut short?)"
            skip(folder, why, "; delete its folder and run benchmark/run.py again")
            continue
        key = {"env_id": folder.parts[-3], "variant": folder.parts[-2], "seed": int(folder.name[len("seed") :])}
        episodes.append(run_episodes.assign(**key))
        if run_stats is not None:
            stats.append(run_stats.assign(**key))
        runs.append({**key, "sps": sps, **{field: done.get(field) for field in ("seconds", "commit", "machine", "peer")}})
    if not runs:
        return None
    stats = pd.concat(stats, ignore_index=True) if stats else None
    return Tables(pd.concat(episodes, ignore_index=True), pd.DataFrame(runs), stats)


# The columns of the data files (and of random.csv) that must hold a value, an integer or a number (or be empty)
FILLED = set(KEYS) | {"step"}
INTEGERS = {"seed", "step", "episodic_length", "episode", "length"}
NUMBERS = INTEGERS | {"sps", "seconds", "episodic_return", "return"} | set(STATS)


def read_csv(path: Path, fix: str):
    """pd.read_csv of a data file, refused in one line (SystemExit: the file, the line, `fix`) where it is cut or
    damaged: compressed data that end early, a file that does not end with a newline (write_data ends each with one, so
    the last line was cut, however it parses), a row whose fields are not its header's, or a value missing from a FILLED
    column or not of its column's type. A file cut exactly at the end of a line is a shorter file: no check sees it."""

    def refuse(what):
        raise SystemExit(f"error: {path}: {what}; {fix}")

    try:
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as error:
        refuse(f"cut or damaged ({error})")
    if not text.endswith("\n"):
        last = text.count("\n") + 1
        refuse(f"line {last} is cut (the file does not end with a newline)")
    reader = csv.reader(io.StringIO(text, newline=""))
    header, lines = next(reader, []), []
    for row in reader:
        if len(row) != len(header):
            refuse(f"line {reader.line_num} is malformed ({len(row)} fields, its header {len(header)})")
        lines.append(reader.line_num)  # a row's line (a quoted field may span several)
    table = pd.read_csv(io.StringIO(text))
    for column in table:
        values = table[column]
        numbers = pd.to_numeric(values, errors="coerce") if column in NUMBERS else values
        bad = values.isna() if column in FILLED else pd.Series(False, index=values.index)
        bad |= numbers.isna() & values.notna()
        if column in INTEGERS:
            bad |= numbers.notna() & (numbers != numbers.round())
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            kind = "an integer" if column in INTEGERS else "a number"
            shown = "empty" if pd.isna(values.iloc[row]) else f"'{values.iloc[row]}', not {kind}"
            refuse(f"line {lines[row]} is malformed ({column} {shown})")
    return table


def read_data(data: Path):
    """The (episodes, runs, stats) tables kept in a data folder (stats None where none were kept), or None where there
    is none yet; exits in one line where a file is cut or damaged (read_csv)."""
    if not (data / "runs.csv").exists():
        return None
    fix = (
        "restore it (git checkout), or set the data folder aside and rebuild it from the run folders: python "
        f"benchmark/report.py <runs folder> --output {data.parent}"
    )
    stats = read_csv(data / "stats.csv.gz", fix) if (data / "stats.csv.gz").exists() else None
    return Tables(read_csv(data / "episodes.csv.gz", fix), read_csv(data / "runs.csv", fix), stats)


def merge_data(kept, new):
    """kept's tables with new's runs added; a run in both (same env, variant and seed) is taken from new."""
    if kept is None:
        return new
    new_keys = new[1][KEYS]

    def others(table):  # the rows of kept runs that new does not replace
        if table is None:
            return None
        replaced = table[KEYS].merge(new_keys, on=KEYS, how="left", indicator=True)["_merge"].eq("both").to_numpy()
        return table[~replaced]

    def joined(old, fresh):
        parts = [t for t in (others(old), fresh) if t is not None and not t.empty]
        return pd.concat(parts, ignore_index=True) if parts else None

    return Tables(*(joined(old, fresh) for old, fresh in zip(kept, new)))


def write_data(data: Path, tables):
    """The tables, sorted; returns rounded to 0.1 (the report's precision), statistics to 4 significant digits: about
    22 kB per 1M-step MuJoCo run's episodes once compressed."""
    data.mkdir(parents=True, exist_ok=True)
    episodes, runs, stats = tables
    order = KEYS + ["step"]
    episodes = episodes.reindex(columns=order + [c for c in episodes if c not in order])
    episodes = episodes.sort_values(order, kind="stable").round({"episodic_return": 1})
    if "episodic_length" in episodes:  # NaN for runs kept from before lengths were kept
        episodes["episodic_length"] = episodes["episodic_length"].round().astype("Int64")
    episodes.to_csv(data / "episodes.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
    runs.sort_values(KEYS).to_csv(data / "runs.csv", index=False)
    if stats is not None:
        stats = stats.reindex(columns=order + [name for name in STATS if name in stats]).sort_values(order, kind="stable")
        stats.to_csv(data / "stats.csv.gz", index=False, float_format="%.4g", compression={"method": "gzip", "mtime": 0})


def by_seed(values: pd.Series, seeds: pd.Series):
    """One value as it is; several, each with the seeds it belongs to: "abc (seed 3); not recorded (seeds 1, 2)"."""
    if values.nunique() == 1:
        return values.iloc[0]
    parts = []
    for value in sorted(set(values)):
        mine = list(seeds[values == value])
        parts.append(f"{value} (seed{'s' if len(mine) > 1 else ''} {', '.join(map(str, mine))})")
    return "; ".join(parts)


def runs_table(runs: pd.DataFrame):
    """Per env and variant: the seeds, the wall time of each run, and the commits and machines that ran them."""
    lines = ["| env | variant | seeds | wall time per run | commit | machine |", "| --- | --- | --- | --- | --- | --- |"]
    runs = runs.reindex(columns=KEYS + ["seconds", "commit", "machine"])
    for (env_id, variant), group in runs.groupby(["env_id", "variant"], sort=True):
        group = group.sort_values("seed")
        wall = ", ".join("-" if pd.isna(t) else f"{t / 60:.0f} min" for t in group["seconds"])
        commits, machines = (
            by_seed(group[c].fillna("not recorded").astype(str), group["seed"]) for c in ("commit", "machine")
        )
        lines.append(f"| {env_id} | {variant} | {', '.join(map(str, group['seed']))} | {wall} | {commits} | {machines} |")
    return "\n".join(lines)


def summarize(tables, last: int):
    """One row per run: env_id, variant, seed, score (mean return of its last `last` episodes), sps, curve data."""
    episodes, runs, _ = tables
    rows = []
    for (env_id, variant, seed), run in episodes.groupby(KEYS, sort=True):
        steps, returns = run["step"].to_numpy(), run["episodic_return"].to_numpy()
        sps = runs[(runs["env_id"] == env_id) & (runs["variant"] == variant) & (runs["seed"] == seed)]["sps"]
        rows.append(
            {
                "env_id": env_id,
                "variant": variant,
                "seed": int(seed),
                "score": returns[-last:].mean(),
                "sps": sps.iloc[0] if len(sps) else np.nan,
                "steps": steps,
                "returns": returns,
            }
        )
    return pd.DataFrame(rows)


def mean_std(values):
    return f"{np.mean(values):.1f} ± {np.std(values):.1f}" if len(values) > 1 else f"{np.mean(values):.1f}"


def seeds(values):
    return f"{len(values)} seed{'s' if len(values) != 1 else ''}"


def per_seed(group):
    return ", ".join(f"{score:.0f} (seed {seed})" for seed, score in sorted(zip(group["seed"], group["score"])))


def variant_order(variants):
    """default first, then by name with numbers in numeric order (G2 before G10)."""
    return sorted(variants, key=lambda v: (v != "default", [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", v)]))


def score_table(runs: pd.DataFrame, last: int):
    """One row per env and variant; the reference column (a published score for the default) only where one exists."""
    header = ["env", "variant", "seeds", f"return (mean of the last {last} episodes)", "per seed", "SPS", "reference"]
    rows = [header, ["---", "---", "---:", "---:", "---", "---:", "---:"]]
    for env_id, env_runs in runs.groupby("env_id"):
        reference = REFERENCE_SCORES.get(env_id)
        for variant in variant_order(env_runs["variant"].unique()):
            group = env_runs[env_runs["variant"] == variant]
            ref = f"{reference[0]:g} ({reference[1]}, {REFERENCE_STEPS[reference[1]] / 1e6:g}M steps)" if reference else ""
            ref = ref if variant == "default" else ""
            sps = f"{group['sps'].mean():.0f}"
            rows.append([env_id, variant, str(len(group)), mean_std(group["score"]), per_seed(group), sps, ref])
    if not any(row[-1] for row in rows[2:]):  # no reference anywhere: the column is left out
        rows = [row[:-1] for row in rows]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def bootstrap_interval(values, reps=10_000, seed=0):
    """The 95% percentile-bootstrap interval of the mean of `values` (seeds resampled with replacement)."""
    values = np.asarray(values, dtype=float)
    draws = np.random.default_rng(seed).choice(values, size=(reps, len(values)), replace=True).mean(axis=1)
    return np.percentile(draws, 2.5), np.percentile(draws, 97.5)


def difference_interval(ours, theirs, reps=10_000, seed=0):
    """The 95% percentile-bootstrap interval of mean(ours) - mean(theirs), each side's seeds resampled on its own."""
    rng = np.random.default_rng(seed)
    draws = [rng.choice(np.asarray(v, dtype=float), size=(reps, len(v))).mean(axis=1) for v in (ours, theirs)]
    return np.percentile(draws[0] - draws[1], 2.5), np.percentile(draws[0] - draws[1], 97.5)


def peer_table(runs: pd.DataFrame, peers):
    """Ours (the default variant) against each peer on each env: both scores over seeds, the difference of their means
    with its 95% bootstrap interval, and the verdict it gives: level where the interval contains 0."""
    lines = [
        "| env | ours (default) | peer | peer's return | ours - peer [95% bootstrap interval] | ours is |",
        "| --- | ---: | --- | ---: | ---: | --- |",
    ]
    for env_id, env_runs in runs.groupby("env_id"):
        ours = env_runs[env_runs["variant"] == "default"]["score"]
        for peer in variant_order(set(peers) & set(env_runs["variant"])):
            theirs = env_runs[env_runs["variant"] == peer]["score"]
            if ours.empty:
                continue
            difference = f"{ours.mean() - theirs.mean():+.1f}"
            if min(len(ours), len(theirs)) < 2:  # a resampled single seed is that seed: no interval to speak of
                difference, verdict = difference + " (one seed on a side: no interval)", "none given yet"
            else:
                low, high = difference_interval(ours, theirs)
                difference += f" [{low:+.1f}, {high:+.1f}]"
                verdict = "**below**" if high < 0 else "**above**" if low > 0 else "**level**"
            lines.append(
                f"| {env_id} | {mean_std(ours)} ({seeds(ours)}) | {peer} ({peers[peer]}) | {mean_std(theirs)} "
                f"({seeds(theirs)}) | {difference} | {verdict} |"
            )
    return "\n".join(lines)


def three_digits(value):
    """3 significant digits, without an exponent from 1,000 up: 0.00134, 0.75, 379, 1,350."""
    return f"{float(f'{value:.3g}'):,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def statistics_table(
    episodes: pd.DataFrame, stats: pd.DataFrame, env_id: str, peer: str, variant="default", windows=4
):
    """One variant of ours (the default, or one with a switch flipped) and a peer on one env at equal steps: each
    training statistic (STATS) averaged over the updates logged in each of `windows` equal spans of steps, and the
    episode length over the episodes that ended in it, then over seeds; each cell is "ours / peer" ("-" for a side
    that logged nothing there); "" unless both sides logged some."""
    columns = KEYS + ["step"]
    long = [stats.melt(id_vars=columns, var_name="name")] if stats is not None else []
    if "episodic_length" in episodes:
        long.append(episodes[columns + ["episodic_length"]].melt(id_vars=columns, var_name="name"))
    if not long:
        return ""
    long = pd.concat(long).dropna(subset=["value"])
    long = long[(long["env_id"] == env_id) & long["variant"].isin([variant, peer])]
    if set(long["variant"]) != {variant, peer}:
        return ""
    unit = 10 ** max(0, len(str(int(long["step"].max()))) - 2)  # the spans end at the last step rounded up to 2 digits
    edges = np.linspace(0, unit * np.ceil(long["step"].max() / unit), windows + 1)
    long = long.assign(window=np.clip(np.searchsorted(edges, long["step"], side="right") - 1, 0, windows - 1))
    means = long.groupby(["name", "variant", "window", "seed"])["value"].mean().groupby(["name", "variant", "window"]).mean()
    spans = [f"steps {edges[w]:,.0f}-{edges[w + 1]:,.0f}" for w in range(windows)]
    lines = ["| statistic | " + " | ".join(spans) + " |", "| --- |" + " ---: |" * windows]
    for name in [n for n in STATS + ["episodic_length"] if n in set(long["name"])]:
        cells = [
            " / ".join(three_digits(means[name, v, w]) if (name, v, w) in means else "-" for v in (variant, peer))
            for w in range(windows)
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def floor_left_at(steps, returns, threshold, window=FLOOR_WINDOW):
    """The step of the first episode (in step order) at which the mean of the last `window` episodes exceeds threshold,
    counted from the window-th episode on; inf where it never does (later than any step, for rank_test)."""
    means = pd.Series(returns, dtype=float).rolling(window).mean().to_numpy()  # NaN until `window` episodes exist
    above = np.flatnonzero(means > threshold)
    return float(steps[above[0]]) if len(above) else np.inf


def rank_test(higher, lower):
    """(U, p) of the exact one-sided Mann-Whitney test that `higher` tends to exceed `lower`: U counts the pairs
    (h, l) with h > l, plus 1/2 per tie; p is the fraction of all C(n + m, n) splits of the pooled values into n and m
    whose U is at least the observed one (exact with ties and inf; for seeds, a few: ten a side are 184,756 splits).
    Five against five all one way: p = 1/252."""
    pooled = np.concatenate([np.asarray(higher, dtype=float), np.asarray(lower, dtype=float)])
    ranks = pd.Series(pooled).rank().to_numpy()  # midranks: tied values share their places (inf ties with inf)
    splits = np.array(list(itertools.combinations(range(len(pooled)), len(higher))))  # splits[0]: the observed one
    u = ranks[splits].sum(axis=1) - len(higher) * (len(higher) + 1) / 2  # a rank sum less its minimum is U
    return u[0], np.mean(u >= u[0])


def floor_cell(value, spec):
    """A cell of floor_table: "-" for a seed that side lacks, "never" for a floor never left, else value formatted."""
    return "-" if value is None else "never" if np.isinf(value) else format(value, spec)


def floor_table(runs: pd.DataFrame, env_id: str, peer: str, variant="default"):
    """One variant of ours (the default, or one with a switch flipped) and a peer (or, for the default, a variant of
    ours) on one env with a floor threshold: per seed the step at which each side left the floor (floor_left_at) and
    its score, then rank_test of ours leaving later and of ours scoring lower; "" unless both sides have runs."""
    env_runs = runs[runs["env_id"] == env_id]
    sides = [env_runs[env_runs["variant"] == v].set_index("seed") for v in (variant, peer)]
    ours, whose = ("ours", "ours'") if variant == "default" else (variant, f"{variant}'s")  # a variant goes by its name
    if any(side.empty for side in sides):
        return ""
    threshold = FLOOR_THRESHOLDS[env_id]
    left = [
        pd.Series([floor_left_at(s, r, threshold) for s, r in zip(side["steps"], side["returns"])], index=side.index)
        for side in sides
    ]
    lines = [
        f"| seed | {ours} leaves the floor at step | {peer} leaves it at step | {whose} score | {peer}'s score |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for seed in sorted(set(sides[0].index) | set(sides[1].index)):
        cells = [floor_cell(s.get(seed), ",.0f") for s in left] + [floor_cell(s["score"].get(seed), ".1f") for s in sides]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    pairs = len(sides[0]) * len(sides[1])
    later, lower = rank_test(left[0], left[1]), rank_test(sides[1]["score"], sides[0]["score"])
    lines.append("")
    lines.append(f"- {ours} leaves the floor later: U = {later[0]:g} of {pairs} pairs, p = {three_digits(later[1])}")
    lines.append(f"- {whose} score is lower: U = {lower[0]:g} of {pairs} pairs, p = {three_digits(lower[1])}")
    title = "ours" if variant == "default" else f"ours ({variant})"
    return f"### {env_id}: {title} / {peer} (floor threshold {threshold:g})\n\n" + "\n".join(lines) + "\n"


def floor_section(runs: pd.DataFrame, peers):
    """The "Leaving the floor" section: floor_table for each variant of ours against each peer on each env with a floor
    threshold, then ours' default against each of its variants (does the switch make ours leave earlier?); "" where
    there is none."""
    ours = variant_order(set(runs["variant"]) - set(peers))
    pairs = [(variant, peer) for variant in ours for peer in variant_order(peers)]
    pairs += [("default", variant) for variant in ours if variant != "default"]
    tables = [
        floor_table(runs, env_id, peer, variant)
        for env_id in sorted(set(runs["env_id"]) & set(FLOOR_THRESHOLDS))
        for variant, peer in pairs
    ]
    if not any(tables):
        return ""
    note = (
        f"A run leaves a game's floor at the step of the first episode at which the mean of its last {FLOOR_WINDOW} "
        "episodes exceeds the game's floor threshold (never: not by its end). Each test is an exact one-sided rank test "
        "(Mann-Whitney U over all splits of the pooled seeds, a tie counting 1/2, never later than any step) of whether "
        "ours leaves the floor later than the peer (or than a variant of ours, a switch flipped), and whether ours' "
        "score (its return in Scores) is lower; "
        "U counts the pairs of seeds (ours, peer) that go that way.\n"
    )
    heading = "## Leaving the floor (ours against peers and against its switches)\n\n"
    return heading + note + "\n" + "\n".join(t for t in tables if t)


def ablation_table(runs: pd.DataFrame):
    """Each variant against the default run of the same env: the mean over seeds with its 95% bootstrap interval, the
    difference of the seed means in % of the default's, and whether the variant's seeds all lie below (or above) all
    of the default's: the one reading that the seed spread cannot explain away (given only from two seeds on)."""
    lines = [
        "| env | variant | seeds | return [95% bootstrap interval] | vs default | seeds better than the default's mean "
        "| against the default's seeds |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for env_id, env_runs in runs.groupby("env_id"):
        default = env_runs[env_runs["variant"] == "default"]["score"]
        if default.empty:
            continue
        base = default.mean()
        for variant in variant_order(env_runs["variant"].unique()):
            scores = env_runs[env_runs["variant"] == variant]["score"]
            low, high = bootstrap_interval(scores)
            change = (scores.mean() - base) / abs(base) if base else np.nan
            better = f"{(scores > base).sum()}/{len(scores)}"
            if variant == "default":
                verdict = ""
            elif len(scores) < 2:
                verdict = "one seed: none given"
            elif scores.max() < default.min():
                verdict = "**all lower**"
            elif scores.min() > default.max():
                verdict = "**all higher**"
            else:
                verdict = "overlapping"
            lines.append(
                f"| {env_id} | {variant} | {len(scores)} | {scores.mean():.1f} [{low:.1f}, {high:.1f}] | {change:+.0%} "
                f"| {better} | {verdict} |"
            )
    return "\n".join(lines)


# The PPO paper's Table 1: the average normalized score of each setting over its 7 MuJoCo tasks x 3 seeds, by the names
# of benchmark/run.py's table1 variants (Schulman et al. 2017, section 6.1; beta starts at 1 in the adaptive rows)
PAPER_TABLE1 = {
    "unclipped": -0.39,
    "clip-0.1": 0.76,
    "clip-0.2": 0.82,
    "clip-0.3": 0.70,
    "kl-adaptive-0.003": 0.68,
    "kl-adaptive-0.01": 0.74,
    "kl-adaptive-0.03": 0.71,
    "kl-fixed-0.3": 0.62,
    "kl-fixed-1": 0.71,
    "kl-fixed-3": 0.72,
    "kl-fixed-10": 0.69,
}


# The paper's four objectives (section 6.1), each a family of Table 1 settings named by its prefix
TABLE1_FAMILIES = {"unclipped": "no clipping or penalty", "clip-": "clipping", "kl-adaptive-": "adaptive KL",
                   "kl-fixed-": "fixed KL"}  # fmt: skip
# What section 6.1 of the paper states its Table 1 runs used, and the defaults of ours that it does not state
TABLE1_SETTINGS = (
    "What the paper's runs had, as far as its text states (section 6.1 and Table 3): 1M steps on seven MuJoCo tasks of "
    "OpenAI Gym (v1 then), 3 seeds, a horizon of 2048 steps, Adam at step size 3e-4, 10 epochs, minibatches of 64, "
    "gamma 0.99, GAE lambda 0.95, a policy of two tanh layers of 64 units giving a Gaussian's mean with a "
    "state-independent standard deviation, no parameters shared between the policy and the value function, no entropy "
    "bonus, beta starting at 1 in the adaptive rows. Ours has all of these (the `table1` preset changes only the "
    "objective's flags), on today's v5 tasks. What the paper does not state, and ours has at its defaults (the "
    "reference implementation's): the value loss clipped at `--clip-coef` (G4: so the clipping rows change the value "
    "clipping too, and the unclipped and KL rows keep it at 0.2), observations normalized (M1) and clipped at 10 (M2), "
    "rewards scaled by the deviation of a discounted return (M3) and clipped at 10 (M4), the learning rate annealed "
    "linearly to 0 (G6: the paper names a step size, no schedule), the gradient's global norm clipped at 0.5 (G8), "
    "advantages normalized per minibatch (G3), orthogonal initialization (G9), Adam's epsilon 1e-5 (G11), actions "
    "clipped to the valid range for the env only (M8), truncation treated as termination (B1 off). The text says "
    "neither that its runs had these nor that they lacked them, so a gap between its column and ours may come from "
    "them as well as from the tasks' versions."
)


def table1_family(variant: str):
    """The paper's objective that a table1 setting belongs to."""
    return next(family for prefix, family in TABLE1_FAMILIES.items() if variant.startswith(prefix))


def family_best(runs: pd.DataFrame):
    """Each task's best setting within each family of objectives (the highest mean score over its seeds), as a
    table of env_id, family, variant: the setting whose curve stands for the family on that task."""
    means = runs.groupby(["env_id", "variant"])["score"].mean().reset_index()
    means["family"] = means["variant"].map(table1_family)
    best = means.loc[means.groupby(["env_id", "family"])["score"].idxmax()]
    return best[["env_id", "family", "variant"]].reset_index(drop=True)


def plot_table1_curves(runs: pd.DataFrame, path: Path):
    """One panel per task, one line per family of objectives: the family's best setting on that task (named in the
    legend), its seeds' mean learning curve with a band of one standard deviation."""
    tasks = sorted(runs["env_id"].unique())
    fig, axes = panels_figure(len(tasks), sharey=False)
    colors = dict(zip(TABLE1_FAMILIES.values(), ["tab:red", "tab:blue", "tab:green", "tab:purple"]))
    best = family_best(runs)
    for ax, env_id in zip(axes.flat, tasks):
        env_runs = runs[runs["env_id"] == env_id]
        grid = np.linspace(0, max(s[-1] for s in env_runs["steps"]), CURVE_POINTS)
        for family, variant in best[best["env_id"] == env_id][["family", "variant"]].values:
            draw_curve(ax, env_runs[env_runs["variant"] == variant], grid, colors[family], f"{family}: {variant}")
        ax.set_title(env_id, fontsize=9)
        ax.legend(fontsize=6, loc="best")
        ax.grid(alpha=0.3)
    finish_panels(fig, axes, len(tasks), "Each family's best setting per task: mean ± std over seeds", path)


def normalized_scores(runs: pd.DataFrame, random: pd.DataFrame):
    """Each run's score shifted and scaled within its task as the paper's Table 1 does: the random policy's mean return
    (random: one row per episode, env_id and return) becomes 0 and the best setting's mean over its seeds becomes 1."""
    random_mean = runs["env_id"].map(random.groupby("env_id")["return"].mean())
    best = runs["env_id"].map(runs.groupby(["env_id", "variant"])["score"].mean().groupby("env_id").max())
    return runs.assign(normalized=(runs["score"] - random_mean) / (best - random_mean))


def table1_interval(normalized: pd.DataFrame, reps=10_000, seed=0):
    """The 95% percentile-bootstrap interval of a setting's average normalized score over its runs, each task's seeds
    resampled with replacement within that task (the tasks stay, each with its number of runs)."""
    rng = np.random.default_rng(seed)
    total = np.zeros(reps)
    for _, task in normalized.groupby("env_id"):
        values = task["normalized"].to_numpy()
        total += rng.choice(values, size=(reps, len(values)), replace=True).sum(axis=1)
    draws = total / len(normalized)
    return np.percentile(draws, 2.5), np.percentile(draws, 97.5)


def table1_claims(normalized: pd.DataFrame, full: int):
    """The paper's three claims on its Table 1, each checked once the settings it compares have all `full` runs:
    clipping at 0.2 scores best (all eleven); no clipping scores below the random policy, a normalized mean under 0,
    on at least one task (unclipped; where none does, the single runs that do are counted); the KL penalties close
    behind clip-0.2 (the seven KL settings and clip-0.2)."""
    counts = normalized["variant"].value_counts()
    means = normalized.groupby("variant")["normalized"].mean()

    def missing(variants):  # the runs a claim still waits for, or None when it can be checked
        left = sum(full - counts.get(v, 0) for v in variants)
        return f"not yet ({left} of its {full * len(variants)} runs to come)" if left else None

    settings, kl = list(PAPER_TABLE1), [v for v in PAPER_TABLE1 if v.startswith("kl-")]
    best = max(settings, key=lambda v: means.get(v, -np.inf))
    rank = sorted(settings, key=lambda v: -means.get(v, -np.inf)).index("clip-0.2") + 1
    first = missing(settings) or (
        f"ours ranks it {rank} of {len(settings)} ({means['clip-0.2']:.2f}): "
        + ("supported" if rank == 1 else f"not supported, {best} scores {means[best]:.2f}")
    )
    unclipped = normalized[normalized["variant"] == "unclipped"].groupby("env_id")["normalized"].mean()
    below = [env for env, value in unclipped.items() if value < 0]
    runs_below = normalized[(normalized["variant"] == "unclipped") & (normalized["normalized"] < 0)]["env_id"]
    on = f", on {', '.join(sorted(set(runs_below)))}" if len(runs_below) else ""
    second = missing(["unclipped"]) or (
        f"supported on {', '.join(below)}"
        if below
        else f"not supported: ours' mean over seeds is above it on every task (runs below it: {len(runs_below)} of {full}{on})"
    )
    best_kl, paper_kl = max(kl, key=lambda v: means.get(v, -np.inf)), max(PAPER_TABLE1[v] for v in kl)
    paper_clip = PAPER_TABLE1["clip-0.2"]
    third = missing(kl + ["clip-0.2"]) or (
        f"the best of them, {best_kl}, scores {means[best_kl]:.2f} against clip-0.2's {means['clip-0.2']:.2f} "
        f"({means[best_kl] - means['clip-0.2']:+.2f}; the paper: {paper_kl:.2f} against {paper_clip:.2f}, "
        f"{paper_kl - paper_clip:+.2f})"
    )
    return (
        "The paper's claims, checked once their settings' runs are all in:\n\n"
        f"- Clipping at 0.2 scores best: {first}.\n"
        f"- No clipping scores below the random policy on at least one task: {second}.\n"
        f"- The KL penalties close behind: {third}."
    )


def table1_section(runs: pd.DataFrame, random: pd.DataFrame):
    """The paper's Table 1 beside ours (average normalized score, 95% interval), then each task's raw means."""
    normalized = normalized_scores(runs, random)
    tasks = sorted(runs["env_id"].unique())
    full = len(tasks) * 3
    total = len(PAPER_TABLE1) * full
    caveat = (
        f": a setting with fewer than {full} runs is not yet comparable, and the best setting of a task is the best "
        "among those run so far"
    )
    lines = [
        "Each run's score (the mean return of its last 100 episodes) is shifted and scaled within its task so that the "
        "random policy (100 episodes of uniform random actions, data/random.csv) scores 0 and the best setting's mean "
        "over its seeds scores 1, as in the paper; a setting's figure is the mean over its runs, with a 95% bootstrap "
        f"interval resampling seeds within tasks. {len(runs)} of {total} runs are in{caveat if len(runs) < total else ''}.\n",
        "| setting | runs | ours: avg. normalized score [95% interval] | paper |",
        "| --- | ---: | ---: | ---: |",
    ]
    for variant, paper in PAPER_TABLE1.items():
        group = normalized[normalized["variant"] == variant]
        if len(group):
            low, high = table1_interval(group)
            ours = f"{group['normalized'].mean():.2f} [{low:.2f}, {high:.2f}]"
        else:
            ours = "-"
        lines.append(f"| {variant} | {len(group)} of {full} | {ours} | {paper:.2f} |")
    lines += ["", table1_claims(normalized, full)]
    means = runs.groupby(["variant", "env_id"])["score"].mean()
    lines += ["", "Raw means over seeds (the mean return of each run's last 100 episodes):", ""]
    lines += ["| setting | " + " | ".join(tasks) + " |", "| --- |" + " ---: |" * len(tasks)]
    random_means = random.groupby("env_id")["return"].mean()
    lines.append("| random policy | " + " | ".join(f"{random_means.get(t, np.nan):.1f}" for t in tasks) + " |")
    for variant in PAPER_TABLE1:
        cells = [f"{means[(variant, t)]:.1f}" if (variant, t) in means.index else "-" for t in tasks]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_table1(runs: pd.DataFrame, random: pd.DataFrame, path: Path):
    """The eleven settings' average normalized scores at a glance: ours (a dot and its 95% interval; hollow while a
    setting's runs are incomplete) beside the paper's (a cross), one row per setting, 0 the random policy."""
    normalized = normalized_scores(runs, random)
    full = runs["env_id"].nunique() * 3
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row, (variant, paper) in enumerate(PAPER_TABLE1.items()):
        group = normalized[normalized["variant"] == variant]
        ax.plot(paper, row, "x", color="tab:gray", markersize=8, label="paper" if row == 0 else None)
        if len(group):
            low, high = table1_interval(group)
            ax.plot([low, high], [row, row], color="tab:blue", linewidth=2)
            face = "tab:blue" if len(group) == full else "white"
            ax.plot(group["normalized"].mean(), row, "o", color="tab:blue", markerfacecolor=face,
                    label="ours (hollow: runs missing)" if row == 0 or variant == "clip-0.2" else None)  # fmt: skip
    ax.axvline(0, color="black", linewidth=0.5)
    ax.set_yticks(range(len(PAPER_TABLE1)), list(PAPER_TABLE1))
    ax.invert_yaxis()
    ax.set_xlabel("average normalized score (random policy 0, best setting 1 per task)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def panels_figure(count: int, sharey=True):
    """A figure of `count` panels of learning curves, four to a row."""
    cols = min(4, count)
    rows = -(-count // cols)
    return plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False, sharex=True, sharey=sharey)


def draw_curve(ax, group: pd.DataFrame, grid, color, label):
    """The mean of a group of seeds' learning curves (curve) with a band of one standard deviation."""
    curves = curve(group, grid)
    with warnings.catch_warnings():  # grid points before a seed's first episode are NaN in every seed
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, std = np.nanmean(curves, axis=0), np.nanstd(curves, axis=0)
    ax.plot(grid, mean, color=color, label=f"{label} ({seeds(curves)})")
    ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.2)


def finish_panels(fig, axes, used: int, title: str, path: Path):
    """Blank the unused panels, label the axes, title the figure and write it to path."""
    for ax in axes.flat[used:]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("env steps")
    for ax in axes[:, 0]:
        ax.set_ylabel("episodic return")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))  # room for the title
    fig.savefig(path, dpi=90)
    plt.close(fig)


def curve(group: pd.DataFrame, grid):
    """The seeds' learning curves on a common step grid: each seed's return averaged over a trailing window of
    episodes, interpolated between its episodes' end steps; NaN before its first episode ends, and its last value
    after its last one (the return as of that step: no episode of the run ended since), so that the mean at the end
    of the grid is over all seeds, not over the one whose last episode happened to end last."""
    curves = []
    for steps, returns in zip(group["steps"], group["returns"]):
        window = max(1, min(100, len(returns) // 10))
        smoothed = pd.Series(returns).rolling(window, min_periods=1).mean().to_numpy()
        values = np.interp(grid, steps, smoothed)
        values[grid < steps[0]] = np.nan
        curves.append(values)
    return np.array(curves)


def reference_reached(env_id, steps):
    """Whether runs of `steps` steps reach (to within 10%) the steps at which env_id's reference score was taken: a
    10M-step score drawn over 2M-step curves would only squash them."""
    return env_id in REFERENCE_SCORES and steps >= 0.9 * REFERENCE_STEPS[REFERENCE_SCORES[env_id][1]]


def plot_env(env_runs: pd.DataFrame, env_id: str, path: Path, peers=()):
    """One panel if there is one variant; else one panel per variant with the default run drawn in grey behind it, or
    for a peer, ours (the default) in blue beside the peer in orange."""
    variants = variant_order(env_runs["variant"].unique())
    grid = np.linspace(0, max(s[-1] for s in env_runs["steps"]), CURVE_POINTS)
    panels = variants if len(variants) == 1 or "default" not in variants else [v for v in variants if v != "default"]
    fig, axes = panels_figure(len(panels))
    for ax, variant in zip(axes.flat, panels):
        behind = "tab:blue" if variant in peers else "grey"
        shown = [("default", behind)] if variant != "default" and "default" in variants else []
        for name, color in shown + [(variant, "tab:orange" if variant in peers else "tab:blue")]:
            label = "ours (default)" if name == "default" and variant in peers else name
            draw_curve(ax, env_runs[env_runs["variant"] == name], grid, color, label)
        if reference_reached(env_id, grid[-1]):
            ax.axhline(REFERENCE_SCORES[env_id][0], color="black", linestyle=":", linewidth=1, label="reference")
        ax.set_title(variant if len(panels) > 1 else env_id, fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    finish_panels(fig, axes, len(panels), f"{env_id}: mean ± std over seeds", path)


def aggregate_iqm(runs: pd.DataFrame):
    """rliable's interquartile mean over (seed, task) of the scores normalized by the reference score, with a 95%
    stratified-bootstrap confidence interval; only over tasks whose reference score the runs reach (reference_reached:
    a 2M-step run is not scored against a 10M-step reference) and seeds present in all."""
    try:
        from rliable import library as rly
        from rliable import metrics
    except ModuleNotFoundError:  # a GPU machine with its own torch may lack it; nothing else in the report needs it
        return "Not computed: rliable is not installed here (requirements.txt has it)."
    lines = []
    reached = np.array([reference_reached(env_id, steps[-1]) for env_id, steps in zip(runs["env_id"], runs["steps"])])
    for variant in variant_order(runs["variant"].unique()):
        group = runs[(runs["variant"] == variant).to_numpy() & reached]
        tasks = sorted(group["env_id"].unique())
        common = sorted(set.intersection(*(set(group[group["env_id"] == t]["seed"]) for t in tasks))) if tasks else []
        if len(tasks) < 2 or not common:
            continue
        scores = np.array(
            [
                [group[(group["env_id"] == t) & (group["seed"] == s)]["score"].iloc[0] / REFERENCE_SCORES[t][0] for t in tasks]
                for s in common
            ]
        )
        iqm = lambda x: np.array([metrics.aggregate_iqm(x)])  # noqa: E731
        with warnings.catch_warnings():  # arch, under rliable, calls random_state deprecated; it still takes it
            warnings.simplefilter("ignore", FutureWarning)
            # a fixed bootstrap seed: a rebuild from the same data gives the same interval
            point, interval = rly.get_interval_estimates(
                {variant: scores}, iqm, reps=2000, random_state=np.random.RandomState(0)
            )
        low, high = interval[variant][:, 0]
        lines.append(f"| {variant} | {', '.join(tasks)} | {len(common)} | {point[variant][0]:.2f} [{low:.2f}, {high:.2f}] |")
    if not lines:
        return ""
    header = "| variant | tasks | seeds | IQM of return / reference [95% CI] |\n| --- | --- | ---: | ---: |\n"
    return header + "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a folder written by benchmark/run.py, or a results folder with data/ to rebuild")
    parser.add_argument("--output", help="where README.md, the PNGs and data/ go (default: the folder)")
    parser.add_argument("--last", type=int, default=100, help="episodes at the end of each run that make its score")
    options = parser.parse_args(argv)
    root = Path(options.folder)
    if not root.is_dir():
        raise SystemExit(f"error: {root}: no such folder; pass the --out folder of benchmark/run.py or a results folder")
    output = Path(options.output or root)
    if output.exists() and not output.is_dir():
        raise SystemExit(f"error: --output {output} is a file; pass a folder (README.md, the PNGs and data/ go into it)")
    data = output / "data"
    left_out = []  # runs of this folder that the data leave out, and why
    new, kept = read_runs_folder(root, left_out), read_data(data)
    if new is None and kept is None and read_data(root / "data") is not None:  # a results folder rebuilt elsewhere
        shutil.copytree(root / "data", data, dirs_exist_ok=True)  # its data go along, so the new report rebuilds alone
        kept = read_data(data)
    if new is None and kept is None:
        raise SystemExit(
            f"error: {root}: no runs with TensorBoard logs and no {data / 'runs.csv'}; point it at a folder written by "
            "benchmark/run.py or at a results folder with its data/"
        )
    tables = kept if new is None else merge_data(kept, new)
    commands = (data / "commands.txt").read_text().splitlines() if (data / "commands.txt").exists() else []
    if new is not None:  # the runner's commands (command.txt) and this one join those of earlier sittings
        runner_command = root / "command.txt"
        this = "python benchmark/report.py " + shlex.join(sys.argv[1:] if argv is None else argv)
        added = (runner_command.read_text().strip().splitlines() if runner_command.exists() else []) + [this]
        commands += [command for command in added if command not in commands]
        write_data(data, tables)
        (data / "commands.txt").write_text("\n".join(commands) + "\n")
        tables = read_data(data)  # the report is built from the data as kept, so a rebuild from them gives the same
    runs = summarize(tables, options.last)

    sections = [f"# Results: {output.name}\n"]
    sections.append("Produced by:\n\n```bash\n" + "\n".join(commands) + "\n```\n")
    if left_out:  # before any number: none below comes from these runs
        note = f"Runs of {root} that this report and its data leave out:\n\n"
        sections.append("## Left out\n\n" + note + "\n".join(f"- {line}" for line in left_out) + "\n")
    random_scores = data / "random.csv"  # benchmark/random_scores.py
    table1 = random_scores.exists() and set(runs["variant"]) <= set(PAPER_TABLE1)
    if table1:  # the paper's table comes first, and stands for the aggregate: each task scaled by its random policy
        # and best setting, not by the reference's score for the default alone
        random = read_csv(random_scores, f"write it again: python benchmark/random_scores.py --output {random_scores}")
        plot_table1(runs, random, output / "table1.png")
        plot_table1_curves(runs, output / "table1_curves.png")
        sections.append(
            "## The PPO paper's Table 1\n\n![Table 1](table1.png)\n\n" + table1_section(runs, random) + "\n\n"
            + TABLE1_SETTINGS + "\n\n![Learning curves by family](table1_curves.png)\n"
        )  # fmt: skip
    sections.append("## Scores\n\n" + score_table(runs, options.last) + "\n")
    iqm = aggregate_iqm(runs) if runs["env_id"].nunique() > 1 and not table1 else ""
    if iqm:
        sections.append("## Aggregate over tasks (rliable)\n\n" + iqm + "\n")
    table = tables.runs
    peers = dict(table[["variant", "peer"]].dropna().drop_duplicates().values) if "peer" in table else {}
    if peers and (runs["variant"] == "default").any():
        note = (
            "Ours is the default variant; a peer is another project's script run with its own defaults (benchmark/run.py "
            "--peer). The interval resamples each side's seeds on its own; ours is level where it contains 0.\n\n"
        )
        sections.append("## Ours against peers\n\n" + note + peer_table(runs, peers) + "\n")
        floors = floor_section(runs, peers)
        if floors:
            sections.append(floors)
        note = (
            "Training statistics at equal steps, ours / peer: each one's mean over the updates (episode length: over the "
            "episodes) that fell in each span of steps, then over seeds. Ours logs each update's mean over all its "
            "minibatches; CleanRL's logs those of the update's last minibatch (clipfrac: the mean over all), so its approx_kl "
            "reads higher than a mean over the update would (the KL from the rollout's policy grows over the epochs, "
            "from 0 at the first minibatch): compare shapes and orders of magnitude, not the last digit. CleanRL's "
            "ppo_atari.py counts an episode's length in emulator frames (its episode statistics wrap the env below the "
            "frame skip), ours in agent steps of 4 frames each.\n"
        )
        ours = variant_order(set(runs["variant"]) - set(peers))
        parts = [
            f"### {env_id}: {'ours' if variant == 'default' else f'ours ({variant})'} / {peer}\n\n{text}\n"
            for env_id in sorted(runs["env_id"].unique())
            for variant in ours
            for peer in variant_order(peers)
            if (text := statistics_table(tables.episodes, tables.stats, env_id, peer, variant))
        ]
        if parts:
            sections.append("## Training statistics against peers\n\n" + note + "\n" + "\n".join(parts))
    ablations = runs[~runs["variant"].isin(peers)]
    if (ablations["variant"] != "default").any() and (ablations["variant"] == "default").any():
        note = (
            "Return: the mean over seeds of each run's score, with a 95% percentile-bootstrap interval over seeds (with 3 "
            "seeds it spans the lowest to the highest seed: a resample of one seed three times has probability 1/27). "
            "The figures below draw the default's mean and band on every variant's panel.\n\n"
        )
        sections.append("## Each variant against the default\n\n" + note + ablation_table(ablations) + "\n")
    sections.append("## Learning curves\n")
    for env_id, env_runs in runs.groupby("env_id"):
        png = f"{env_id}.png"
        plot_env(env_runs, env_id, output / png, peers)
        sections.append(f"![{env_id}]({png})\n")
    sections.append("## Runs\n\n" + runs_table(tables.runs) + "\n")
    notes = data / "notes.md"  # hand-written, kept with the data so that a rebuild keeps it
    if notes.exists():
        sections.append("## Notes\n\n" + notes.read_text().strip() + "\n")
    used = sorted({source for env_id, (_, source) in REFERENCE_SCORES.items() if env_id in set(runs["env_id"])})
    if used:
        sections.append("## Reference scores\n\n" + "\n".join(f"- {name}: {SOURCES[name]}" for name in used) + "\n")
    (output / "README.md").write_text("\n".join(sections))
    print(f"wrote {output / 'README.md'} and {runs['env_id'].nunique()} PNGs")


if __name__ == "__main__":
    main()
