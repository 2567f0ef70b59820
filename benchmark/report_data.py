"""The data of a results folder (benchmark/report.py): read from the run folders benchmark/run.py writes (their
TensorBoard logs and done.json), kept in <results>/data/ (episodes.csv.gz, runs.csv, stats.csv.gz), read back with
every file checked, and summed up as one row per run (its score and learning curve)."""

import csv
import gzip
import io
import json
import os
import shlex
import sys
import tempfile
import zlib
from glob import glob
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

# Training statistics kept per update (TensorBoard's losses/<name>, the names of ours and of CleanRL's scripts)
STATS = ["policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac", "explained_variance"]


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


def writable(folder: Path):
    """Why no file can be made in `folder`, or in the nearest folder above it (the tools make those missing): the file
    system's reason (read-only, another user's), tried by making one, which sees what permission bits do not (root, a
    read-only mount); None where it can."""
    nearest = next(path for path in [folder, *Path(folder).absolute().parents] if path.is_dir())
    try:
        with tempfile.TemporaryFile(dir=nearest):
            return None
    except OSError as error:
        return f"cannot write in {nearest} ({error.strerror})"


def link_outside(root: Path, folder: Path, files):
    """The first link on the way from root to folder or to one of the files (in it) that leads outside root, or None."""
    inside = root.resolve()
    for path in [folder, *files]:
        if not path.resolve().is_relative_to(inside):
            parts = path.relative_to(root).parts  # the first step outside is the link: the one before it is inside
            steps = (root.joinpath(*parts[: k + 1]) for k in range(len(parts)))
            return next(step for step in steps if not step.resolve().is_relative_to(inside))
    return None


def runners_record(done):
    """Whether a done.json's content is what benchmark/run.py writes: a record whose command, commit, machine and peer
    are text, whose seconds a number and whose seeds_in_process a count, where it has them."""
    if not isinstance(done, dict):
        return False
    texts = all(isinstance(done.get(field), (str, type(None))) for field in ("command", "commit", "machine", "peer"))
    seconds, agents = done.get("seconds"), done.get("seeds_in_process", 1)
    number = seconds is None or (isinstance(seconds, (int, float)) and not isinstance(seconds, bool))
    count = isinstance(agents, int) and not isinstance(agents, bool) and agents >= 1
    return texts and number and count


def read_runs_folder(root: Path, left_out=None):
    """(episodes, runs, stats) tables of the finished runs (those with done.json) of a folder written by benchmark/run.py:
    the episodes and the updates' statistics from its TensorBoard logs; per run the last logged SPS and, from done.json,
    the wall time, the commit, the machine and the peer. A run not finished, whose logs end an iteration or more short
    of the --total-timesteps of its command, or that is a link to a run outside root (or has its logs there), is left
    out, named on stderr and, with why, in `left_out` (a list)."""
    episodes, runs, stats = [], [], []

    def skip(folder, why, fix=""):  # stderr names the folder; the README the run
        print(f"skipped {folder}: {why}{fix}", file=sys.stderr)
        if left_out is not None:
            left_out.append(f"{folder.parts[-3]} {folder.parts[-2]} seed {folder.name[len('seed') :]}: {why}")

    for folder in sorted(root.glob("*/*/seed*")):
        if not folder.name[len("seed") :].isdigit():  # seedX, seed1-copy: its seed would be guessed
            skip(folder, "not a run folder of benchmark/run.py (seed<k>, k a whole number)", "; rename or move it")
            continue
        link = link_outside(root, folder, [folder / "done.json", *folder.glob("runs/*/events.out.tfevents*")])
        if link is not None:  # a run kept elsewhere is not this folder's, whatever its name says
            skip(folder, f"it links outside {root} ({link} to {os.readlink(link)})", "; copy the run in place of the link")
            continue
        try:
            done = json.loads((folder / "done.json").read_text()) if (folder / "done.json").exists() else {}
        except json.JSONDecodeError:  # cut by a kill while it was written
            skip(folder, "its done.json is damaged", "; delete it and run benchmark/run.py again to finish the run")
            continue
        if not runners_record(done):  # a list, a command that is no text: edited, or written by something else
            fix = "; delete it and run benchmark/run.py again, which records a finished run from its files"
            skip(folder, "its done.json is not a record of benchmark/run.py", fix)
            continue
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
        recorded = {field: done.get(field) for field in ("seconds", "commit", "machine", "peer")}
        agents = done.get("seeds_in_process", 1)  # the runs its process trained (run.py --batch-seeds: many)
        runs.append({**key, "sps": sps, **recorded, "agents": agents})
    if not runs:
        return None
    stats = pd.concat(stats, ignore_index=True) if stats else None
    return Tables(pd.concat(episodes, ignore_index=True), pd.DataFrame(runs), stats)


# The columns of the data files (and of random.csv) that must hold a value, an integer or a number (or be empty)
FILLED = set(KEYS) | {"step"}
INTEGERS = {"seed", "step", "episodic_length", "episode", "length", "agents"}
NUMBERS = INTEGERS | {"sps", "seconds", "episodic_return", "return"} | set(STATS)


def read_csv(path: Path, fix: str):
    """pd.read_csv of a data file, refused in one line (SystemExit: the file, the line, `fix`) where it is cut or
    damaged: compressed data that end early, a file that does not end with a newline (write_data ends each with one, so
    the last line was cut, however it parses), a row whose fields are not its header's, or a value missing from a FILLED
    column or not of its column's type, or an env id with a slash (it names a PNG). A file cut exactly at the end of a line
    is a shorter file: no check sees it."""

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
    # an env id names its figure, <env id>.png beside the README: with a slash the figure would go into another folder,
    # outside the results folder where the id is "../..."
    slashed = np.flatnonzero(table["env_id"].astype(str).str.contains("/", regex=False)) if "env_id" in table else []
    if len(slashed):
        row, name = int(slashed[0]), table["env_id"].iloc[slashed[0]]
        refuse(f"line {lines[row]} is malformed (env_id '{name}' holds a slash, and it names a file of the report)")
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


def taken_runs(results: Path, variant: str, name: str, env_ids):
    """report.py --take: the runs of `variant` on `env_ids` that the data of another results folder keep, renamed
    `name` (the committed runs of another report, shown beside this one's); exits in one line where there are none."""
    tables = read_data(results / "data")
    if tables is None:
        raise SystemExit(f"error: --take {results}: no {results / 'data' / 'runs.csv'}; pass a results folder with its data/")
    rows = lambda t: t[(t["variant"] == variant) & t["env_id"].isin(env_ids)].assign(variant=name)  # noqa: E731
    taken = Tables(*(None if table is None else rows(table) for table in tables))
    if taken.runs.empty:
        raise SystemExit(
            f"error: --take {results} {variant} {name}: its data hold no runs of {variant} on {', '.join(env_ids)}"
        )
    return taken


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
    if "agents" in runs:  # empty for runs kept from before it was recorded
        runs = runs.assign(agents=runs["agents"].astype("Int64"))
    runs.sort_values(KEYS).to_csv(data / "runs.csv", index=False)
    if stats is not None:
        stats = stats.reindex(columns=order + [name for name in STATS if name in stats]).sort_values(order, kind="stable")
        stats.to_csv(data / "stats.csv.gz", index=False, float_format="%.4g", compression={"method": "gzip", "mtime": 0})


def summarize(tables, last: int):
    """One row per run: env_id, variant, seed, score (mean return of its last `last` episodes), sps, seconds, machine,
    the runs its process trained (agents), curve data; NaN where runs.csv does not say."""
    episodes, runs, _ = tables
    rows = []
    for (env_id, variant, seed), run in episodes.groupby(KEYS, sort=True):
        steps, returns = run["step"].to_numpy(), run["episodic_return"].to_numpy()
        row = runs[(runs["env_id"] == env_id) & (runs["variant"] == variant) & (runs["seed"] == seed)]
        said = {c: row[c].iloc[0] if c in row and len(row) else np.nan for c in ("sps", "seconds", "machine", "agents")}
        rows.append(
            {"env_id": env_id, "variant": variant, "seed": int(seed), "score": returns[-last:].mean(), **said}
            | {"steps": steps, "returns": returns}
        )
    return pd.DataFrame(rows)
