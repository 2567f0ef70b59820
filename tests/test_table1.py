"""benchmark/report.py's PPO paper Table 1 section (report_table1.py): normalized scores, the interval, the paper's
claims, the figures, docs/results.md's copy of the table; and benchmark/random_scores.py, the random policy it scales by."""

import itertools
import re

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, needs

import report  # benchmark/report.py (pyproject.toml puts benchmark/ on pytest's path)
import report_table1


def table1_rows(text):
    """The Table 1 table of a report's text: {setting: (runs, runs of a full setting, [mean, low, high] or [] where
    none is in, the paper's)}."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| setting | runs |")) + 2
    rows = {}
    for line in itertools.takewhile(lambda line: line.startswith("| "), lines[start:]):
        setting, runs, ours, paper = (cell.strip() for cell in line.strip("|").split("|"))
        count, full = map(int, runs.split(" of "))
        rows[setting] = (count, full, [float(x) for x in re.findall(r"-?\d+\.\d+", ours)], float(paper))
    return rows


def rows_by_first_cell(text):
    """The markdown table rows of `text` (no header, no separator) as {first cell: the other cells}; a later row with
    the same first cell replaces an earlier one (the comparison's "clip-0.1" after the table's)."""
    rows = {}
    for line in (line for line in text.splitlines() if line.startswith("| ") and "---" not in line):
        first, *rest = (cell.strip() for cell in line.strip().strip("|").split("|"))
        rows[first] = rest
    return rows


def runs_in(text):
    """(runs in, runs in all, the runs that make a setting comparable, or None where all are in) of the Table 1 text."""
    count, fewer = re.search(r"(\d+) of (\d+) runs are in", text), re.search(r"fewer than (\d+) runs", text)
    return int(count[1]), int(count[2]), int(fewer[1]) if fewer else None


def claims(text):
    """Each of the paper's claims as checked: (what follows its colon, the numbers in it in order, none taken from a
    setting's name such as clip-0.3)."""
    found = []
    for line in (line for line in text.splitlines() if line.startswith("- ")):
        rest = line.split(": ", 1)[1]
        plain = rest
        for name in sorted(report_table1.PAPER_TABLE1, key=len, reverse=True):  # kl-fixed-10 before kl-fixed-1
            plain = plain.replace(name, "a setting")
        found.append((rest, [float(x) for x in re.findall(r"[-+]?\d+(?:\.\d+)?", plain)]))
    return found


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


@needs("envpool")
def test_random_scores_on_envpool_play_its_tasks_as_their_definitions_fix(tmp_path, capsys):
    """random_scores.py --envpool: the same facts of the tasks' definitions on envpool's ports (InvertedPendulum-v5 1
    per step and 0 on the last, Reacher-v5's 50-step limit), the same episodes for the same seed, and an id envpool
    lacks refused in one line before anything is written."""
    import csv

    import random_scores

    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    for output in (first, second):
        random_scores.main(["--env-ids", "InvertedPendulum-v5", "Reacher-v5", "--episodes", "10", "--envpool",
                            "--output", str(output)])  # fmt: skip
    assert first.read_text() == second.read_text()
    gymnasium = tmp_path / "gymnasium.csv"
    random_scores.main(["--env-ids", "InvertedPendulum-v5", "Reacher-v5", "--episodes", "10", "--output", str(gymnasium)])
    assert gymnasium.read_text() != first.read_text()  # envpool's own episodes: its MuJoCo build and reset noise
    rows = list(csv.DictReader(first.open()))
    pendulum = [r for r in rows if r["env_id"] == "InvertedPendulum-v5"]
    reacher = [r for r in rows if r["env_id"] == "Reacher-v5"]
    assert len(pendulum) == len(reacher) == 10
    assert all(float(r["return"]) == int(r["length"]) - 1 for r in pendulum)
    assert len({r["length"] for r in pendulum}) > 1  # a pool per episode, each seeded anew
    assert all(int(r["length"]) == 50 and float(r["return"]) < 0 for r in reacher)
    with pytest.raises(SystemExit):
        random_scores.main(["--env-ids", "Hopper-v2", "--envpool", "--output", str(tmp_path / "c.csv")])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--env-ids: envpool has no Hopper-v2" in error and "drop --envpool" in error, error
    assert not (tmp_path / "c.csv").exists()


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
    normalized = report_table1.normalized_scores(runs, random).set_index(["env_id", "variant", "seed"])["normalized"]
    expected = {("A", "clip-0.2", 1): 10 / 15, ("A", "clip-0.2", 2): 20 / 15, ("A", "unclipped", 1): 1 / 3,
                ("A", "unclipped", 2): -1 / 3, ("B", "clip-0.2", 1): 0.0, ("B", "clip-0.2", 2): 0.4,
                ("B", "unclipped", 1): 0.8, ("B", "unclipped", 2): 1.2}  # fmt: skip
    for key, value in expected.items():
        assert normalized[key] == pytest.approx(value)
    # the interval resamples seeds within tasks: clip-0.2's draws average one A value and one B value per seed slot,
    # so its extremes are (10/15 + 0) / 2 and (20/15 + 0.4) / 2
    clip = report_table1.normalized_scores(runs, random).query("variant == 'clip-0.2'")
    low, high = report_table1.table1_interval(clip)
    assert (10 / 15) / 2 - 1e-9 <= low < clip["normalized"].mean() < high <= (20 / 15 + 0.4) / 2 + 1e-9
    same = clip.assign(normalized=0.5)
    assert report_table1.table1_interval(same) == pytest.approx((0.5, 0.5))
    rows = table1_rows(report_table1.table1_section(runs, random))
    count, full, (mean, low_shown, high_shown), paper = rows["clip-0.2"]
    assert (count, full, mean, paper) == (4, 6, 0.6, 0.82)  # mean (10/15 + 20/15 + 0 + 0.4) / 4 = 0.6
    assert low_shown == pytest.approx(low, abs=0.005) and high_shown == pytest.approx(high, abs=0.005)
    assert rows["kl-fixed-10"] == (0, 6, [], 0.69)
    assert runs_in(report_table1.table1_section(runs, random)) == (8, 66, 6)  # a setting is comparable from 6 runs
    report_table1.plot_table1(runs, random, tmp_path / "table1.png")
    assert (tmp_path / "table1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table1_claims_are_checked_once_their_settings_are_complete():
    """Hand-made normalized scores on two tasks, one seed each (a full setting: 2 runs). Every setting scores 0.5 on
    both tasks but clip-0.2 (0.9, 1.0: mean 0.95), kl-fixed-3 (0.8, 0.8) and unclipped (-0.5 on A, 0.2 on B): clip-0.2
    ranks 1 of 11, unclipped is below random on A only, the best KL setting kl-fixed-3 is 0.15 behind. Raising clip-0.3
    to 1.0 on both makes it rank 2; dropping one kl-fixed-10 run leaves claims 1 and 3 waiting, claim 2 checked."""
    values = dict.fromkeys(report_table1.PAPER_TABLE1, (0.5, 0.5)) | {
        "clip-0.2": (0.9, 1.0), "kl-fixed-3": (0.8, 0.8), "unclipped": (-0.5, 0.2)}  # fmt: skip
    rows = [(env, variant, value) for variant, pair in values.items() for env, value in zip("AB", pair)]
    normalized = pd.DataFrame(rows, columns=["env_id", "variant", "normalized"])
    best, below, kl = claims(report_table1.table1_claims(normalized, full=2))
    assert best[1] == [1, 11, 0.95] and best[0].endswith(": supported.")  # clip-0.2 ranks 1 of 11 at 0.95
    assert below == ("supported on A.", [])  # unclipped below random on A
    assert "kl-fixed-3" in kl[0] and kl[1] == [0.80, 0.95, -0.15, 0.74, 0.82, -0.08]  # the paper: 0.74 against 0.82
    higher = normalized.assign(normalized=normalized["normalized"].where(normalized["variant"] != "clip-0.3", 1.0))
    best = claims(report_table1.table1_claims(higher, full=2))[0]
    assert best[1] == [2, 11, 0.95, 1.00] and "not supported" in best[0] and "clip-0.3" in best[0]  # clip-0.3: 1.00
    short = normalized.drop(normalized.index[(normalized["variant"] == "kl-fixed-10") & (normalized["env_id"] == "B")])
    best, below, kl = claims(report_table1.table1_claims(short, full=2))
    assert best[0].startswith("not yet") and best[1] == [1, 22]  # 1 of its 22 runs to come
    assert below == ("supported on A.", []) and kl[0].startswith("not yet") and kl[1] == [1, 16]
    # one task, two unclipped seeds: -0.1 and 0.5 average 0.2, above random, though one run ends below it
    seeds = pd.DataFrame({"env_id": ["A", "A"], "variant": ["unclipped"] * 2, "normalized": [-0.1, 0.5]})
    below = claims(report_table1.table1_claims(seeds, full=2))[1]
    assert below[0].startswith("not supported") and below[0].endswith("on A).") and below[1] == [1, 2]  # 1 run of 2


def test_seeds_still_coming_in_stand_apart_and_beside_the_others_by_how_they_trained():
    """Hand-made, one task, random policy 0. Seeds 1 and 2 (one run a process) have every setting: clip-0.2 scores 10
    and 12 (mean 11, the best), every other setting 4 and 6 (mean 5). Seed 3 (11 runs a process) has three in: clip-0.2
    13.2, clip-0.1 6.1, unclipped 8.3. The table holds seeds 1 and 2 alone (22 of 33 runs: 3 seeds a setting is full);
    beside them, seed 3 scaled by their best (11): cell differences 13.2/11 - 1 = +0.2, (6.1 - 5)/11 = +0.1 and
    (8.3 - 5)/11 = +0.3, mean +0.2; three differences of one sign: the signed-rank test's p = 2/8. With clip-0.1 at 3.9
    (-0.1) the signs mix: p = 2 * 2/8 (W- = 1: ranks {1} and {} of 1, 2, 3) and the interval holds 0."""
    rows = [("A", v, seed, (10.0 if seed == 1 else 12.0) if v == "clip-0.2" else (4.0 if seed == 1 else 6.0), 1)
            for v in report_table1.PAPER_TABLE1 for seed in (1, 2)]  # fmt: skip
    coming = [("A", "clip-0.2", 3, 13.2, 11), ("A", "clip-0.1", 3, 6.1, 11), ("A", "unclipped", 3, 8.3, 11)]
    runs = pd.DataFrame(rows + coming, columns=["env_id", "variant", "seed", "score", "agents"])
    random = pd.DataFrame({"env_id": ["A", "A"], "return": [-1.0, 1.0]})
    table, later = report_table1.table1_seeds(runs)
    assert sorted(table["seed"].unique()) == [1, 2] and len(later) == 3
    text = report_table1.table1_section(runs, random)
    assert runs_in(text) == (22, 33, 3) and "Seed 3 is coming in (3 of 11 runs)" in text
    count, full, (mean, *_), _ = table1_rows(text)["clip-0.2"]
    assert (count, full) == (2, 3) and mean == pytest.approx(1.0)  # (10/11 + 12/11) / 2, seed 3 left out
    beside = rows_by_first_cell(text)
    assert beside["all"][0:3] == ["3", "0.64", "0.84"]  # (1 + 5/11 + 5/11) / 3 and (1.2 + 6.1/11 + 8.3/11) / 3
    assert beside["all"][3].startswith("+0.20 [+0.1") and beside["clip-0.1"][3].startswith("+0.10 [+0.10, +0.10]")
    assert "p = 0.25; they differ: the runs trained many to a process score higher." in text
    mixed = runs.assign(score=runs["score"].where(~((runs["seed"] == 3) & (runs["variant"] == "clip-0.1")), 3.9))
    text = report_table1.table1_section(mixed, random)
    assert "p = 0.50; the interval holds 0" in text and "no sign that the runs trained many to a process" in text
    assert "| all | 3 | 0.64 | 0.77 | +0.13 [" in text  # (+0.2 - 0.1 + 0.3) / 3
    single = runs[runs["seed"] < 3]  # no runs trained many to a process: no comparison
    assert "to a process" not in report_table1.table1_section(single, random)


def test_the_study_time_counts_a_batched_process_once_and_halves_it_for_two_at_a_time():
    """Hand-made: seed 1 is two runs one to a process, 7,200 s and 3,600 s (3 h of process time, 1.5 h at two at a
    time); seed 2 is two runs of one process of 2, each carrying the process's 3,600 s (1 process, 1 h, 0.5 h)."""
    amd, xeon = "AMD EPYC, 2 CPUs, Python 3.11", "Intel(R) Xeon(R) Processor, 2 CPUs, Python 3.11"
    runs = pd.DataFrame({"seed": [1, 1, 2, 2], "seconds": [7200.0, 3600.0, 3600.0, 3600.0], "agents": [1, 1, 2, 2],
                         "machine": [amd, xeon, amd, amd]})  # fmt: skip
    rows = rows_by_first_cell(report_table1.study_time(runs))
    assert rows["1"] == ["2", "2", "3.0 h", "1.5 h", "AMD EPYC (1), Intel(R) Xeon(R) Processor (1)"]
    assert rows["2"] == ["2", "1", "1.0 h", "0.5 h", "AMD EPYC (2)"]
    assert rows["all"][:4] == ["4", "3", "4.0 h", "2.0 h"]
    assert report_table1.study_time(runs.drop(columns="seconds")) == ""


def test_the_signed_rank_test_is_exact_for_a_few_differences():
    """Wilcoxon's signed-rank test counted by hand: five differences all positive; of the 2^5 sign patterns one has every
    sign positive and one every sign negative, so the two-sided p is 2/32. One difference: no test."""
    from report_stats import signed_rank_test

    assert signed_rank_test([0.1, 0.4, 0.2, 0.5, 0.3]) == pytest.approx(2 / 32)
    assert signed_rank_test([-0.1, 0.4, 0.2, 0.5, 0.3]) == pytest.approx(2 * 2 / 32)  # W- = 1: {1} or {} of ranks 1-5
    assert np.isnan(signed_rank_test([0.3]))


@pytest.mark.slow
def test_a_table1_report_opens_with_the_paper_table_and_drops_the_reference_iqm(tmp_path, capsys):
    """Rebuilt from a slice of the committed data (two tasks): the paper's table is the first section after the
    commands, and no IQM against the reference (CleanRL's default) stands beside it, which would divide a KL setting's
    score by the clipped default's. It says it wrote the 4 PNGs it wrote: the two tasks' and Table 1's two."""
    committed = ROOT / "benchmark/results/table1/data"
    data = tmp_path / "table1" / "data"
    data.mkdir(parents=True)
    tasks = ["Hopper-v5", "InvertedDoublePendulum-v5"]
    for name in ("runs.csv", "episodes.csv.gz", "stats.csv.gz", "random.csv"):  # seeds 1-3 (later seeds come in over
        table = pd.read_csv(committed / name)  # several sittings)
        keep = table["env_id"].isin(tasks) & ((table["seed"] <= 3) if "seed" in table else True)
        table[keep].to_csv(data / name, index=False)
    report.main([str(tmp_path / "table1")])
    text = (tmp_path / "table1" / "README.md").read_text()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[:2] == ["## The PPO paper's Table 1", "## Scores"]
    assert "## Aggregate over tasks" not in text
    unclipped = (pd.read_csv(data / "runs.csv")["variant"] == "unclipped").sum()
    assert unclipped == 6 and table1_rows(text)["unclipped"][:2] == (6, 6)  # 3 seeds x 2 tasks, both complete
    assert runs_in(text) == (66, 66, None)  # all in: no setting waits to be comparable
    pngs = sorted(path.name for path in (tmp_path / "table1").glob("*.png"))
    assert pngs == ["Hopper-v5.png", "InvertedDoublePendulum-v5.png", "table1.png", "table1_curves.png"]
    assert int(re.search(r"and (\d+) PNGs", capsys.readouterr().out)[1]) == len(pngs)


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
    best = {(env, family): variant for env, family, variant in report_table1.family_best(runs).values}
    assert best == {("A", "clipping"): "clip-0.3", ("A", "fixed KL"): "kl-fixed-1",
                    ("A", "no clipping or penalty"): "unclipped", ("B", "clipping"): "clip-0.1",
                    ("B", "adaptive KL"): "kl-adaptive-0.03"}  # fmt: skip
    report_table1.plot_table1_curves(runs, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
