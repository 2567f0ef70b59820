"""benchmark/: the runner on a tiny matrix (layout, skipping finished runs, commands, Slurm script), the report built
from its logs (table, PNG, aggregate IQM), the ablation preset against docs/details.md, and benchmark/sps.py."""

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tyro
from conftest import ROOT, contract_flags, load_script, needs
from ppo_utils.flag_checks import check_flags
from scipy.stats import trim_mean

import report  # benchmark/report.py (pyproject.toml puts benchmark/ on pytest's path)
import run  # benchmark/run.py

TINY = ["--script", "ppo_continuous_action.py", "--env-ids", "InvertedPendulum-v5", "--seeds", "1", "2"]
TINY += ["--total-timesteps", "2048"]


def runner(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "run.py"), *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two 2k-step runs on two workers, then the same command again."""
    out = tmp_path_factory.mktemp("bench") / "tiny"
    first = runner(*TINY, "--workers", "2", "--out", str(out))
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/*/*/done.json")}
    second = runner(*TINY, "--workers", "2", "--out", str(out))
    return out, first, second, stamps


def test_runner_writes_one_folder_per_run_with_logs(tiny):
    out, first, _, _ = tiny
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[2/2]" in first.stdout
    for seed in (1, 2):
        folder = out / "InvertedPendulum-v5" / "default" / f"seed{seed}"
        record = json.loads((folder / "done.json").read_text())
        assert record["returncode"] == 0 and f"--seed {seed}" in record["command"]
        assert "CPUs" in record["machine"] and record["commit"]  # what the report states of each run
        assert len(list(folder.glob("runs/*/events.out.tfevents*"))) == 1
        assert "step 2048/2048" in (folder / "output.log").read_text()


def test_runner_skips_finished_runs(tiny):
    out, _, second, stamps = tiny
    assert second.returncode == 0, second.stdout + second.stderr
    assert "2 already done, 0 to run" in second.stdout
    assert len(stamps) == 2 and all(p.stat().st_mtime_ns == t for p, t in stamps.items())


@pytest.mark.slow
def test_runner_records_the_commit_a_run_started_from(tmp_path, monkeypatch):
    """A commit made while a run trains is not the code it ran: done.json names the checkout at the run's start."""
    import threading

    head = {"now": "abc1234"}

    class Training:  # the run's process, during which somebody commits
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait(self):
            head["now"] = "def5678"
            return 0

    monkeypatch.setattr(run, "commit", lambda: head["now"])
    monkeypatch.setattr(run.subprocess, "Popen", Training)
    monkeypatch.setattr(run, "machine", lambda: "a machine")  # it would start processes too
    one = run.Run("ppo_continuous_action.py", "InvertedPendulum-v5", "default", 1, 2048)
    assert run.execute(one, tmp_path, threading.Event())[2]
    assert json.loads((one.folder(tmp_path) / "done.json").read_text())["commit"] == "abc1234"


@pytest.mark.slow
def test_runner_marks_a_commit_changed_only_when_its_code_differs(tmp_path):
    """Editing a report while runs start leaves their commit clean; an edited script or requirements.txt marks it."""

    def git(*args):
        command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
        subprocess.run(command, cwd=tmp_path, check=True, capture_output=True)

    files = {"train.py": "x = 1\n", "requirements.txt": "torch\n", "notes.md": "a\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "first")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True, text=True)
    head = head.stdout.strip()
    assert run.commit(tmp_path) == head
    (tmp_path / "notes.md").write_text("b\n")
    (tmp_path / "untracked.py").write_text("y = 2\n")
    assert run.commit(tmp_path) == head
    for name in ("train.py", "requirements.txt"):
        (tmp_path / name).write_text("changed\n")
        assert run.commit(tmp_path) == head + "+changes", name
        git("checkout", "--", name)


PEER = """import json, os, sys
json.dump({"argv": sys.argv[1:], "threads": os.environ.get("OMP_NUM_THREADS"), "gl": os.environ.get("MUJOCO_GL")},
          open("seen.json", "w"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_runner_runs_a_peer_with_its_own_defaults_and_shares_the_cpus(tmp_path, workers):
    """A peer is one more variant: its script gets --env-id, --seed and --total-timesteps alone (no --flags, which
    are ours), in <out>/<env>/<peer name>/seed<k>/. Each run gets the CPUs divided among the workers as torch
    threads, and MUJOCO_GL is not set for it (nothing renders)."""
    peer = tmp_path / "elsewhere" / "their_ppo.py"
    peer.parent.mkdir()
    peer.write_text(PEER)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "run.py"), *TINY, "--out", str(out), "--workers", str(workers)]
        + ["--peer", f"theirs={peer}", "--flags=--no-gae", "--print-commands"],
        capture_output=True,
        text=True,
        env=env,
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 4 and sum("their_ppo.py" in line for line in lines) == 2 and "--no-gae" not in lines[-1]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "ppo_atari.py", "--env-ids", "Pong", "Breakout"]
        + ["--seeds", "3", "--total-timesteps", "7", "--peer", f"theirs={peer}", "--variant", "skip=--no-gae"]
        + ["--out", str(out), "--workers", str(workers), "--index", "1"],  # runs only the matrix's second run
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads((out / "Pong" / "theirs" / "seed3" / "seen.json").read_text())
    assert seen["argv"] == ["--env-id", "Pong", "--seed", "3", "--total-timesteps", "7"]
    assert seen["threads"] == str(max(1, os.cpu_count() // workers)) and seen["gl"] is None
    assert (out / "Pong" / "theirs" / "seed3" / "done.json").exists() and not (out / "Pong" / "skip").exists()


def test_runner_refuses_a_missing_peer_in_one_line(tmp_path):
    done = runner(*TINY, "--peer", f"theirs={tmp_path / 'nothing.py'}", "--print-commands")
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0 and "--peer theirs=" in done.stderr


@pytest.mark.slow
def test_a_presets_peer_is_found_through_its_environment_variable(tmp_path):
    """The atari preset runs CleanRL's ppo_atari.py beside ours, from the folder CLEANRL_DIR names; unset, or naming a
    folder without it, the runner stops with one line saying what to set (or --peer NAME=PATH)."""
    (tmp_path / "cleanrl").mkdir()
    (tmp_path / "cleanrl" / "ppo_atari.py").write_text("")
    preset = [
        "--preset",
        "atari",
        "--seeds",
        "1",
        "--env-ids",
        "PongNoFrameskip-v4",
        "--out",
        str(tmp_path / "x"),
        "--results",
        str(tmp_path / "no-results"),
    ]  # the committed Pong seed 1 would be skipped
    env = {key: value for key, value in os.environ.items() if key != "CLEANRL_DIR"}
    unset = subprocess.run([sys.executable, str(ROOT / "benchmark" / "run.py"), *preset, "--print-commands"], env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert unset.returncode == 1 and unset.stderr.count("\n") == 1, unset.stderr
    assert unset.stderr.startswith("error: peer cleanrl of --preset atari: CLEANRL_DIR is not set; set CLEANRL_DIR")
    found = subprocess.run([sys.executable, str(ROOT / "benchmark" / "run.py"), *preset, "--print-commands"],
                           env={**env, "CLEANRL_DIR": str(tmp_path / "cleanrl")}, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    lines = found.stdout.strip().splitlines()
    assert found.returncode == 0 and len(lines) == 2 and str(tmp_path / "cleanrl" / "ppo_atari.py") in lines[1], found.stderr


def test_runner_prints_commands_and_writes_a_slurm_array(tmp_path):
    printed = runner(*TINY, "--out", str(tmp_path / "x"), "--print-commands")
    lines = printed.stdout.strip().splitlines()
    assert printed.returncode == 0 and len(lines) == 2
    assert all(line.startswith("cd ") and "InvertedPendulum-v5" in line for line in lines)
    assert "--seed 1" in lines[0] and "--seed 2" in lines[1]
    assert not (tmp_path / "x").exists()  # printing runs nothing

    job = tmp_path / "job.sbatch"
    written = runner(*TINY, "--out", str(tmp_path / "x"), "--slurm", str(job))
    text = job.read_text()
    assert written.returncode == 0 and "#SBATCH --array=0-1" in text
    assert "--index $SLURM_ARRAY_TASK_ID" in text and "--slurm" not in text


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--variant", "no-equals-sign"], "--variant"),
        (["--index", "9"], "--index"),
        (["--script", "ppo_missing.py"], "--script"),
        (["--workers", "0"], "--workers"),
    ],
)
def test_runner_bad_input_is_one_line(tmp_path, args, flag):
    result = runner(*TINY, "--out", str(tmp_path / "x"), *args)
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert flag in message and "Traceback" not in result.stderr


def report_of(folder, output):
    built = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "report.py"), str(folder), "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return (output / "README.md").read_text()


def score_row(text):
    return next(line for line in text.splitlines() if line.startswith("| InvertedPendulum-v5 | default |"))


@pytest.mark.slow
def test_report_builds_table_png_and_matches_the_event_files(tiny, tmp_path):
    out = tiny[0]
    text = report_of(out, tmp_path)
    png = (tmp_path / "InvertedPendulum-v5.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    assert "python benchmark/run.py" in text  # the runner's command is recorded
    reported = float(re.search(r"\| 2 \| ([-0-9.]+) ± ([0-9.]+) \|", score_row(text)).group(1))

    # the same score read independently: the raw event records, last 100 episodes per seed, mean over seeds
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    scores = []
    for events in sorted(out.glob("InvertedPendulum-v5/default/seed*/runs/*/events.out.tfevents*")):
        records = [  # (step, tag, value) of the returns and losses in the file, read once
            (event.step, value.tag, value.tensor.float_val[0] if value.HasField("tensor") else value.simple_value)
            for event in EventFileLoader(str(events)).Load()
            for value in event.summary.value
            if value.tag == "charts/episodic_return" or value.tag.startswith("losses/")
        ]
        returns = [value for _, tag, value in records if tag == "charts/episodic_return"]
        scores.append(np.mean(returns[-100:]))
        # each update's losses/<name> as logged, against those the report keeps in its data
        logged = {(step, tag[len("losses/") :]): value for step, tag, value in records if tag.startswith("losses/")}
        seed = int(events.parts[-4][len("seed") :])
        kept = pd.read_csv(tmp_path / "data" / "stats.csv.gz").query("seed == @seed").set_index("step")[report.STATS]
        assert len(logged) == kept.size > 0 and set(kept) == {name for _, name in logged}
        assert all(kept.loc[step, name] == pytest.approx(value, rel=1e-3) for (step, name), value in logged.items())
    assert reported == pytest.approx(np.mean(scores), abs=0.06)


@pytest.mark.slow
def test_report_rebuilds_from_its_committed_data_alone(tiny, tmp_path):
    """What a fresh clone has: the results folder's README, PNGs and data/, no run folders. Rebuilding from data/
    gives the same table, and the data are compact."""
    first = report_of(tiny[0], tmp_path / "results")
    clone = tmp_path / "clone" / "results"
    shutil.copytree(tmp_path / "results" / "data", clone / "data")
    rebuilt = report_of(clone, clone)
    assert score_row(rebuilt) == score_row(first)
    assert (clone / "InvertedPendulum-v5.png").read_bytes().startswith(b"\x89PNG")
    assert "python benchmark/run.py" in rebuilt  # the commands that made the data travel with them
    runs_row = next(line for line in rebuilt.splitlines() if line.startswith("| InvertedPendulum-v5 | default | 1, 2 |"))
    assert "CPUs" in runs_row and " min" in runs_row  # the machine and the wall times travel too
    (clone / "data" / "notes.md").write_text("Seeds 1 and 2 ran on two workers.")
    assert "## Notes\n\nSeeds 1 and 2 ran on two workers." in report_of(clone, clone)
    episodes = pd.read_csv(clone / "data" / "episodes.csv.gz")
    assert sorted(episodes["seed"].unique()) == [1, 2] and (clone / "data" / "episodes.csv.gz").stat().st_size < 20_000
    elsewhere = tmp_path / "elsewhere"  # a results folder rebuilt into another: its data go along
    assert score_row(report_of(clone, elsewhere)) == score_row(first)
    assert sorted(os.listdir(elsewhere / "data")) == sorted(os.listdir(clone / "data"))


def logged_run(seed_folder, returns, length=None, approx_kl=(), iteration=None, **done):
    """A finished run as benchmark/run.py leaves it: TensorBoard episodes (one every 10 steps, each `length` long where
    given), losses/approx_kl as (step, value) pairs, charts/SPS at the end (and, given `iteration`, at the end of each
    iteration of that many steps, between the episodes), and done.json."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(seed_folder / "runs" / "run"))
    for step, value in enumerate(returns):
        writer.add_scalar("charts/episodic_return", value, step * 10)
        if length is not None:
            writer.add_scalar("charts/episodic_length", length, step * 10)
        if iteration and step and step * 10 % iteration == 0:
            writer.add_scalar("charts/SPS", 100, step * 10)
    for step, value in approx_kl:
        writer.add_scalar("losses/approx_kl", value, step)
    writer.add_scalar("charts/SPS", 100, 10 * len(returns))
    writer.close()
    done = {"returncode": 0, "seconds": 60, "commit": "abc", "machine": "m", **done}
    (seed_folder / "done.json").write_text(json.dumps(done))


@pytest.mark.slow
def test_report_sets_ours_against_a_peer_with_the_differences_interval(tmp_path):
    """Hand-made scores (each run's episodes all equal its score), three seeds a side in A-C. A: ours 5, 5, 5 against 3, 3, 3:
    +2.0, interval [+2.0, +2.0], above. B: 1, 2, 3 on both sides: +0.0, level; a resampled side's sum S of three draws
    takes 3..9 with weights 1, 3, 6, 7, 6, 3, 1 (/27), so the difference (S1 - S2) / 3 is >= 4/3 with probability (1 + 6
    + 21) / 729 = 3.8% and >= 5/3 with 7 / 729 = 1.0%: the 97.5th percentile is 4/3, the interval [-1.3, +1.3]. C: ours
    1, 1, 1 against 4, 5, 6: -4.0 and an interval inside [1 - 6, 1 - 4] = [-5, -3], below. D: ours 5, 5 against a single
    3: +2.0 and no verdict, which one seed cannot give. The peer is not listed as an ablation variant, and the rebuild
    from the data alone says the same."""
    scores = {"A": ([5, 5, 5], [3, 3, 3]), "B": ([1, 2, 3], [1, 2, 3]), "C": ([1, 1, 1], [4, 5, 6]), "D": ([5, 5], [3])}
    for env, (ours, theirs) in scores.items():
        for seed, score in enumerate(ours, 1):
            logged_run(tmp_path / "runs" / env / "default" / f"seed{seed}", [score] * 4)
        for seed, score in enumerate(theirs, 1):
            logged_run(tmp_path / "runs" / env / "theirs" / f"seed{seed}", [score] * 4, peer="their_ppo.py")
    first = report_of(tmp_path / "runs", tmp_path / "results")
    clone = tmp_path / "clone"
    shutil.copytree(tmp_path / "results" / "data", clone / "data")
    for text in (first, report_of(clone, clone)):
        section = text.split("## Ours against peers")[1].split("\n## ")[0]
        rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in section.splitlines() if line.startswith("| ")}
        assert rows["A"][2] == "theirs (their_ppo.py)" and rows["A"][4:] == ["+2.0 [+2.0, +2.0]", "**above** |"]
        assert rows["B"][4] == "+0.0 [-1.3, +1.3]" and rows["B"][5] == "**level** |"
        difference, low, high = map(float, re.findall(r"[-+]\d+\.\d", rows["C"][4]))
        assert difference == -4.0 and -5 <= low < high <= -3 and rows["C"][5] == "**below** |"
        assert rows["D"][4:] == ["+2.0 (one seed on a side: no interval)", "none given yet |"]  # A's case, one peer seed
        assert "## Each variant against the default" not in text  # the peer is no ablation variant
    assert "| theirs |" in first  # its runs are listed with the others


@pytest.mark.slow
def test_report_sets_training_statistics_of_ours_and_a_peer_side_by_side_at_equal_steps(tmp_path):
    """Hand-made logs on steps 0-35 (four spans of 8.75 steps): approx_kl once per span, at steps 5, 15, 25, 35, and
    ours' seed 1 once more at step 6. Each cell is the mean over seeds of each seed's mean in the span: ours' first
    span (0.01 and 0.03 from seed 1, 0.03 from seed 2) is (0.02 + 0.03) / 2 = 0.025, not the pooled 0.0233; then
    (0.02 + 0.04) / 2 = 0.03, 0.04 and 0.05. The peer's seeds log 1 and 3 throughout: 2. Episode lengths: every
    episode 100 long on our side and 200 on the peer's. A variant of ours (a switch flipped) gets its own table against
    the peer: 0.5 throughout, 50-step episodes. An env with ours alone gets no table; the rebuild from the data alone
    says the same."""
    kl = {1: [(5, 0.01), (6, 0.03), (15, 0.02), (25, 0.03), (35, 0.04)], 2: [(5, 0.03), (15, 0.04), (25, 0.05), (35, 0.06)]}
    for seed in (1, 2):
        logged_run(tmp_path / "runs" / "A" / "default" / f"seed{seed}", [1] * 4, length=100, approx_kl=kl[seed])
        peer_kl = [(step, 2.0 * seed - 1) for step in (5, 15, 25, 35)]
        logged_run(tmp_path / "runs" / "A" / "theirs" / f"seed{seed}", [1] * 4, 200, peer_kl, peer="their_ppo.py")
        logged_run(tmp_path / "runs" / "B" / "default" / f"seed{seed}", [1] * 4, length=100, approx_kl=kl[seed])
        switch_kl = [(step, 0.5) for step in (5, 15, 25, 35)]
        logged_run(tmp_path / "runs" / "A" / "switch" / f"seed{seed}", [1] * 4, length=50, approx_kl=switch_kl)
    first = report_of(tmp_path / "runs", tmp_path / "results")
    clone = tmp_path / "clone"
    shutil.copytree(tmp_path / "results" / "data", clone / "data")
    for text in (first, report_of(clone, clone)):
        section = text.split("## Training statistics against peers")[1].split("\n## ")[0]
        assert "### B" not in section
        tables = {part.split("\n")[0]: part for part in section.split("### ")[1:]}
        assert list(tables) == ["A: ours / theirs", "A: ours (switch) / theirs"]
        rows, switch = (
            {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in table.splitlines() if line.startswith("| ")}
            for table in tables.values()
        )
        assert rows["statistic"][0] == "steps 0-9"  # 8.75 shown to the step
        assert rows["approx_kl"] == ["0.025 / 2", "0.03 / 2", "0.04 / 2", "0.05 / 2 |"]
        assert rows["episodic_length"] == ["100 / 200"] * 3 + ["100 / 200 |"]
        assert switch["approx_kl"] == ["0.5 / 2"] * 3 + ["0.5 / 2 |"]
        assert switch["episodic_length"] == ["50 / 200"] * 3 + ["50 / 200 |"]


@pytest.mark.slow
def test_report_from_runs_equals_the_rebuild_from_its_data_to_the_last_digit(tmp_path):
    """The data keep returns rounded to 0.1; a report must not show figures that its data cannot give back. Returns
    10.04 x 4 and 10.24 average 10.08 (shown 10.1), rounded first 10.04 (shown 10.0): both reports must say 10.0."""
    logged_run(tmp_path / "runs" / "InvertedPendulum-v5" / "default" / "seed1", [10.04, 10.04, 10.04, 10.04, 10.24])
    first = report_of(tmp_path / "runs", tmp_path / "results")
    clone = tmp_path / "clone"
    shutil.copytree(tmp_path / "results" / "data", clone / "data")
    assert "| 10.0 |" in score_row(first)
    assert score_row(report_of(clone, clone)) == score_row(first)


@pytest.mark.slow
def test_report_adds_a_later_sittings_runs_to_the_data(tiny, tmp_path):
    """Seed 1 reported in one sitting, seed 2 in another: the data and the table hold both; reporting seed 2 again
    replaces it rather than adding a third run."""
    sittings = []
    for seed in (1, 2, 2):
        folder = tmp_path / f"sitting{len(sittings)}"
        shutil.copytree(
            tiny[0] / "InvertedPendulum-v5" / "default" / f"seed{seed}",
            folder / "InvertedPendulum-v5" / "default" / f"seed{seed}",
        )
        sittings.append(report_of(folder, tmp_path / "results"))
    assert "| 1 |" in score_row(sittings[0]) and "| 2 |" in score_row(sittings[1])
    assert score_row(sittings[2]) == score_row(sittings[1])
    runs = pd.read_csv(tmp_path / "results" / "data" / "runs.csv")
    assert list(runs["seed"]) == [1, 2]
    episodes = pd.read_csv(tmp_path / "results" / "data" / "episodes.csv.gz")
    both = report.read_runs_folder(tiny[0])[0]
    assert len(episodes) == len(both)  # every episode of both seeds, once


@pytest.mark.slow
def test_report_leaves_out_runs_that_have_not_finished(tiny, tmp_path):
    """A run still going (or stopped) has logged episodes but no done.json: its last episodes are not its score, so
    the table and the data hold only the finished seed, and the report says which run it left out."""
    shutil.copytree(tiny[0], tmp_path / "runs")
    (tmp_path / "runs" / "InvertedPendulum-v5" / "default" / "seed2" / "done.json").unlink()
    built = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "report.py"), str(tmp_path / "runs"), "--output", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0 and "seed2: not finished" in built.stderr
    assert "| 1 | " in score_row((tmp_path / "out" / "README.md").read_text())
    assert list(pd.read_csv(tmp_path / "out" / "data" / "runs.csv")["seed"]) == [1]


@pytest.mark.slow
def test_runner_skips_runs_whose_data_are_committed(tiny, tmp_path):
    results = tmp_path / "results"
    folder = tmp_path / "one" / "InvertedPendulum-v5" / "default" / "seed1"
    shutil.copytree(tiny[0] / "InvertedPendulum-v5" / "default" / "seed1", folder)
    report_of(tmp_path / "one", results)  # data for seed 1 only
    printed = runner(*TINY, "--out", str(tmp_path / "fresh"), "--results", str(results), "--print-commands")
    lines = printed.stdout.strip().splitlines()
    assert printed.returncode == 0 and len(lines) == 1 and "--seed 2" in lines[0]


def report_cli(*args):
    """benchmark/report.py run as a user runs it: its exit status, stdout and stderr."""
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "report.py"), *map(str, args)], capture_output=True, text=True, timeout=300
    )


def results_data(folder):
    """A results folder's data/ as write_data leaves it: task A, seeds 1-3 (SPS 2409, 2410, 2411), 20 episodes each."""
    rows = [(seed, 10 * i, 10.0 * seed) for seed in (1, 2, 3) for i in range(20)]
    episodes = pd.DataFrame(rows, columns=["seed", "step", "episodic_return"]).assign(env_id="A", variant="default")
    runs = pd.DataFrame({"env_id": "A", "variant": "default", "seed": [1, 2, 3], "sps": [2409.0, 2410.0, 2411.0]})
    runs["machine"] = "box"
    report.write_data(folder / "data", report.Tables(episodes, runs, None))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize(
    "file,damage,line",
    [
        ("runs.csv", lambda text: text[: text.rindex("2411") + 2], 4),  # cut in seed 3's SPS: its row has 4 fields of 5
        ("runs.csv", lambda text: text[:-2], 4),  # cut in its last field: the row still parses, but ends in no newline
        ("runs.csv", lambda text: text.replace("2410.0,box", "2410.0,box,9"), 3),  # a field too many
        ("runs.csv", lambda text: text.replace("2410.0", "24l0.0"), 3),  # SPS not a number
        ("runs.csv", lambda text: text.replace("default,2,", "default,2.5,"), 3),  # a seed not an integer
        ("episodes.csv.gz", lambda text: text[: text.index("\n", len(text) // 2) - 3], None),  # cut mid-line, in seed 2's
    ],
    ids=["cut-in-sps", "cut-in-last-field", "field-too-many", "sps-not-a-number", "seed-not-an-integer", "episodes-cut"],
)
def test_report_refuses_damaged_data_in_one_line(tmp_path, file, damage, line):
    """A data file cut mid-line (however its last row parses: write_data ends every file with a newline), or a row with
    fields too many or too few or a value of the wrong type, is refused: exit 1, one line naming the file and the line,
    and nothing written."""
    import gzip

    path = results_data(tmp_path / "results") / "data" / file
    text = gzip.decompress(path.read_bytes()).decode() if file.endswith(".gz") else path.read_text()
    damaged = damage(text)
    assert damaged != text
    path.write_bytes(gzip.compress(damaged.encode()) if file.endswith(".gz") else damaged.encode())
    result = report_cli(tmp_path / "results", "--output", tmp_path / "out")
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    line = line or damaged.count("\n") + 1
    assert result.stderr.startswith(f"error: {path}: line {line} ") and "report.py" in result.stderr  # and the fix
    assert not (tmp_path / "out").exists() and not (tmp_path / "results" / "README.md").exists()


@pytest.mark.slow
def test_report_refuses_a_compressed_data_file_cut_short_in_one_line(tmp_path):
    path = results_data(tmp_path / "results") / "data" / "episodes.csv.gz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    result = report_cli(tmp_path / "results")
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: {path}: ") and not (tmp_path / "results" / "README.md").exists()


@pytest.mark.slow
def test_report_leaves_out_a_run_whose_logs_end_short_of_its_budget_and_names_it(tmp_path):
    """Three finished runs of 200 steps in iterations of 40 (20 episodes, SPS logged at the end of each iteration)
    scoring 10, 1000 and 30; seed 2's event file cut in half, so its logs end near step 100. Seed 3 was run with
    --total-timesteps 205: its last iteration ends 5 steps short of that, less than an iteration, so it is complete.
    The report leaves seed 2 out of the scores and the data and names it, with how far it got, on stderr and in its
    README; the rebuild from the data alone gives the same scores."""
    runs = tmp_path / "runs" / "A" / "default"
    for seed, score in ((1, 10.0), (2, 1000.0), (3, 30.0)):
        command = f"python ppo.py --seed {seed} --total-timesteps {205 if seed == 3 else 200}"
        logged_run(runs / f"seed{seed}", [score] * 20, iteration=40, command=command)
    (events,) = (runs / "seed2").glob("runs/run/events.out.tfevents*")
    events.write_bytes(events.read_bytes()[: events.stat().st_size // 2])
    result = report_cli(tmp_path / "runs", "--output", tmp_path / "results")
    assert result.returncode == 0, result.stderr
    assert [line.split(":")[0] for line in result.stderr.splitlines()] == [f"skipped {runs / 'seed2'}"]
    text = (tmp_path / "results" / "README.md").read_text()
    left_out = text.split("## Left out\n\n")[1].split("\n## ")[0]
    (named,) = [line for line in left_out.splitlines() if line.startswith("- ")]
    reached = int(re.search(r"seed 2: its logs end at step (\d+) of 200\b", named).group(1))
    assert 50 <= reached <= 150
    scores = text.split("## Scores\n\n")[1].split("\n## ")[0]
    assert scores.splitlines()[2].split(" | ")[1:5] == ["default", "2", "20.0 ± 10.0", "10 (seed 1), 30 (seed 3)"]
    assert list(pd.read_csv(tmp_path / "results" / "data" / "runs.csv")["seed"]) == [1, 3]
    assert report_cli(tmp_path / "results").returncode == 0
    assert scores in (tmp_path / "results" / "README.md").read_text()  # the rebuild from the data


@pytest.mark.slow
def test_report_output_that_is_a_file_is_one_line(tmp_path):
    results_data(tmp_path / "results")
    (tmp_path / "out.md").write_text("mine")
    result = report_cli(tmp_path / "results", "--output", tmp_path / "out.md")
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: --output {tmp_path / 'out.md'} is a file")
    assert (tmp_path / "out.md").read_text() == "mine"


def test_learning_curve_is_each_seeds_trailing_mean_on_the_grid():
    """Hand-computed: seed A's episodes end at steps 10, 20, 30, 40 (returns 0, 10, 20, 30; window 1 since it has
    fewer than 10), seed B's at 5 and 15. On the grid 0, 10, ..., 40: NaN before a seed's first episode, linear between
    episodes, and a seed's last value after its last episode, so the end of the curve averages both seeds."""
    group = pd.DataFrame(
        {
            "steps": [np.array([10, 20, 30, 40]), np.array([5, 15])],
            "returns": [np.array([0.0, 10, 20, 30]), np.array([4.0, 8])],
        }
    )
    curves = report.curve(group, np.array([0.0, 10, 20, 30, 40]))
    np.testing.assert_allclose(curves[0], [np.nan, 0, 10, 20, 30])
    np.testing.assert_allclose(curves[1], [np.nan, 6, 8, 8, 8])


def test_bootstrap_interval_matches_the_exact_resampling_distribution():
    """With 4 seeds there are 256 equally likely resamples: the 2.5% and 97.5% quantiles of their means, enumerated
    here, are what the 10,000 random resamples estimate (a normal interval, mean -+ 1.96 standard errors, would give
    72 and 753). With 3 seeds the interval is the seeds' range: each all-one-seed resample has probability 1/27."""
    values = [100.0, 250.0, 400.0, 900.0]
    exact = [np.mean(resample) for resample in itertools.product(values, repeat=4)]
    low, high = report.bootstrap_interval(values)
    assert low == pytest.approx(np.percentile(exact, 2.5, method="inverted_cdf"), abs=10)  # 175
    assert high == pytest.approx(np.percentile(exact, 97.5, method="inverted_cdf"), abs=10)  # 737.5
    assert report.bootstrap_interval([100.0, 250.0, 900.0]) == (100.0, 900.0)


def test_ablation_table_gives_each_variant_its_interval_and_change():
    runs = pd.DataFrame(
        [
            {"env_id": "Hopper-v5", "variant": "default", "seed": s, "score": v}
            for s, v in ((1, 1000.0), (2, 1100.0), (3, 1200.0))
        ]
        + [
            {"env_id": "Hopper-v5", "variant": "G2-no-gae", "seed": s, "score": v}
            for s, v in ((1, 500.0), (2, 600.0), (3, 1150.0))
        ]
        + [{"env_id": "Hopper-v5", "variant": "G1-unclipped", "seed": s, "score": v} for s, v in ((1, 200.0), (2, 999.0))]
        + [{"env_id": "Hopper-v5", "variant": "M6-relu", "seed": s, "score": v} for s, v in ((1, 1201.0), (2, 1500.0))]
        + [{"env_id": "Hopper-v5", "variant": "M5-state-dependent-std", "seed": 1, "score": 2000.0}]
    )
    table = report.ablation_table(runs).splitlines()
    row = next(line for line in table if "G2-no-gae" in line)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    low, high = report.bootstrap_interval([500.0, 600.0, 1150.0])
    assert cells[2] == "3" and cells[3] == f"750.0 [{low:.1f}, {high:.1f}]"
    assert cells[4] == "-32%" and cells[5] == "1/3"  # (750 - 1100) / 1100; only 1150 beats the default's mean
    assert cells[6] == "overlapping"  # 1150 lies inside the default's seeds (1000 to 1200)
    verdicts = {line.split("|")[2].strip(): line.split("|")[-2].strip() for line in table[2:]}
    assert verdicts["G1-unclipped"] == "**all lower**" and verdicts["M6-relu"] == "**all higher**"  # 999 < 1000 < 1200 < 1201
    assert verdicts["M5-state-dependent-std"] == "one seed: none given"  # above all of the default's, but a single seed


def test_floor_is_left_at_the_first_episode_whose_trailing_mean_exceeds_the_threshold():
    """Episodes at steps 100, ..., 700 with returns 9, 0, 0, -3, 3, 6, 3, a window of 3 and a threshold of 3. Means of
    the last 3 from the third episode on: 3 (not above 3), -1, 0, 2, 4: left at the seventh episode, step 700 (a mean
    over fewer than 3 episodes would leave at once, 9 > 3, at step 100; >= instead of > at step 300). Threshold 4: the
    highest mean is 4, never. With the default window of 20, a run scoring 0 from its first episode leaves a -15 floor
    at its 20th."""
    steps, returns = np.arange(1, 8) * 100, [9.0, 0, 0, -3, 3, 6, 3]
    assert report.floor_left_at(steps, returns, 3.0, window=3) == 700
    assert report.floor_left_at(steps, returns, 4.0, window=3) == np.inf
    assert report.floor_left_at(np.arange(1, 26) * 10, [0.0] * 25, -15.0) == 200


def test_rank_test_is_exact_over_all_splits_with_ties_and_never():
    """U: the pairs (higher, lower) with higher > lower, plus 1/2 per tie; p: the fraction of the C(n + m, n) splits of
    the pooled values whose U is at least the observed one.
    - 4, 5, 6 against 1, 2, 3: U = 9 of 9, and 1 of the C(6, 3) = 20 splits reaches it: p = 1/20 = 0.05.
    - Five against five all one way: U = 25, p = 1 / C(10, 5) = 1/252.
    - A tie, 2, 3 against 1, 2: U = 1 + 0.5 + 1 + 1 = 3.5. The 6 splits of {2, 3, 1, 2} into pairs give U = 3.5 ({2, 3}
      either 2), 2 ({2, 2}), 2 ({3, 1}), 0.5 ({2, 1} either 2): 2 reach 3.5, p = 1/3.
    - Never (inf), 600 and never against 300 and never: U = 1 + 0 + 1 + 0.5 = 2.5 (never ties never). The splits of
      {600, inf, 300, inf}: U = 2.5 ({600, inf} either inf), 4 ({inf, inf}), 1.5 ({300, inf} and {inf, 300}), 0
      ({600, 300}): 3 of 6 reach 2.5, p = 1/2."""
    assert report.rank_test([4, 5, 6], [1, 2, 3]) == (9, pytest.approx(0.05))
    assert report.rank_test([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == (25, pytest.approx(1 / 252))
    assert report.rank_test([2, 3], [1, 2]) == (3.5, pytest.approx(1 / 3))
    assert report.rank_test([600, np.inf], [300, np.inf]) == (2.5, pytest.approx(0.5))


def test_floor_section_sets_ours_against_a_peer_per_seed_with_both_tests(monkeypatch):
    """Env A (threshold 0): every run scores 1 per episode but the peer's seed 2 (-1: never leaves), one episode every
    `spacing` steps, so a run leaves at its 20th episode, step 20 x spacing: ours 6,000, 8,000, 10,000 (seeds 1-3), the
    peer 2,000, never, 4,000 (seeds 1, 2, 4); a seed one side lacks shows "-". Ours later: each of ours is later than
    2,000 and 4,000, not than never: U = 6 of 9; 3 against 3 without ties gives U = 0..9 in 1, 1, 2, 3, 3, 3, 3, 2, 1,
    1 of the 20 splits, so p = (3 + 2 + 1 + 1) / 20 = 0.35. Scores (set by hand) ours 3, -2, 7, the peer's 9, 1, 7;
    ours lower: the peer's 9 beats all three (3), 1 beats -2 (1), 7 beats 3 and -2 and ties 7 (2.5): U = 6.5. Midranks
    of the pooled -2, 1, 3, 7, 7, 9 are 1, 2, 3, 4.5, 4.5, 6 and U is the peer's rank sum less 6; sums of at least 12.5
    need the 6 and two of the others summing to 6.5 or more: 2 with either 4.5, 3 with either 4.5, both 4.5s: p = 5/20
    = 0.25. Env B has no threshold: no table."""
    monkeypatch.setitem(report.FLOOR_THRESHOLDS, "A", 0.0)
    runs = [("default", 1, 300, 1.0, 3.0), ("default", 2, 400, 1.0, -2.0), ("default", 3, 500, 1.0, 7.0)]
    runs += [("theirs", 1, 100, 1.0, 9.0), ("theirs", 2, 100, -1.0, 1.0), ("theirs", 4, 200, 1.0, 7.0)]
    rows = [
        {"env_id": env, "variant": variant, "seed": seed, "score": score}
        | {"steps": np.arange(1, 26) * spacing, "returns": np.full(25, each)}
        for env in ("A", "B")
        for variant, seed, spacing, each, score in runs
    ]
    section = report.floor_section(pd.DataFrame(rows), {"theirs": "their_ppo.py"})
    assert "### A: ours / theirs (floor threshold 0)" in section and "### B" not in section
    table = [line for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert table == [
        "| 1 | 6,000 | 2,000 | 3.0 | 9.0 |",
        "| 2 | 8,000 | never | -2.0 | 1.0 |",
        "| 3 | 10,000 | - | 7.0 | - |",
        "| 4 | - | 4,000 | - | 7.0 |",
    ]
    assert "- ours leaves the floor later: U = 6 of 9 pairs, p = 0.35" in section
    assert "- ours' score is lower: U = 6.5 of 9 pairs, p = 0.25" in section
    assert report.floor_section(pd.DataFrame(rows[6:]), {"theirs": "their_ppo.py"}) == ""  # B alone
    # a variant of ours with a switch flipped gets its own table against the peer: seeds 1 and 2 leave at 2,000
    # (spacing 100); later than the peer's 2,000 (a tie, 1/2), never and 4,000: U = 1/2 + 1/2 = 1 of 6 pairs
    switched = [
        {"env_id": "A", "variant": "switch", "seed": seed, "score": score, "steps": np.arange(1, 26) * 100}
        | {"returns": np.full(25, 1.0)}
        for seed, score in ((1, 10.0), (2, 12.0))
    ]
    section = report.floor_section(pd.DataFrame(rows + switched), {"theirs": "their_ppo.py"})
    default, switch, against = section.split("### ")[1:]
    assert default.startswith("A: ours / theirs") and switch.startswith("A: ours (switch) / theirs (floor threshold 0)")
    table = [line for line in switch.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert table == ["| 1 | 2,000 | 2,000 | 10.0 | 9.0 |", "| 2 | 2,000 | never | 12.0 | 1.0 |", "| 4 | - | 4,000 | - | 7.0 |"]
    assert "- switch leaves the floor later: U = 1 of 6 pairs" in switch
    assert "- switch's score is lower: U = 0 of 6 pairs" in switch
    # and ours' default against the switch: its 6,000, 8,000, 10,000 are later than both 2,000s, U = 6 of 6 pairs,
    # reached by 1 of the C(5, 2) = 10 splits (p = 0.1); its scores 3, -2, 7 lie below the switch's 10 and 12: the same
    assert against.startswith("A: ours / switch (floor threshold 0)")
    table = [line for line in against.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert table == [
        "| 1 | 6,000 | 2,000 | 3.0 | 10.0 |",
        "| 2 | 8,000 | 2,000 | -2.0 | 12.0 |",
        "| 3 | 10,000 | - | 7.0 | - |",
    ]
    assert "- ours leaves the floor later: U = 6 of 6 pairs, p = 0.1" in against
    assert "- ours' score is lower: U = 6 of 6 pairs, p = 0.1" in against


def test_a_reference_score_comes_with_the_steps_it_was_taken_at():
    """The PPO paper's Atari scores are after 10M steps (its Table 6), CleanRL's MuJoCo ones at 1M: the table says so,
    and the figures draw a reference line only over runs that reach those steps (to within 10%)."""
    runs = pd.DataFrame([{"env_id": "BreakoutNoFrameskip-v4", "variant": "default", "seed": 1, "score": 50.0, "sps": 300}])
    assert report.score_table(runs, 100).splitlines()[2].endswith("| 274.8 (PPO paper, 10M steps) |")
    no_reference = report.score_table(runs.assign(variant="clip-0.1"), 100).splitlines()  # an empty column is left out
    assert [line.count("|") for line in no_reference] == [7, 7, 7] and no_reference[2].endswith("| 300 |")
    assert not report.reference_reached("BreakoutNoFrameskip-v4", 2_000_000)
    assert report.reference_reached("BreakoutNoFrameskip-v4", 10_000_000)
    assert report.reference_reached("Hopper-v5", 999_424) and not report.reference_reached("Hopper-v5", 100_000)
    assert not report.reference_reached("Swimmer-v5", 1_000_000)  # no reference


def test_runs_table_names_the_seeds_of_each_commit_and_machine():
    """Seeds copied from an older sitting that did not record their commit keep "not recorded" beside the commit of
    the seed that did, each with its seeds; a value shared by every seed stands alone."""
    runs = pd.DataFrame(
        [
            {"env_id": "Hopper-v5", "variant": "default", "seed": 2, "seconds": 540.0, "commit": None, "machine": "M"},
            {"env_id": "Hopper-v5", "variant": "default", "seed": 3, "seconds": 420.0, "commit": "abc", "machine": "M"},
            {"env_id": "Hopper-v5", "variant": "default", "seed": 1, "seconds": None, "commit": None, "machine": "M"},
        ]
    )
    row = report.runs_table(runs).splitlines()[2]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[2:] == ["1, 2, 3", "-, 9 min, 7 min", "abc (seed 3); not recorded (seeds 1, 2)", "M"]


@needs("rliable")
def test_aggregate_iqm_is_the_trimmed_mean_of_normalized_scores():
    """Over the tasks whose reference the runs reach: 1M-step MuJoCo runs, not 2M-step Breakout runs (its reference is
    after 10M steps), whose scores of 100x the reference would move the trimmed mean if they were counted."""
    rng = np.random.default_rng(0)
    tasks = ["Hopper-v5", "HalfCheetah-v5", "InvertedPendulum-v5"]
    rows = [
        {"env_id": t, "variant": "default", "seed": s, "score": rng.uniform(0, 2) * report.REFERENCE_SCORES[t][0]}
        for t in tasks
        for s in range(4)
    ]
    short = [{"env_id": "BreakoutNoFrameskip-v4", "variant": "default", "seed": s, "score": 27480.0} for s in range(4)]
    runs = pd.DataFrame(rows + short)
    runs["steps"] = [np.array([0, 1_000_000])] * len(rows) + [np.array([0, 2_000_000])] * len(short)
    normalized = [r["score"] / report.REFERENCE_SCORES[r["env_id"]][0] for r in rows]
    line = report.aggregate_iqm(runs).splitlines()[-1]
    point, low, high = (float(x) for x in re.search(r"\| ([0-9.]+) \[([0-9.]+), ([0-9.]+)\] \|$", line).groups())
    assert point == pytest.approx(trim_mean(normalized, 0.25), abs=0.005)
    assert low <= point <= high


@pytest.mark.slow
def test_a_report_without_rliable_says_so_and_builds_the_rest(tiny, tmp_path, monkeypatch):
    """Where rliable is missing (a GPU machine with its own torch), a report over two tasks still builds: its aggregate
    section says why it is empty, the score table is there."""
    shutil.copytree(tiny[0], tmp_path / "runs")
    other = tmp_path / "runs" / "Pendulum-v1"
    shutil.copytree(tmp_path / "runs" / "InvertedPendulum-v5", other)  # a second task, so that an aggregate is asked for
    monkeypatch.setitem(sys.modules, "rliable", None)  # import rliable now raises ModuleNotFoundError
    report.main([str(tmp_path / "runs"), "--output", str(tmp_path / "out")])
    text = (tmp_path / "out" / "README.md").read_text()
    aggregate = text.split("## Aggregate over tasks (rliable)\n\n", 1)[1]
    assert aggregate.startswith("Not computed: rliable is not installed here")
    assert "| Pendulum-v1 |" in text and "| InvertedPendulum-v5 |" in text


@pytest.mark.parametrize("name", ["ppo_continuous_action", "ppo_atari", "ppo_rnn"])
def test_ablation_preset_turns_off_each_detail_of_the_contract(name):
    module = load_script(name)
    variants = run.ablations(f"{name}.py")
    default = module.Args()
    covered = set()
    for variant, flags in variants.items():
        args = tyro.cli(module.Args, args=flags.split())
        check_flags(args)  # each value lies in its flag's range (FLAG_RULES)
        if variant == "default":
            assert args == default
            continue
        assert args != default, variant  # the variant changes something
        covered.add(variant.split("-")[0])
    expected = {detail for _, detail in contract_flags(name) if detail is not None and not detail.startswith("B3")}
    assert covered == expected


@pytest.mark.slow
def test_sps_measures_env_only_and_training(tmp_path):
    import sps  # from benchmark/, on the path above

    output = tmp_path / "sps.md"
    sps.main(
        ["ppo_continuous_action.py", "--env-id", "InvertedPendulum-v5", "--total-timesteps", "4096", "--runs", "1"]
        + ["--env-steps", "512", "--output", str(output)]
        + ["--", "--vector-env", "async", "--num-envs", "2", "--num-steps", "1024"]
    )  # async: the env processes, spawned from the measuring one, find the script
    row = output.read_text().strip().splitlines()[-1]
    cells = [c.strip() for c in row.strip("|").split("|")]
    env_sps, train_sps, ratio = float(cells[3]), float(cells[4]), float(cells[5].rstrip("%")) / 100
    assert env_sps > 0 and train_sps > 0
    assert ratio == pytest.approx(train_sps / env_sps, abs=0.01)
    steady_sps, iteration, env, update, rest = float(cells[7]), *map(float, re.findall(r"-?[\d.]+", cells[9]))
    assert steady_sps == pytest.approx(2048 / (iteration / 1e3), rel=0.02)  # a batch of 2048 steps over the iteration
    assert iteration == pytest.approx(env + update + rest, abs=1.5) and min(env, update) > 0


def test_sps_splits_an_iteration_into_env_steps_update_and_rest():
    """timed_training on a stand-in script whose iteration is 5 env steps of 10 ms, 20 ms of other work and an update of
    30 ms (the first, a compile's, 300 ms): the split is 50 + 30 + 20 ms, steady over the iterations after the first."""
    import types

    import sps

    class Envs:
        def step(self, action):
            time.sleep(0.01)

    def train(args):
        envs = stand_in.make_envs(args)
        for i in range(4):
            for _ in range(5):
                envs.step(None)
            time.sleep(0.02)
            stand_in.update_policy(first=i == 0)
        return {"sps": 123}

    stand_in = types.SimpleNamespace(make_envs=lambda args: Envs(), train=train,
                                     update_policy=lambda first: time.sleep(0.3 if first else 0.03))  # fmt: skip
    sps_, env_s, update_s, iteration_s = sps.timed_training(stand_in, types.SimpleNamespace(cuda=False))
    assert sps_ == 123
    assert env_s == pytest.approx(0.05, abs=0.01) and update_s == pytest.approx(0.03, abs=0.008)
    assert iteration_s == pytest.approx(0.1, abs=0.015)
    assert stand_in.update_policy.__name__ == "<lambda>"  # the script's own functions are back in place


@pytest.mark.slow
def test_runner_interrupted_by_ctrl_c_continues_from_the_checkpoint(tmp_path):
    out = tmp_path / "x"
    args = [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "ppo_continuous_action.py"]
    args += ["--env-ids", "InvertedPendulum-v5", "--total-timesteps", "16384", "--flags=--checkpoint-interval=1"]
    args += ["--out", str(out), "--workers", "1"]
    runner_process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    folder = out / "InvertedPendulum-v5" / "default" / "seed1"
    deadline = time.time() + 300
    while not list(folder.glob("runs/*/agent.pt")) and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(runner_process.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the runner and its runs
    stdout, _ = runner_process.communicate(timeout=300)
    assert runner_process.returncode == 130 and "interrupted" in stdout
    assert not (folder / "done.json").exists()
    assert "stopped by a signal" in (folder / "output.log").read_text()

    again = runner(*args[2:])
    log = (folder / "output.log").read_text()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "--resume" in log and "resumed" in log and "step 16384/16384" in log
    assert (folder / "done.json").exists() and len(list(folder.glob("runs/*"))) == 1


@pytest.mark.slow
def test_runner_does_not_call_a_run_stopped_by_its_own_signal_done(tmp_path):
    """A SIGTERM that reaches a training process but not the runner (a cluster's preemption, a kill): the run saves a
    checkpoint and exits 0 like a finished one, yet it is not done: no done.json, and the runner says so. The same
    command then continues it to its end, and that is done (its checkpoint is still the stop's: no periodic ones)."""
    out = tmp_path / "x"
    args = [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "ppo_continuous_action.py"]
    args += ["--env-ids", "InvertedPendulum-v5", "--total-timesteps", "32768", "--out", str(out), "--workers", "1"]
    runner_process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    folder = out / "InvertedPendulum-v5" / "default" / "seed1"
    deadline = time.time() + 300
    while "/32768  SPS" not in ((folder / "output.log").read_text() if (folder / "output.log").exists() else ""):
        assert time.time() < deadline
        time.sleep(0.2)
    tasks = Path(f"/proc/{runner_process.pid}/task").glob("*/children")  # the runner's worker thread started it
    (training,) = [int(pid) for task in tasks for pid in task.read_text().split()]
    os.kill(training, signal.SIGTERM)  # its first progress line (after ~10 s) is not its last
    stdout, _ = runner_process.communicate(timeout=300)
    assert "stopped by a signal" in (folder / "output.log").read_text()
    assert runner_process.returncode == 1 and "STOPPED by a signal" in stdout
    assert not (folder / "done.json").exists()

    again = runner(*args[2:])
    assert again.returncode == 0 and "seed 1: done" in again.stdout, again.stdout + again.stderr
    assert "step 32768/32768" in (folder / "output.log").read_text() and (folder / "done.json").exists()


@pytest.mark.slow
def test_runner_stopped_by_sigterm_stops_its_runs_with_a_checkpoint(tmp_path):
    """A SIGTERM to the runner alone (kill, a scheduler) stops it as Ctrl-C does: its run saves a checkpoint and exits,
    no process is left behind, nothing is marked done."""
    out = tmp_path / "x"
    args = [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "ppo_continuous_action.py"]
    args += ["--env-ids", "InvertedPendulum-v5", "--total-timesteps", "65536", "--flags=--checkpoint-interval=1"]
    runner_process = subprocess.Popen(
        [*args, "--out", str(out), "--workers", "1"], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    folder = out / "InvertedPendulum-v5" / "default" / "seed1"
    deadline = time.time() + 300
    while not list(folder.glob("runs/*/agent.pt")) and time.time() < deadline:
        time.sleep(0.2)
    (training,) = [
        int(pid) for task in Path(f"/proc/{runner_process.pid}/task").glob("*/children") for pid in task.read_text().split()
    ]
    runner_process.send_signal(signal.SIGTERM)
    stdout, _ = runner_process.communicate(timeout=300)
    assert runner_process.returncode == 130 and "interrupted" in stdout
    assert "stopped by a signal" in (folder / "output.log").read_text()
    assert not Path(f"/proc/{training}").exists() and not (folder / "done.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,named",
    [
        (["--env-id", "NoSuch-v0"], "--env-id"),
        (["ppo_atari.py", "--env-id", "Hopper-v5"], "ppo_continuous_action.py"),
        (["ppo_continuous_action.py", "--", "--num-minibatches", "7"], "--num-minibatches"),
        (["--runs", "0"], "--runs"),
    ],
)
def test_sps_bad_input_is_one_line_before_anything_runs(tmp_path, args, named):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "sps.py"), *args], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    message = [line for line in result.stderr.splitlines() if "error" in line][-1]
    assert named in message and "run 1/" not in result.stderr  # nothing was measured


# a stand-in for a training script: checks the flags it is given, notes that it ran, sleeps, logs one charts/SPS
STAND_IN = """
import sys, time
from torch.utils.tensorboard import SummaryWriter
flags = dict(zip(sys.argv[1::2], sys.argv[2::2]))
assert flags == {{"--env-id": "Fake-v0", "--total-timesteps": "1000", "--seed": "3", **{extra}}}, flags
with open({log!r}, "a") as f:
    f.write("{name}\\n")
time.sleep({sleep})
writer = SummaryWriter("runs/stand-in")
writer.add_scalar("charts/SPS", {sps}, 1000)
writer.close()
"""


@pytest.mark.slow
def test_versus_alternates_the_two_scripts_and_reports_the_ratios(tmp_path):
    """versus.py on two stand-ins: a fast 'ours' (0.2 s, SPS 300) and a slow 'peer' (1.5 s, SPS 100), run from their
    own folder; it alternates them, gives each the same env, steps and seed (and ours its extra flags), and reports
    the medians' ratios: SPS 3.00x exactly, wall time above 1."""
    import versus

    log = tmp_path / "order.txt"
    for name, sleep, sps, extra in (("ours", 0.2, 300, {"--fast": "yes"}), ("peer", 1.5, 100, {})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.py").write_text(STAND_IN.format(name=name, sleep=sleep, sps=sps, log=str(log), extra=extra))
    output = tmp_path / "results" / "versus.md"
    wall_ratio, sps_ratio = versus.main([str(tmp_path / "ours" / "train.py"), str(tmp_path / "peer" / "train.py"),
                                         "--env-id", "Fake-v0", "--total-timesteps", "1000", "--seed", "3",
                                         "--rounds", "2", "--output", str(output), "--", "--fast", "yes"])  # fmt: skip
    assert log.read_text().split() == ["ours", "peer", "ours", "peer"]
    assert sps_ratio == pytest.approx(3.0) and 1.0 < wall_ratio < 10
    text = output.read_text()
    assert "| median |" in text and "**" + f"{wall_ratio:.2f}x" + "**" in text and "3.00x" in text
    assert "CPUs" in text and text.count("\n| 1 |") == 1 and text.count("\n| 2 |") == 1


@pytest.mark.slow
def test_versus_stops_with_the_scripts_error(tmp_path):
    (tmp_path / "fails.py").write_text("import sys\nsys.exit('error: --env-id Fake-v0 is not registered')\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "versus.py"), str(tmp_path / "fails.py"), str(tmp_path / "fails.py"),
         "--env-id", "Fake-v0", "--total-timesteps", "1000"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "fails.py exited with 1: error: --env-id Fake-v0 is not registered" in result.stderr


def test_update_compute_counts_the_updates_floating_point_work():
    """sps.py's update FLOPs against a hand count: InvertedPendulum's agent is two MLPs 4-64-64-1 (the actor's head has
    1 output, the critic's 1). Forward, per sample: 2 x (4*64 + 64*64 + 64) = 8,832 multiply-adds. Backward: the
    weight gradients (8,832 again) and the input gradients of every layer but the first (8,832 - 2 x 4*64). So
    (8,832 * 3 - 512) * 2 FLOP per sample, times 2048 samples x 10 epochs."""
    import sps

    module, args = sps.script_args("ppo_continuous_action.py", "InvertedPendulum-v5", 4096, [])
    seconds, gflop, matmul_gflops = sps.update_compute(module, args)
    assert gflop == pytest.approx((8832 * 3 - 512) * 2 * 2048 * 10 / 1e9, rel=1e-6)
    assert seconds > 0 and matmul_gflops > 1


@pytest.mark.slow
def test_versus_names_the_timeout_of_a_run_too_slow(tmp_path):
    (tmp_path / "slow.py").write_text("import time\ntime.sleep(30)\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "versus.py"), str(tmp_path / "slow.py"), str(tmp_path / "slow.py"),
         "--env-id", "Fake-v0", "--total-timesteps", "1000", "--timeout", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "slow.py ran past --timeout 1 s; raise --timeout" in result.stderr


def test_random_scores_play_the_registered_episodes_with_random_actions(tmp_path):
    """benchmark/random_scores.py against what the tasks' definitions fix: InvertedPendulum-v5 pays 1 per step and 0 on
    the step that ends it (a random policy drops the pole long before the 1,000-step limit), Reacher-v5 always runs its
    50-step limit; the same seed gives the same episodes; the committed table holds 100 episodes of each of the seven."""
    import csv

    import random_scores

    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    for output in (first, second):
        random_scores.main(["--env-ids", "InvertedPendulum-v5", "Reacher-v5", "--episodes", "20", "--output", str(output)])
    assert first.read_text() == second.read_text()
    rows = list(csv.DictReader(first.open()))
    pendulum = [r for r in rows if r["env_id"] == "InvertedPendulum-v5"]
    reacher = [r for r in rows if r["env_id"] == "Reacher-v5"]
    assert len(pendulum) == len(reacher) == 20
    assert all(float(r["return"]) == int(r["length"]) - 1 for r in pendulum)
    assert len({r["length"] for r in pendulum}) > 1  # random episodes, not one replayed
    assert all(int(r["length"]) == 50 and float(r["return"]) < 0 for r in reacher)
    committed = list(csv.DictReader((ROOT / "benchmark/results/table1/data/random.csv").open()))
    counts = {env_id: sum(r["env_id"] == env_id for r in committed) for env_id in random_scores.MUJOCO_TASKS}
    assert counts == dict.fromkeys(random_scores.MUJOCO_TASKS, 100)


def test_table1_normalizes_each_task_by_the_random_policy_and_the_best_setting(tmp_path):
    """A hand-computed case. Task A: random 0, clip-0.2 seeds 10 and 20 (mean 15, the best), unclipped 5 and -5
    -> clip-0.2 normalized 10/15 and 20/15, unclipped 1/3 and -1/3. Task B: random -10, clip-0.2 -10 and 10, unclipped
    30 and 50 (mean 40, the best: 50 above random) -> clip-0.2 0 and 0.4, unclipped 0.8 and 1.2."""
    runs = pd.DataFrame(
        [(env, variant, seed, score) for env, variant, scores in (
            ("A", "clip-0.2", (10, 20)), ("A", "unclipped", (5, -5)),
            ("B", "clip-0.2", (-10, 10)), ("B", "unclipped", (30, 50)))
         for seed, score in zip((1, 2), scores)],
        columns=["env_id", "variant", "seed", "score"],
    )  # fmt: skip
    random = pd.DataFrame({"env_id": ["A", "A", "B", "B"], "return": [-1.0, 1.0, -12.0, -8.0]})
    normalized = report.normalized_scores(runs, random).set_index(["env_id", "variant", "seed"])["normalized"]
    expected = {("A", "clip-0.2", 1): 10 / 15, ("A", "clip-0.2", 2): 20 / 15, ("A", "unclipped", 1): 1 / 3,
                ("A", "unclipped", 2): -1 / 3, ("B", "clip-0.2", 1): 0.0, ("B", "clip-0.2", 2): 0.4,
                ("B", "unclipped", 1): 0.8, ("B", "unclipped", 2): 1.2}  # fmt: skip
    for key, value in expected.items():
        assert normalized[key] == pytest.approx(value)
    # the interval resamples seeds within tasks: clip-0.2's draws average one A value and one B value per seed slot,
    # so its extremes are (10/15 + 0) / 2 and (20/15 + 0.4) / 2
    clip = report.normalized_scores(runs, random).query("variant == 'clip-0.2'")
    low, high = report.table1_interval(clip)
    assert (10 / 15) / 2 - 1e-9 <= low < clip["normalized"].mean() < high <= (20 / 15 + 0.4) / 2 + 1e-9
    same = clip.assign(normalized=0.5)
    assert report.table1_interval(same) == pytest.approx((0.5, 0.5))
    text = report.table1_section(runs, random)
    assert "| clip-0.2 | 4 of 6 | 0.60 [" in text and "| 0.82 |" in text  # mean (10/15 + 20/15 + 0 + 0.4) / 4 = 0.6
    assert "| kl-fixed-10 | 0 of 6 | - | 0.69 |" in text
    assert "8 of 66 runs are in: a setting with fewer than 6 runs is not yet comparable" in text
    report.plot_table1(runs, random, tmp_path / "table1.png")
    assert (tmp_path / "table1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table1_claims_are_checked_once_their_settings_are_complete():
    """Hand-made normalized scores on two tasks, one seed each (a full setting: 2 runs). Every setting scores 0.5 on
    both tasks but clip-0.2 (0.9, 1.0: mean 0.95), kl-fixed-3 (0.8, 0.8) and unclipped (-0.5 on A, 0.2 on B): clip-0.2
    ranks 1 of 11, unclipped is below random on A only, the best KL setting kl-fixed-3 is 0.15 behind. Raising clip-0.3
    to 1.0 on both makes it rank 2; dropping one kl-fixed-10 run leaves claims 1 and 3 waiting, claim 2 checked."""
    values = dict.fromkeys(report.PAPER_TABLE1, (0.5, 0.5)) | {
        "clip-0.2": (0.9, 1.0), "kl-fixed-3": (0.8, 0.8), "unclipped": (-0.5, 0.2)}  # fmt: skip
    rows = [(env, variant, value) for variant, pair in values.items() for env, value in zip("AB", pair)]
    normalized = pd.DataFrame(rows, columns=["env_id", "variant", "normalized"])
    text = report.table1_claims(normalized, full=2)
    assert "scores best: ours ranks it 1 of 11 (0.95): supported." in text
    assert "on at least one task: supported on A." in text
    assert "the best of them, kl-fixed-3, scores 0.80 against clip-0.2's 0.95 (-0.15;" in text
    assert "(-0.15; the paper: 0.74 against 0.82, -0.08)." in text  # its Table 1: adaptive KL 0.01, clipping 0.2
    higher = normalized.assign(normalized=normalized["normalized"].where(normalized["variant"] != "clip-0.3", 1.0))
    assert "ours ranks it 2 of 11 (0.95): not supported, clip-0.3 scores 1.00." in report.table1_claims(higher, full=2)
    short = normalized.drop(normalized.index[(normalized["variant"] == "kl-fixed-10") & (normalized["env_id"] == "B")])
    text = report.table1_claims(short, full=2)
    assert "scores best: not yet (1 of its 22 runs to come)." in text
    assert "supported on A." in text and "close behind: not yet (1 of its 16 runs to come)." in text
    # one task, two unclipped seeds: -0.1 and 0.5 average 0.2, above random, though one run ends below it
    seeds = pd.DataFrame({"env_id": ["A", "A"], "variant": ["unclipped"] * 2, "normalized": [-0.1, 0.5]})
    text = report.table1_claims(seeds, full=2)
    assert "task: not supported: ours' mean over seeds is above it on every task (runs below it: 1 of 2, on A)." in text


def test_the_readme_shows_table1_as_the_committed_report_has_it():
    """The README's Table 1 rows and its count of runs are the committed report's, which rebuilds from the data: a
    README left behind when runs land fails here."""
    readme = (ROOT / "README.md").read_text()
    results = (ROOT / "benchmark/results/table1/README.md").read_text()
    rows = [line for line in readme.splitlines() if line.split(" | ")[0][2:] in report.PAPER_TABLE1]
    assert [row.split(" | ")[0][2:] for row in rows] == list(report.PAPER_TABLE1)
    assert all(row in results.splitlines() for row in rows)
    runs = len(pd.read_csv(ROOT / "benchmark/results/table1/data/runs.csv"))
    assert f"{runs} of 231 runs are in" in readme and f"{runs} of 231 runs are in" in results


@pytest.mark.slow
def test_a_table1_report_opens_with_the_paper_table_and_drops_the_reference_iqm(tmp_path):
    """Rebuilt from a slice of the committed data (two tasks): the paper's table is the first section after the
    commands, and no IQM against the reference (CleanRL's default) stands beside it, which would divide a KL setting's
    score by the clipped default's."""
    committed = ROOT / "benchmark/results/table1/data"
    data = tmp_path / "table1" / "data"
    data.mkdir(parents=True)
    tasks = ["Hopper-v5", "InvertedDoublePendulum-v5"]
    for name in ("runs.csv", "episodes.csv.gz", "stats.csv.gz", "random.csv"):
        table = pd.read_csv(committed / name)
        table[table["env_id"].isin(tasks)].to_csv(data / name, index=False)
    report.main([str(tmp_path / "table1")])
    text = (tmp_path / "table1" / "README.md").read_text()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[:2] == ["## The PPO paper's Table 1", "## Scores"]
    assert "## Aggregate over tasks" not in text
    unclipped = (pd.read_csv(data / "runs.csv")["variant"] == "unclipped").sum()
    assert unclipped == 6 and "| unclipped | 6 of 6 |" in text  # 3 seeds x 2 tasks, both complete
    assert "66 of 66 runs are in." in text and "not yet comparable" not in text


def test_table1_curves_stand_each_family_by_its_best_setting_per_task(tmp_path):
    """Task A: clip-0.1 mean 5, clip-0.3 mean 7 -> clipping is clip-0.3; kl-fixed-1 and kl-fixed-3 (means 2 and 1) ->
    kl-fixed-1; unclipped alone. Task B: clip-0.1 mean 9 beats clip-0.3's 3; kl-adaptive-0.03 alone."""
    scores = {("A", "clip-0.1"): (4, 6), ("A", "clip-0.3"): (8, 6), ("A", "kl-fixed-1"): (1, 3), ("A", "kl-fixed-3"): (1, 1),
              ("A", "unclipped"): (0, -2), ("B", "clip-0.1"): (9, 9), ("B", "clip-0.3"): (2, 4),
              ("B", "kl-adaptive-0.03"): (5, 5)}  # fmt: skip
    runs = pd.DataFrame(
        [(env, variant, seed, score, np.array([500, 1000]), np.array([score - 1.0, score]))
         for (env, variant), pair in scores.items() for seed, score in zip((1, 2), pair)],
        columns=["env_id", "variant", "seed", "score", "steps", "returns"],
    )  # fmt: skip
    best = {(env, family): variant for env, family, variant in report.family_best(runs).values}
    assert best == {("A", "clipping"): "clip-0.3", ("A", "fixed KL"): "kl-fixed-1",
                    ("A", "no clipping or penalty"): "unclipped", ("B", "clipping"): "clip-0.1",
                    ("B", "adaptive KL"): "kl-adaptive-0.03"}  # fmt: skip
    report.plot_table1_curves(runs, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_runner_batch_seeds_trains_a_tasks_seeds_in_one_process_and_continues_it(tmp_path):
    """--batch-seeds: the seeds of a task and variant train in one process of ppo_continuous_action_seeds.py; each
    run's folder ends where its own process would have put it, so that the report reads it as any run. Ctrl-C stops
    the process with a checkpoint of every seed, and the same command continues them together to the end."""
    out = tmp_path / "x"
    args = [*TINY[:-1], "16384", "--flags=--checkpoint-interval=1", "--batch-seeds", "--out", str(out), "--workers", "1"]
    runner_process = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmark" / "run.py"), *args], cwd=ROOT, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    task = out / "InvertedPendulum-v5" / "default"
    deadline = time.time() + 300
    while len(list(task.glob("runs/*/agent.pt"))) < 2 and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(runner_process.pid, signal.SIGINT)
    stdout, _ = runner_process.communicate(timeout=300)
    assert runner_process.returncode == 130 and "2 to run on 1 workers in 1 processes" in stdout, stdout
    for seed in (1, 2):  # each stopped run moved to its seed's folder, not done
        assert len(list((task / f"seed{seed}").glob(f"runs/*__{seed}__*/agent.pt"))) == 1
        assert not (task / f"seed{seed}" / "done.json").exists()

    again = runner(*args)
    assert again.returncode == 0 and "seed 1 2: done" in again.stdout, again.stdout + again.stderr
    log = (task / "output.log").read_text()
    assert "--resume" in log and log.count("step 16384/16384") == 2
    for seed in (1, 2):
        record = json.loads((task / f"seed{seed}" / "done.json").read_text())
        assert record["seeds_in_process"] == 2 and "--seeds 1 2" in record["command"]
        assert len(list((task / f"seed{seed}").glob("runs/*"))) == 1
    tables = report.read_runs_folder(out)
    assert sorted(tables.runs["seed"]) == [1, 2] and set(tables.episodes["seed"]) == {1, 2}


def test_compare_results_puts_two_folders_side_by_side():
    """A results folder against itself: each task's mean ± std over seeds of a run's last 100 episodes (computed here from
    the episodes file), the seeds' scores, and every mean within its own seeds' range."""
    import compare_results  # benchmark/compare_results.py

    folder = ROOT / "benchmark" / "results" / "mujoco"
    rows = compare_results.main([str(folder), str(folder)])[2:]
    assert len(rows) == 7 and all("| yes (" in row for row in rows)
    episodes = pd.read_csv(folder / "data" / "episodes.csv.gz")
    cheetah = episodes[episodes["env_id"] == "HalfCheetah-v5"].sort_values("step")
    by_seed = cheetah.groupby("seed")["episodic_return"].apply(lambda r: r.to_numpy()[-100:].mean())
    expected = f"{by_seed.mean():.1f} ± {by_seed.std(ddof=0):.1f} ({', '.join(f'{v:.0f}' for v in by_seed)})"
    assert next(row for row in rows if row.startswith("| HalfCheetah-v5 |")).count(expected) == 2
