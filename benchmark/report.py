"""Summarizes a results folder written by benchmark/run.py: a Markdown table (mean ± sample std over seeds of each run's
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
wall time, commit, machine, peer, and agents: the runs its process trained) and stats.csv.gz (each update's logged
losses/<name>), small enough to commit (and compare.txt, the --compare pairs).
Reading a runs folder adds its runs to that data (replacing runs of the same env, variant and seed, keeping the
others), so a matrix can be finished over several sittings and machines, and benchmark/run.py skips the runs the data
already holds. A run that has not finished, or whose logs end short of the steps it was run for (an event file cut
short), is left out of the data and named, on stderr and in the README; a data file cut mid-line or damaged is refused
in one line.

The parts, beside this file: report_data.py (reading the runs, keeping and checking the data), report_stats.py (the
statistics, each a library call: scipy's bootstrap and Mann-Whitney test, rliable's IQM), report_tables.py (the
Markdown tables), report_figures.py (the learning curves) and report_table1.py (the PPO paper's Table 1 section). A
"±" over seeds is the sample standard deviation (ddof 1), in the tables and in the figures' bands.
"""

import argparse
import os
import shlex
import shutil
import sys
from pathlib import Path

from report_data import merge_data, read_csv, read_data, read_runs_folder, summarize, taken_runs, writable, write_data
from report_figures import plot_env
from report_table1 import PAPER_TABLE1, TABLE1_SETTINGS, plot_table1, plot_table1_curves, table1_section
from report_tables import (REFERENCE_SCORES, SOURCES, ablation_table, aggregate_iqm, comparison_table, floor_section,
                           peer_table, runs_table, score_table, statistics_table, variant_order)  # fmt: skip

# What the report writes in data/ (write_data's files, and the commands and --compare pairs kept for rebuilds)
DATA_FILES = ["episodes.csv.gz", "runs.csv", "stats.csv.gz", "commands.txt", "compare.txt"]


def check_output(output: Path):
    """Exits in one line, before anything is read or written, where the report could not write its files in output, or
    would write through a link: a results folder from elsewhere (a clone, an archive) whose README.md, data/, a file in
    data/ or a PNG is a link would otherwise have the file it points to, outside the folder, overwritten."""
    data = output / "data"
    written = [output / "README.md", data, *(data.iterdir() if data.is_dir() and not data.is_symlink() else [])]
    for path in written + sorted(output.glob("*.png")):
        if path.is_symlink():
            raise SystemExit(f"error: {path} is a link (to {os.readlink(path)}): the report writes its files in place, never "
                             f"through a link; remove the link (rm {path}) or pass another --output")  # fmt: skip
    for folder in [output] + ([data] if data.is_dir() else []):  # output, or the nearest folder above it (made if missing)
        if why := writable(folder):
            raise SystemExit(f"error: {why}; pass --output a folder you can write to")
    for path in [output / "README.md", *(data / name for name in DATA_FILES)]:
        if path.exists() and not os.access(path, os.W_OK):  # a file of the report made read-only
            raise SystemExit(f"error: cannot write {path} (Permission denied); make it writable or pass another --output")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a folder written by benchmark/run.py, or a results folder with data/ to rebuild")
    parser.add_argument("--output", help="where README.md, the PNGs and data/ go (default: the folder)")
    parser.add_argument("--last", type=int, default=100, help="episodes at the end of each run that make its score")
    parser.add_argument("--take", nargs=3, action="append", metavar=("RESULTS", "VARIANT", "NAME"),
                        help="keep beside these runs those of VARIANT in the results folder RESULTS (its data/), on the "
                        "same env ids, as variant NAME; e.g. --take benchmark/results/mujoco default full-obs")  # fmt: skip
    parser.add_argument("--compare", nargs=2, action="append", metavar=("BASE", "VARIANT"),
                        help="a section of VARIANT against BASE on each env: the difference of their scores with a "
                        "bootstrap interval (kept in data/compare.txt, so that a rebuild from the data has it; a new "
                        "--compare replaces those kept)")  # fmt: skip
    options = parser.parse_args(argv)
    root = Path(options.folder)
    if not root.is_dir():
        raise SystemExit(f"error: {root}: no such folder; pass the --out folder of benchmark/run.py or a results folder")
    output = Path(options.output or root)
    if output.exists() and not output.is_dir():
        raise SystemExit(f"error: --output {output} is a file; pass a folder (README.md, the PNGs and data/ go into it)")
    check_output(output)
    data = output / "data"
    left_out = []  # runs of this folder that the data leave out, and why
    new, kept = read_runs_folder(root, left_out), read_data(data)
    if new is None and kept is None and read_data(root / "data") is not None:  # a results folder rebuilt elsewhere
        shutil.copytree(root / "data", data, dirs_exist_ok=True)  # its data go along, so the new report rebuilds alone
        kept = read_data(data)
    scripts_runs = [path for pattern in ("*/", "runs/*/") for path in root.glob(pattern + "events.out.tfevents*")]
    if new is None and kept is None and scripts_runs:
        raise SystemExit(  # a script's own runs/ (ppo_continuous_action_seeds.py's, the README's many-seeds command)
            f"error: {root}: a script's runs/<run>/ folders, which record neither which runs finished nor their budget; "
            "train them with benchmark/run.py --batch-seeds (its --out keeps each run's record), then run: python "
            "benchmark/report.py <out>"
        )
    if new is None and kept is None:
        raise SystemExit(f"error: {root}: no runs with TensorBoard logs and no {data / 'runs.csv'}; point it at a folder "
                         "written by benchmark/run.py or at a results folder with its data/")  # fmt: skip
    tables = kept if new is None else merge_data(kept, new)
    for results, variant, name in options.take or []:  # the committed runs of another report, kept in this one's data
        if new is None:
            raise SystemExit(f"error: --take adds runs to those of a runs folder; {root} holds none")
        if name in set(new.runs["variant"]):
            raise SystemExit(f"error: --take {results} {variant} {name}: {root} has a variant {name}; choose another NAME")
        tables = merge_data(tables, taken_runs(Path(results), variant, name, sorted(tables.runs["env_id"].unique())))
    variants = sorted(set(tables.runs["variant"]))
    unknown = sorted({name for pair in options.compare or [] for name in pair} - set(variants))
    if unknown:  # before anything is written
        raise SystemExit(f"error: --compare {' '.join(unknown)}: no such variant here; choose among {', '.join(variants)}")
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
    # a results folder rebuilt (from its data/, no runs read) is titled after itself, wherever the report goes
    title = root.resolve().name if new is None and (root / "data" / "runs.csv").exists() else output.resolve().name
    pngs = []  # the figures written, counted at the end

    sections = [f"# Results: {title}\n"]
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
        pngs += [output / "table1.png", output / "table1_curves.png"]
        sections.append(
            "## The PPO paper's Table 1\n\n![Table 1](table1.png)\n\n" + table1_section(runs, random) + "\n\n"
            + TABLE1_SETTINGS + "\n\n![Learning curves by family](table1_curves.png)\n"
        )  # fmt: skip
    sections.append("## Scores\n\n" + score_table(runs, options.last) + "\n")
    compare = data / "compare.txt"  # the --compare pairs, kept for rebuilds
    if options.compare:
        compare.write_text("".join(f"{base} {variant}\n" for base, variant in options.compare))
    for base, variant in [line.split() for line in compare.read_text().splitlines()] if compare.exists() else []:
        note = "A return is the mean ± the sample standard deviation over seeds; the interval resamples each side's seeds.\n\n"
        sections.append(f"## {variant} against {base}\n\n" + note + comparison_table(runs, base, variant) + "\n")
    iqm = aggregate_iqm(runs) if runs["env_id"].nunique() > 1 and not table1 else ""
    if iqm:
        sections.append("## Aggregate over tasks (rliable)\n\n" + iqm + "\n")
    table = tables.runs
    peers = dict(table[["variant", "peer"]].dropna().drop_duplicates().values) if "peer" in table else {}
    if peers and (runs["variant"] == "default").any():
        cleanrl = "cleanrl" in peers  # the notes on CleanRL's logging below are for it alone
        given = "run with its own defaults" if cleanrl else "run with the flags its --peer gave it (the commands above)"
        note = (
            f"Ours is the default variant; a peer is another project's script {given} (benchmark/run.py "
            "--peer). A return is the mean ± the sample standard deviation over seeds; the interval resamples each "
            "side's seeds on its own; ours is level where it contains 0.\n\n"
        )
        sections.append("## Ours against peers\n\n" + note + peer_table(runs, peers) + "\n")
        floors = floor_section(runs, peers)
        if floors:
            sections.append(floors)
        note = (
            "Training statistics at equal steps, ours / peer: each one's mean over the updates (episode length: over the "
            "episodes) that fell in each span of steps, then over seeds. Ours logs each update's mean over all its "
            "minibatches; "
            + (
                "CleanRL's logs those of the update's last minibatch (clipfrac: the mean over all), so its approx_kl "
                "reads higher than a mean over the update would (the KL from the rollout's policy grows over the epochs, "
                "from 0 at the first minibatch): compare shapes and orders of magnitude, not the last digit. CleanRL's "
                "ppo_atari.py counts an episode's length in emulator frames (its episode statistics wrap the env below the "
                "frame skip), ours in agent steps of 4 frames each.\n"
                if cleanrl
                else "a peer's are what it logs under the same names (benchmark/run.py's peer writes them).\n"
            )
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
        pngs.append(output / png)
        sections.append(f"![{env_id}]({png})\n")
    sections.append("## Runs\n\n" + runs_table(tables.runs) + "\n")
    notes = data / "notes.md"  # hand-written, kept with the data so that a rebuild keeps it
    if notes.exists():
        sections.append("## Notes\n\n" + notes.read_text().strip() + "\n")
    used = sorted({source for env_id, (_, source) in REFERENCE_SCORES.items() if env_id in set(runs["env_id"])})
    if used:
        sections.append("## Reference scores\n\n" + "\n".join(f"- {name}: {SOURCES[name]}" for name in used) + "\n")
    (output / "README.md").write_text("\n".join(sections))
    print(f"wrote {output / 'README.md'} and {len(pngs)} PNGs")


if __name__ == "__main__":
    main()
