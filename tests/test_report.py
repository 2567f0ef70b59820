"""benchmark/report.py: the report built from a runs folder's logs and rebuilt from its data (tables, PNGs, damaged
data refused), its statistics (library calls, checked on hand-computed cases), its tables and figures, and
benchmark/compare_results.py."""

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from benchmark_helpers import read_only_folder, report_of, score_row, tiny_matrix  # noqa: F401 (a fixture)
from conftest import ROOT, needs

import report  # benchmark/report.py and its parts (pyproject.toml puts benchmark/ on pytest's path)
import report_data
import report_figures
import report_stats
import report_tables


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two 2k-step runs on two workers, then the same command again (tiny_matrix)."""
    return tiny_matrix(tmp_path_factory)


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
        seed = int(events.parts[-4][len("seed") :])  # noqa: F841 (the query below reads it as @seed)
        kept = pd.read_csv(tmp_path / "data" / "stats.csv.gz").query("seed == @seed").set_index("step")[report_data.STATS]
        assert len(logged) == kept.size > 0 and set(kept) == {name for _, name in logged}
        assert all(kept.loc[step, name] == pytest.approx(value, rel=1e-3) for (step, name), value in logged.items())
    assert reported == pytest.approx(np.mean(scores), abs=0.06)


@pytest.mark.slow
def test_report_rebuilds_from_its_committed_data_alone(tiny, tmp_path):
    """What a fresh clone has: the results folder's README, PNGs and data/, no run folders. Rebuilding from data/
    gives the same table, and the data are compact. Rebuilt into another folder, the report keeps the title of the
    results folder it was rebuilt from."""
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
    text = report_of(clone, elsewhere)
    assert score_row(text) == score_row(first) and text.splitlines()[0] == "# Results: results"  # clone's name, not elsewhere
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
    1, 1, 1 against 4, 5, 6: -4.0 and an interval inside [1 - 6, 1 - 4] = [-5, -3], below; the peer's 4, 5, 6 are
    5.0 ± 1.0, the sample std (ddof 1: sqrt(2 / 2); ddof 0 would give 0.8). D: ours 5, 5 against a single 3: +2.0 and
    neither interval nor verdict, which one seed cannot give. The peer is not listed as an ablation variant, and the rebuild
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
        assert [float(x) for x in re.findall(r"-?\d+\.\d", rows["C"][3])] == [5.0, 1.0]  # mean ± sample std
        (difference,) = map(float, re.findall(r"[-+]\d+\.\d", rows["D"][4]))  # A's case, one peer seed: no interval
        assert difference == 2.0 and "[" not in rows["D"][4] and "**" not in rows["D"][5]
        assert "## Each variant against the default" not in text  # the peer is no ablation variant
    assert "| theirs |" in first  # its runs are listed with the others


@pytest.mark.slow
def test_report_takes_another_reports_runs_and_compares_two_variants(tmp_path):
    """--take keeps a variant of another results folder's data beside these runs, renamed, on these runs' env ids only
    (B is left behind), and the rebuild from the data alone still has them; --compare sets one variant against another as
    the peer table does: A's lstm 5, 5, 5 against 3, 3, 3 is +2.0 [+2.0, +2.0], above (every resample is the same)."""
    for env, scores in {"A": [3, 3, 3], "B": [7, 7, 7]}.items():
        for seed, score in enumerate(scores, 1):
            logged_run(tmp_path / "earlier" / env / "default" / f"seed{seed}", [score] * 4)
    report_of(tmp_path / "earlier", tmp_path / "committed")
    for seed in (1, 2, 3):
        logged_run(tmp_path / "runs" / "A" / "lstm" / f"seed{seed}", [5] * 4)
    flags = ["--take", str(tmp_path / "committed"), "default", "full-obs", "--compare", "full-obs", "lstm"]
    first = report_of(tmp_path / "runs", tmp_path / "results", *flags)
    clone = tmp_path / "clone"
    shutil.copytree(tmp_path / "results" / "data", clone / "data")
    for text in (first, report_of(clone, clone)):  # the rebuild keeps --compare's section (data/compare.txt)
        assert "| A | full-obs | 3 | 3.0 ± 0.0 |" in text and "| B |" not in text
        section = text.split("## lstm against full-obs")[1].split("\n## ")[0]
        assert "| A | 3.0 ± 0.0 | 5.0 ± 0.0 | +2.0 [+2.0, +2.0] | **above** |" in section
    refused = report_cli(tmp_path / "runs", "--output", tmp_path / "x", "--take", tmp_path / "committed", "nosuchvariant", "y")
    assert refused.returncode == 1 and refused.stderr.strip().splitlines() == [
        f"error: --take {tmp_path / 'committed'} nosuchvariant y: its data hold no runs of nosuchvariant on A"
    ]
    clash = report_cli(tmp_path / "runs", "--output", tmp_path / "y", "--take", tmp_path / "committed", "default", "lstm")
    assert clash.returncode == 1 and clash.stderr.strip().splitlines() == [
        f"error: --take {tmp_path / 'committed'} default lstm: {tmp_path / 'runs'} has a variant lstm; choose another NAME"
    ] and not (tmp_path / "y").exists()
    unknown = report_cli(clone, "--compare", "full-obs", "gru")
    assert unknown.returncode == 1 and unknown.stderr.strip().splitlines() == [
        "error: --compare gru: no such variant here; choose among full-obs, lstm"
    ]


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
    both = report_data.read_runs_folder(tiny[0])[0]
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
    report_data.write_data(folder / "data", report_data.Tables(episodes, runs, None))
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
    README; the rebuild from the data alone gives the same scores: 10 and 30, mean 20 ± 14.1 (the sample std,
    sqrt((10^2 + 10^2) / 1))."""
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
    cells = scores.splitlines()[2].split(" | ")
    assert cells[1:3] == ["default", "2"] and cells[4] == "10 (seed 1), 30 (seed 3)"
    assert [float(x) for x in cells[3].split(" ± ")] == [20.0, pytest.approx(np.sqrt(200), abs=0.05)]
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


def tree(folder):
    """Every file under folder (links not followed) and its bytes, or where a link points: what a report may not change."""
    return {
        str(path.relative_to(folder)): os.readlink(path) if path.is_symlink() else path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_symlink() or path.is_file()
    }


LINKS = [  # (the link in the results folder, what it points to outside: a file, a folder, or nothing yet)
    ("README.md", "file"),
    ("README.md", "nothing"),  # a dangling link: writing through it would make the file outside
    ("data", "folder"),
    ("data/commands.txt", "file"),
    ("A.png", "file"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,target", LINKS, ids=["readme", "readme-dangling", "data", "data-file", "png"])
def test_report_does_not_write_through_a_link_in_its_output(tmp_path, name, target):
    """A results folder from elsewhere (a clone, an archive) may hold links: the report refuses them in one line before
    it reads or writes anything, and neither the folder outside nor the results folder changes."""
    logged_run(tmp_path / "runs" / "A" / "default" / "seed1", [1] * 4)
    outside, results = tmp_path / "outside", tmp_path / "results"
    outside.mkdir()
    (results / "data").mkdir(parents=True)
    pointed = outside / Path(name).name
    if target == "file":
        pointed.write_text("mine\n")
    elif target == "folder":
        pointed.mkdir()
        (pointed / "notes.md").write_text("mine\n")
        (results / "data").rmdir()
    link = results / name
    link.symlink_to(pointed)
    before, before_results = tree(outside), tree(results)
    result = report_cli(tmp_path / "runs", "--output", results)
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        (
            f"error: {link} is a link (to {pointed}): the report writes its files in place, never through a link; "
            f"remove the link (rm {link}) or pass another --output"
        )
    ]
    assert tree(outside) == before and tree(results) == before_results


@pytest.mark.slow
def test_report_leaves_out_a_run_folder_that_links_outside_the_runs_folder(tmp_path):
    """seed3 a link to a run outside the runs folder, and seed2's event files a link to another run's outside: neither is
    read (the report names both, on stderr and in the README, as it does runs left out); seed1, in place, is."""
    runs = tmp_path / "runs" / "A" / "default"
    logged_run(runs / "seed1", [1] * 4)
    logged_run(tmp_path / "elsewhere" / "seed3", [100] * 4)
    logged_run(tmp_path / "elsewhere" / "seed2", [50] * 4)
    (runs / "seed3").symlink_to(tmp_path / "elsewhere" / "seed3")
    (runs / "seed2").mkdir()
    shutil.copy(tmp_path / "elsewhere" / "seed2" / "done.json", runs / "seed2")
    (runs / "seed2" / "runs").symlink_to(tmp_path / "elsewhere" / "seed2" / "runs")
    result = report_cli(tmp_path / "runs", "--output", tmp_path / "results")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        (
            f"skipped {runs / 'seed2'}: it links outside {tmp_path / 'runs'} ({runs / 'seed2' / 'runs'} to "
            f"{tmp_path / 'elsewhere' / 'seed2' / 'runs'}); copy the run in place of the link"
        ),
        (
            f"skipped {runs / 'seed3'}: it links outside {tmp_path / 'runs'} ({runs / 'seed3'} to "
            f"{tmp_path / 'elsewhere' / 'seed3'}); copy the run in place of the link"
        ),
    ]
    left_out = (tmp_path / "results" / "README.md").read_text().split("## Left out\n\n")[1].split("\n## ")[0]
    assert [line.split(":")[0] for line in left_out.splitlines() if line.startswith("- ")] == [
        "- A default seed 2",
        "- A default seed 3",
    ]
    assert list(pd.read_csv(tmp_path / "results" / "data" / "runs.csv")["seed"]) == [1]


@pytest.mark.slow
def test_report_refuses_an_env_id_that_would_name_a_file_outside_in_one_line(tmp_path):
    """An env id names its PNG (<env id>.png): one with a slash, in a results folder's data from elsewhere, would have the
    report write outside the folder. It is refused as the damaged data it is."""
    results = results_data(tmp_path / "results")
    path = results / "data" / "episodes.csv.gz"
    episodes = pd.read_csv(path)
    episodes["env_id"] = "../escaped"
    episodes.to_csv(path, index=False, compression={"method": "gzip", "mtime": 0})
    result = report_cli(results)
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        (
            f"error: {path}: line 2 is malformed (env_id '../escaped' holds a slash, and it names a file of the report); "
            "restore it (git checkout), or set the data folder aside and rebuild it from the run folders: python "
            f"benchmark/report.py <runs folder> --output {results}"
        )
    ]
    assert sorted(os.listdir(tmp_path)) == ["results"] and not (results / "README.md").exists()


@pytest.mark.slow
@pytest.mark.parametrize("inside", ["", "report"], ids=["the-folder", "a-new-folder-in-it"])
def test_report_output_it_cannot_write_is_one_line(tmp_path, read_only_folder, inside):  # noqa: F811 (the fixture)
    results = results_data(tmp_path / "results")
    output = read_only_folder / inside
    result = report_cli(results, "--output", output)
    why = "Permission denied" if os.geteuid() != 0 else "Read-only file system"
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        f"error: cannot write in {read_only_folder} ({why}); pass --output a folder you can write to"
    ]


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
    curves = report_figures.curve(group, np.array([0.0, 10, 20, 30, 40]))
    np.testing.assert_allclose(curves[0], [np.nan, 0, 10, 20, 30])
    np.testing.assert_allclose(curves[1], [np.nan, 6, 8, 8, 8])


def test_bootstrap_interval_matches_the_exact_resampling_distribution():
    """With 4 seeds there are 256 equally likely resamples: the 2.5% and 97.5% quantiles of their means, enumerated
    here, are what the 10,000 random resamples estimate (a normal interval, mean -+ 1.96 standard errors, would give
    72 and 753). With 3 seeds the interval is the seeds' range: each all-one-seed resample has probability 1/27.
    scipy.stats.bootstrap draws the resamples and takes the percentiles."""
    values = [100.0, 250.0, 400.0, 900.0]
    exact = [np.mean(resample) for resample in itertools.product(values, repeat=4)]
    low, high = report_stats.bootstrap_interval(values)
    assert low == pytest.approx(np.percentile(exact, 2.5, method="inverted_cdf"), abs=10)  # 175
    assert high == pytest.approx(np.percentile(exact, 97.5, method="inverted_cdf"), abs=10)  # 737.5
    assert report_stats.bootstrap_interval([100.0, 250.0, 900.0]) == (100.0, 900.0)


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
    table = report_tables.ablation_table(runs).splitlines()
    row = next(line for line in table if "G2-no-gae" in line)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    # three seeds: each all-equal resample has chance 1/27 > 2.5%, so the 95% interval is the seeds' range
    assert cells[2] == "3" and cells[3] == "750.0 [500.0, 1150.0]"
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
    assert report_tables.floor_left_at(steps, returns, 3.0, window=3) == 700
    assert report_tables.floor_left_at(steps, returns, 4.0, window=3) == np.inf
    assert report_tables.floor_left_at(np.arange(1, 26) * 10, [0.0] * 25, -15.0) == 200


def test_rank_test_is_exact_over_all_splits_with_ties_and_never():
    """U: the pairs (higher, lower) with higher > lower, plus 1/2 per tie; p: the fraction of the C(n + m, n) splits of
    the pooled values whose U is at least the observed one.
    - 4, 5, 6 against 1, 2, 3: U = 9 of 9, and 1 of the C(6, 3) = 20 splits reaches it: p = 1/20 = 0.05.
    - Five against five all one way: U = 25, p = 1 / C(10, 5) = 1/252.
    - A tie, 2, 3 against 1, 2: U = 1 + 0.5 + 1 + 1 = 3.5. The 6 splits of {2, 3, 1, 2} into pairs give U = 3.5 ({2, 3}
      either 2), 2 ({2, 2}), 2 ({3, 1}), 0.5 ({2, 1} either 2): 2 reach 3.5, p = 1/3.
    - Never (inf), 600 and never against 300 and never: U = 1 + 0 + 1 + 0.5 = 2.5 (never ties never). The splits of
      {600, inf, 300, inf}: U = 2.5 ({600, inf} either inf), 4 ({inf, inf}), 1.5 ({300, inf} and {inf, 300}), 0
      ({600, 300}): 3 of 6 reach 2.5, p = 1/2.
    scipy.stats.mannwhitneyu computes them, over every split (PermutationMethod(n_resamples=inf))."""
    assert report_stats.rank_test([4, 5, 6], [1, 2, 3]) == (9, pytest.approx(0.05))
    assert report_stats.rank_test([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == (25, pytest.approx(1 / 252))
    assert report_stats.rank_test([2, 3], [1, 2]) == (3.5, pytest.approx(1 / 3))
    assert report_stats.rank_test([600, np.inf], [300, np.inf]) == (2.5, pytest.approx(0.5))
    u, p = report_stats.rank_test([3], [1, 2, 3])  # one value on a side: U (1 + 1 + 1/2), no p (scipy permutes 2 or more)
    assert u == 2.5 and np.isnan(p)


def rank_tests(section):
    """The (U, pairs, p) of each rank test under a floor table, in order (p None where none is given)."""
    found = re.findall(r"^- .*: U = ([\d.]+) of (\d+) pairs, (?:p = ([\d.]+)|.*)$", section, flags=re.MULTILINE)
    return [(float(u), int(pairs), float(p) if p else None) for u, pairs, p in found]


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
    monkeypatch.setitem(report_tables.FLOOR_THRESHOLDS, "A", 0.0)
    runs = [("default", 1, 300, 1.0, 3.0), ("default", 2, 400, 1.0, -2.0), ("default", 3, 500, 1.0, 7.0)]
    runs += [("theirs", 1, 100, 1.0, 9.0), ("theirs", 2, 100, -1.0, 1.0), ("theirs", 4, 200, 1.0, 7.0)]
    rows = [
        {"env_id": env, "variant": variant, "seed": seed, "score": score}
        | {"steps": np.arange(1, 26) * spacing, "returns": np.full(25, each)}
        for env in ("A", "B")
        for variant, seed, spacing, each, score in runs
    ]
    section = report_tables.floor_section(pd.DataFrame(rows), {"theirs": "their_ppo.py"})
    assert "### A: ours / theirs (floor threshold 0)" in section and "### B" not in section
    table = [line for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert table == [
        "| 1 | 6,000 | 2,000 | 3.0 | 9.0 |",
        "| 2 | 8,000 | never | -2.0 | 1.0 |",
        "| 3 | 10,000 | - | 7.0 | - |",
        "| 4 | - | 4,000 | - | 7.0 |",
    ]
    assert rank_tests(section) == [(6, 9, 0.35), (6.5, 9, 0.25)]  # ours leaves later; ours' score is lower
    assert report_tables.floor_section(pd.DataFrame(rows[6:]), {"theirs": "their_ppo.py"}) == ""  # B alone
    # a variant of ours with a switch flipped gets its own table against the peer: seeds 1 and 2 leave at 2,000
    # (spacing 100); later than the peer's 2,000 (a tie, 1/2), never and 4,000: U = 1/2 + 1/2 = 1 of 6 pairs
    switched = [
        {"env_id": "A", "variant": "switch", "seed": seed, "score": score, "steps": np.arange(1, 26) * 100}
        | {"returns": np.full(25, 1.0)}
        for seed, score in ((1, 10.0), (2, 12.0))
    ]
    section = report_tables.floor_section(pd.DataFrame(rows + switched), {"theirs": "their_ppo.py"})
    default, switch, against = section.split("### ")[1:]
    assert default.startswith("A: ours / theirs") and switch.startswith("A: ours (switch) / theirs (floor threshold 0)")
    table = [line for line in switch.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert table == ["| 1 | 2,000 | 2,000 | 10.0 | 9.0 |", "| 2 | 2,000 | never | 12.0 | 1.0 |", "| 4 | - | 4,000 | - | 7.0 |"]
    assert [test[:2] for test in rank_tests(switch)] == [(1, 6), (0, 6)]  # the switch leaves later; its score is lower
    # and ours' default against the switch: its 6,000, 8,000, 10,000 are later than both 2,000s, U = 6 of 6 pairs,
    # reached by 1 of the C(5, 2) = 10 splits (p = 0.1); its scores 3, -2, 7 lie below the switch's 10 and 12: the same
    assert against.startswith("A: ours / switch (floor threshold 0)")
    table = [line for line in against.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert table == [
        "| 1 | 6,000 | 2,000 | 3.0 | 10.0 |",
        "| 2 | 8,000 | 2,000 | -2.0 | 12.0 |",
        "| 3 | 10,000 | - | 7.0 | - |",
    ]
    assert rank_tests(against) == [(6, 6, 0.1), (6, 6, 0.1)]


def test_a_reference_score_comes_with_the_steps_it_was_taken_at():
    """The PPO paper's Atari scores are after 10M steps (its Table 6), CleanRL's MuJoCo ones at 1M: the table says so,
    and the figures draw a reference line only over runs that reach those steps (to within 10%)."""
    runs = pd.DataFrame([{"env_id": "BreakoutNoFrameskip-v4", "variant": "default", "seed": 1, "score": 50.0, "sps": 300}])
    assert report_tables.score_table(runs, 100).splitlines()[2].endswith("| 274.8 (PPO paper, 10M steps) |")
    no_reference = report_tables.score_table(runs.assign(variant="clip-0.1"), 100).splitlines()  # an empty column is left out
    assert [line.count("|") for line in no_reference] == [7, 7, 7] and no_reference[2].endswith("| 300 |")
    assert not report_tables.reference_reached("BreakoutNoFrameskip-v4", 2_000_000)
    assert report_tables.reference_reached("BreakoutNoFrameskip-v4", 10_000_000)
    assert report_tables.reference_reached("Hopper-v5", 999_424) and not report_tables.reference_reached("Hopper-v5", 100_000)
    assert not report_tables.reference_reached("Swimmer-v5", 1_000_000)  # no reference


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
    row = report_tables.runs_table(runs).splitlines()[2]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[2:] == ["1, 2, 3", "-, 9 min, 7 min", "abc (seed 3); not recorded (seeds 1, 2)", "M"]
    batched = runs.assign(agents=[1, 11, 1])  # seed 3's 420 s were its process's, which trained 11 runs
    cells = [cell.strip() for cell in report_tables.runs_table(batched).splitlines()[2].strip("|").split("|")]
    assert cells[3] == "-, 9 min, 7 min (a process of 11 runs)"


@needs("rliable")
def test_aggregate_iqm_is_the_trimmed_mean_of_normalized_scores():
    """Over the tasks whose reference the runs reach: 1M-step MuJoCo runs, not 2M-step Breakout runs (its reference is
    after 10M steps), whose scores of 100x the reference would move the trimmed mean if they were counted."""
    tasks = ["Hopper-v5", "HalfCheetah-v5", "InvertedPendulum-v5"]
    fractions = [0.1 * k for k in (12, 1, 7, 4, 9, 2, 11, 5, 3, 10, 6, 8)]  # 0.1 .. 1.2 of each task's reference
    rows = [
        {"env_id": t, "variant": "default", "seed": s, "score": fractions[4 * i + s] * report_tables.REFERENCE_SCORES[t][0]}
        for i, t in enumerate(tasks)
        for s in range(4)
    ]
    short = [{"env_id": "BreakoutNoFrameskip-v4", "variant": "default", "seed": s, "score": 27480.0} for s in range(4)]
    runs = pd.DataFrame(rows + short)
    runs["steps"] = [np.array([0, 1_000_000])] * len(rows) + [np.array([0, 2_000_000])] * len(short)
    line = report_tables.aggregate_iqm(runs).splitlines()[-1]
    point, low, high = (float(x) for x in re.search(r"\| ([0-9.]+) \[([0-9.]+), ([0-9.]+)\] \|$", line).groups())
    assert point == pytest.approx(0.65, abs=0.005)  # the middle six of 0.1 .. 1.2: 0.4 .. 0.9, mean 0.65
    assert low <= point <= high


@pytest.mark.slow
def test_a_report_without_rliable_says_so_and_builds_the_rest(tiny, tmp_path, monkeypatch):
    """Where rliable is missing (a GPU machine with its own torch), a report over two tasks still builds: its aggregate
    section names rliable and holds no table, the score table is there."""
    shutil.copytree(tiny[0], tmp_path / "runs")
    other = tmp_path / "runs" / "Pendulum-v1"
    shutil.copytree(tmp_path / "runs" / "InvertedPendulum-v5", other)  # a second task, so that an aggregate is asked for
    monkeypatch.setitem(sys.modules, "rliable", None)  # import rliable now raises ModuleNotFoundError
    report.main([str(tmp_path / "runs"), "--output", str(tmp_path / "out")])
    text = (tmp_path / "out" / "README.md").read_text()
    aggregate = text.split("## Aggregate over tasks (rliable)\n\n", 1)[1].split("\n## ")[0]
    assert "rliable" in aggregate and not any(line.startswith("| ") for line in aggregate.splitlines())
    assert "| Pendulum-v1 |" in text and "| InvertedPendulum-v5 |" in text


def test_compare_results_puts_two_folders_side_by_side():
    """A results folder against itself: each task's mean ± sample std (ddof 1) over seeds of a run's last 100 episodes
    (computed here from the episodes file, the std by the standard library), the seeds' scores, and every mean within
    its own seeds' range; and the committed figures by hand (mujoco's HalfCheetah seeds 1475.232, 1528.244, 1393.257)."""
    import statistics

    import compare_results  # benchmark/compare_results.py

    folder = ROOT / "benchmark" / "results" / "mujoco"
    header, _, *rows = compare_results.main([str(folder), str(folder)])
    assert header.count(": mean ± sample std (seeds) |") == 2
    assert len(rows) == 7 and all("| yes (" in row for row in rows)
    for row in rows:  # the folder minus itself: 0, within an interval that holds 0
        low, high = (float(v) for v in row.rstrip(" |").rsplit("| ", 1)[1].split("[")[1].rstrip("]").split(", "))
        assert row.rstrip(" |").rsplit("| ", 1)[1].startswith("0.0 [") and low <= 0 <= high, row
    episodes = pd.read_csv(folder / "data" / "episodes.csv.gz")
    cheetah = episodes[episodes["env_id"] == "HalfCheetah-v5"].sort_values("step")
    by_seed = [seed["episodic_return"].to_numpy()[-100:].mean() for _, seed in cheetah.groupby("seed")]
    mean, std = statistics.fmean(by_seed), statistics.stdev(by_seed)  # stdev: the sum of squares over n - 1
    # by hand: mean 1465.58; deviations 9.65, 62.67, -72.32; squares sum 9250.6; / 2 = 4625.3; sqrt 68.01
    # (the population std, over n = 3, would be 55.53: the old figure)
    assert mean == pytest.approx(1465.58, abs=0.01) and std == pytest.approx(68.01, abs=0.01)
    expected = f"{mean:.1f} ± {std:.1f} ({', '.join(f'{v:.0f}' for v in by_seed)})"
    assert expected == "1465.6 ± 68.0 (1475, 1528, 1393)"
    assert next(row for row in rows if row.startswith("| HalfCheetah-v5 |")).count(expected) == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    "folder,done,why",
    [
        ("seed2", [], "its done.json is not a record of benchmark/run.py"),
        ("seed2", {"command": ["python", "ppo.py"]}, "its done.json is not a record of benchmark/run.py"),
        ("seed2", {"seeds_in_process": "3"}, "its done.json is not a record of benchmark/run.py"),
        ("seedX", {}, "not a run folder of benchmark/run.py (seed<k>, k a whole number)"),
    ],
    ids=["a-list", "command-not-a-string", "seeds-in-process-a-string", "seedX"],
)
def test_report_leaves_out_a_run_whose_done_json_or_folder_name_is_not_the_runners_and_names_it(tmp_path, folder, done, why):
    """A done.json that is a list, whose command is not a string or whose seeds_in_process is not a count, or a folder
    seedX beside seed1, is left out and named in one line on stderr, as a damaged done.json is; seed1 is the report."""
    runs = tmp_path / "runs" / "A" / "default"
    logged_run(runs / "seed1", [10.0] * 4)
    logged_run(runs / folder, [50.0] * 4)
    record = json.loads((runs / folder / "done.json").read_text())
    (runs / folder / "done.json").write_text(json.dumps(done if isinstance(done, list) else record | done))
    result = report_cli(tmp_path / "runs", "--output", tmp_path / "results")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[0].startswith(f"skipped {runs / folder}: {why}"), result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert list(pd.read_csv(tmp_path / "results" / "data" / "runs.csv")["seed"]) == [1]


@pytest.mark.slow
@pytest.mark.parametrize("given", ["runs", "."], ids=["its-runs-folder", "the-folder-above"])
def test_report_on_a_scripts_own_runs_folder_says_what_to_run_in_one_line(tmp_path, given):
    """ppo_continuous_action_seeds.py (the README's many-seeds command) writes runs/<env>__<exp name>-<setting>__<seed>__
    <time>/, which records neither which runs finished nor their budget: the report refuses it (or the folder holding
    it) in one line that names benchmark/run.py --batch-seeds and the report of its --out, and writes nothing."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "runs" / "Hopper-v5__ppo_continuous_action_seeds-clip-0.2__1__1700000000"))
    writer.add_scalar("charts/episodic_return", 5.0, 10)
    writer.close()
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    result = report_cli(tmp_path / given)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: {tmp_path / given}: ") and "benchmark/run.py --batch-seeds" in result.stderr
    assert "python benchmark/report.py <out>" in result.stderr
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


@needs("rliable")
def test_normalized_iqm_scales_each_task_from_random_to_the_bases_mean(tmp_path, capsys):
    """benchmark/normalized_iqm.py: each task's scores (the mean of a run's last episodes) put on the scale random 0,
    the base variant's mean 1, then the interquartile mean over all tasks' runs, computed here by hand: of 8 normalized
    scores, the mean of the middle 4 (scipy's trim_mean at 25%)."""
    import normalized_iqm
    from scipy.stats import trim_mean

    rows, scores = [], {}
    for env_id, scale, random_return in (("TaskA-v0", 1.0, -10.0), ("TaskB-v0", 100.0, 50.0)):
        for variant, level in (("base", 1.0), ("other", 0.8)):
            for seed in (1, 2, 3, 4):
                score = random_return + scale * (level * 20 + seed)  # the last two episodes' mean
                scores[env_id, variant, seed] = score
                rows += [(env_id, variant, seed, 1000 * k, score + d, 1000) for k, d in ((1, -5.0), (2, 5.0))]
    data = tmp_path / "data"
    data.mkdir()
    episodes = pd.DataFrame(rows, columns=["env_id", "variant", "seed", "step", "episodic_return", "episodic_length"])
    episodes.to_csv(data / "episodes.csv.gz", index=False)
    runs = episodes[["env_id", "variant", "seed"]].drop_duplicates()
    runs.assign(sps=1.0, seconds=1.0, commit="x", machine="m").to_csv(data / "runs.csv", index=False)
    columns = ["env_id", "episode", "return", "length"]
    random = pd.DataFrame([("TaskA-v0", 0, -10.0, 5), ("TaskB-v0", 0, 50.0, 5)], columns=columns)
    random.to_csv(tmp_path / "random.csv", index=False)

    assert normalized_iqm.main([str(tmp_path), "--base", "base", "--variant", "other", "--random",
                                str(tmp_path / "random.csv"), "--last", "2"]) == 0  # fmt: skip
    table = {line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines()}
    for variant in ("base", "other"):
        normalized = []
        for env_id, random_return in (("TaskA-v0", -10.0), ("TaskB-v0", 50.0)):
            base_mean = np.mean([scores[env_id, "base", seed] for seed in (1, 2, 3, 4)])
            span = base_mean - random_return
            normalized += [(scores[env_id, variant, seed] - random_return) / span for seed in (1, 2, 3, 4)]
        assert f"| {trim_mean(normalized, 0.25):.2f} [" in table[variant], table[variant]

    # the base read from another folder (--base-results: a rerun against a committed table), the variant from RESULTS
    for folder, variant in (("base-only", "base"), ("other-only", "other")):
        (tmp_path / folder / "data").mkdir(parents=True)
        episodes[episodes.variant == variant].to_csv(tmp_path / folder / "data" / "episodes.csv.gz", index=False)
        runs[runs.variant == variant].assign(sps=1.0, seconds=1.0, commit="x", machine="m").to_csv(
            tmp_path / folder / "data" / "runs.csv", index=False
        )
    assert normalized_iqm.main([str(tmp_path / "other-only"), "--base-results", str(tmp_path / "base-only"),
                                "--base", "base", "--variant", "other", "--random", str(tmp_path / "random.csv"),
                                "--last", "2"]) == 0  # fmt: skip
    apart = {line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines()}
    assert apart["base (base-only)"].split(" | ")[1:] == table["base"].split(" | ")[1:]
    assert apart["other"] == table["other"]


@needs("rliable")
def test_normalized_iqm_bad_input_is_one_line(tmp_path, capsys):
    """A folder without data, a missing --random file, and a CSV without the random policy's columns: each one line
    naming what to pass, no traceback."""
    import normalized_iqm

    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    random = ROOT / "benchmark/results/table1/data/random.csv"
    results = ROOT / "benchmark/results/mujoco-envpool"
    bad = [([str(tmp_path), "--random", str(random)], "has no data/runs.csv"),
           ([str(results), "--random", str(tmp_path / "none.csv")], "none.csv: no such file"),
           ([str(results), "--random", str(tmp_path / "other.csv")], "has no env_id and return columns")]
    for argv, named in bad:
        with pytest.raises(SystemExit):
            normalized_iqm.main([*argv, "--base", "gymnasium", "--variant", "envpool"])
        error = capsys.readouterr().err
        last = error.strip().splitlines()[-1]  # argparse's usage lines, then the error
        assert "Traceback" not in error and "error: " in last and named in last, error
