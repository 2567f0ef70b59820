"""The tables of benchmark/report.py's README, in Markdown: the scores (mean ± sample std over seeds), the runs, ours
against peers (the difference's bootstrap interval, the training statistics at equal steps, leaving a game's floor with
its rank tests), each variant against the default, and the aggregate IQM over tasks (rliable). The statistics are
report_stats' (library calls); the published reference scores beside ours are here."""

import re

import numpy as np
import pandas as pd

from report_data import KEYS, STATS
from report_stats import bootstrap_interval, difference_interval, iqm_interval, rank_test, sample_std

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
# The score of leaving a game's floor, by env id: a run has left it once the mean of its last FLOOR_WINDOW episodes
# exceeds this (Pong's floor is -21, every point lost); games without one get no floor table
FLOOR_THRESHOLDS = {"PongNoFrameskip-v4": -15.0}
FLOOR_WINDOW = 20  # episodes in the trailing mean that must exceed the threshold


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
    """Per env and variant: the seeds, the wall time of each run (of its whole process where that trained several runs,
    runs.csv's agents), and the commits and machines that ran them."""
    lines = ["| env | variant | seeds | wall time per run | commit | machine |", "| --- | --- | --- | --- | --- | --- |"]
    runs = runs.reindex(columns=KEYS + ["seconds", "commit", "machine", "agents"])
    for (env_id, variant), group in runs.groupby(["env_id", "variant"], sort=True):
        group = group.sort_values("seed")
        shared = [f" (a process of {n:.0f} runs)" if n > 1 else "" for n in group["agents"].fillna(1)]
        wall = ", ".join("-" if pd.isna(t) else f"{t / 60:.0f} min{note}" for t, note in zip(group["seconds"], shared))
        commits, machines = (
            by_seed(group[c].fillna("not recorded").astype(str), group["seed"]) for c in ("commit", "machine")
        )
        lines.append(f"| {env_id} | {variant} | {', '.join(map(str, group['seed']))} | {wall} | {commits} | {machines} |")
    return "\n".join(lines)


def mean_std(values):
    """The mean over seeds ± their sample standard deviation (ddof 1); the mean alone for one seed."""
    return f"{np.mean(values):.1f} ± {sample_std(values):.1f}" if len(values) > 1 else f"{np.mean(values):.1f}"


def seeds(values):
    return f"{len(values)} seed{'s' if len(values) != 1 else ''}"


def per_seed(group):
    return ", ".join(f"{score:.0f} (seed {seed})" for seed, score in sorted(zip(group["seed"], group["score"])))


def variant_order(variants):
    """default first, then by name with numbers in numeric order (G2 before G10)."""
    return sorted(variants, key=lambda v: (v != "default", [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", v)]))


def score_table(runs: pd.DataFrame, last: int):
    """One row per env and variant; the reference column (a published score for the default) only where one exists."""
    score = f"return (mean of the last {last} episodes; mean ± sample std over seeds)"
    header = ["env", "variant", "seeds", score, "per seed", "SPS", "reference"]
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


def peer_table(runs: pd.DataFrame, peers):
    """Ours (the default variant) against each peer on each env: both scores over seeds, the difference of their means
    with its 95% bootstrap interval, and the verdict it gives: level where the interval contains 0."""
    lines = ["| env | ours (default) | peer | peer's return | ours - peer [95% bootstrap interval] | ours is |",
             "| --- | ---: | --- | ---: | ---: | --- |"]  # fmt: skip
    for env_id, peer, ours, theirs, difference, verdict in compared_rows(runs, [("default", p) for p in variant_order(peers)]):
        lines.append(f"| {env_id} | {mean_std(ours)} ({seeds(ours)}) | {peer} ({peers[peer]}) | {mean_std(theirs)} "
                     f"({seeds(theirs)}) | {difference} | {verdict} |")  # fmt: skip
    return "\n".join(lines)


def compared_rows(runs: pd.DataFrame, pairs):
    """The rows of peer_table and comparison_table: for each env, in order, and each pair (ours, theirs) of variants
    that it has both sides of: env id, theirs, both sides' scores, and compared()'s difference and verdict."""
    for env_id, env_runs in runs.groupby("env_id"):
        for mine, other in pairs:
            ours, theirs = (env_runs[env_runs["variant"] == name]["score"] for name in (mine, other))
            if not ours.empty and not theirs.empty:
                yield env_id, other, ours, theirs, *compared(ours, theirs)


def compared(ours, theirs):
    """The difference of two sides' mean scores over seeds with its 95% bootstrap interval, and the verdict it gives:
    level where the interval contains 0, none with a single seed on a side."""
    difference = f"{ours.mean() - theirs.mean():+.1f}"
    if min(len(ours), len(theirs)) < 2:  # a resampled single seed is that seed: no interval to speak of
        return difference + " (one seed on a side: no interval)", "none given yet"
    low, high = difference_interval(ours, theirs)
    return difference + f" [{low:+.1f}, {high:+.1f}]", "**below**" if high < 0 else "**above**" if low > 0 else "**level**"


def comparison_table(runs: pd.DataFrame, base: str, variant: str):
    """report.py --compare: one variant against another on each env that has both, as peer_table does for peers."""
    lines = [f"| env | {base} | {variant} | {variant} - {base} [95% bootstrap interval] | {variant} is |",
             "| --- | ---: | ---: | ---: | --- |"]  # fmt: skip
    for env_id, _, ours, theirs, difference, verdict in compared_rows(runs, [(variant, base)]):
        lines.append(f"| {env_id} | {mean_std(theirs)} | {mean_std(ours)} | {difference} | {verdict} |")
    return "\n".join(lines)


def three_digits(value):
    """3 significant digits, without an exponent from 1,000 up: 0.00134, 0.75, 379, 1,350."""
    return f"{float(f'{value:.3g}'):,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def statistics_table(episodes: pd.DataFrame, stats: pd.DataFrame, env_id: str, peer: str, variant="default", windows=4):
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
    lines = [f"| seed | {ours} leaves the floor at step | {peer} leaves it at step | {whose} score | {peer}'s score |",
             "| ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for seed in sorted(set(sides[0].index) | set(sides[1].index)):
        cells = [floor_cell(s.get(seed), ",.0f") for s in left] + [floor_cell(s["score"].get(seed), ".1f") for s in sides]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    pairs = len(sides[0]) * len(sides[1])
    later, lower = rank_test(left[0], left[1]), rank_test(sides[1]["score"], sides[0]["score"])

    def p(value):  # NaN: one seed on a side, which no split can test
        return "no p-value (one seed on a side)" if np.isnan(value) else f"p = {three_digits(value)}"

    lines.append("")
    lines.append(f"- {ours} leaves the floor later: U = {later[0]:g} of {pairs} pairs, {p(later[1])}")
    lines.append(f"- {whose} score is lower: U = {lower[0]:g} of {pairs} pairs, {p(lower[1])}")
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
            lines.append(f"| {env_id} | {variant} | {len(scores)} | {scores.mean():.1f} [{low:.1f}, {high:.1f}] | "
                         f"{change:+.0%} | {better} | {verdict} |")  # fmt: skip
    return "\n".join(lines)


def reference_reached(env_id, steps):
    """Whether runs of `steps` steps reach (to within 10%) the steps at which env_id's reference score was taken: a
    10M-step score drawn over 2M-step curves would only squash them."""
    return env_id in REFERENCE_SCORES and steps >= 0.9 * REFERENCE_STEPS[REFERENCE_SCORES[env_id][1]]


def aggregate_iqm(runs: pd.DataFrame):
    """rliable's interquartile mean over (seed, task) of the scores normalized by the reference score, with a 95%
    stratified-bootstrap confidence interval; only over tasks whose reference score the runs reach (reference_reached:
    a 2M-step run is not scored against a 10M-step reference) and seeds present in all."""
    try:
        import rliable  # noqa: F401  (report_stats.iqm_interval calls it)
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
        score = group.set_index(["seed", "env_id"])["score"]  # one run per seed and task
        scores = np.array([[score[s, t] / REFERENCE_SCORES[t][0] for t in tasks] for s in common])
        point, low, high = iqm_interval(scores)  # a fixed bootstrap seed: a rebuild from the same data gives the same
        lines.append(f"| {variant} | {', '.join(tasks)} | {len(common)} | {point:.2f} [{low:.2f}, {high:.2f}] |")
    if not lines:
        return ""
    header = "| variant | tasks | seeds | IQM of return / reference [95% CI] |\n| --- | --- | ---: | ---: |\n"
    return header + "\n".join(lines)
