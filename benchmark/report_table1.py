"""The PPO paper's Table 1 section of benchmark/report.py (the table1 preset's runs and the random policy's episodes in
data/random.csv): each run's score normalized within its task, each setting's average with a stratified bootstrap
interval (report_stats), the paper's three claims checked, each task's raw means, and its two figures."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from report_figures import CURVE_POINTS, draw_curve, finish_panels, panels_figure  # noqa: E402
from report_stats import bootstrap_interval, signed_rank_test, stratified_interval  # noqa: E402

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
PAPER_SEEDS = 3  # the paper's runs of each setting on each task: a setting is comparable from this many a task

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


def normalized_scores(runs: pd.DataFrame, random: pd.DataFrame, reference: pd.DataFrame | None = None):
    """Each run's score shifted and scaled within its task as the paper's Table 1 does: the random policy's mean return
    (random: one row per episode, env_id and return) becomes 0 and the best setting's mean over its seeds becomes 1,
    its seeds those of `reference` (default: runs)."""
    reference = runs if reference is None else reference
    random_mean = runs["env_id"].map(random.groupby("env_id")["return"].mean())
    best = runs["env_id"].map(reference.groupby(["env_id", "variant"])["score"].mean().groupby("env_id").max())
    return runs.assign(normalized=(runs["score"] - random_mean) / (best - random_mean))


def table1_seeds(runs: pd.DataFrame):
    """(the runs of the table, the runs of seeds still coming in): where some seeds have all their runs in (every
    setting on every task), those seeds' runs and the others apart, so that a study adding seeds keeps a table over
    whole seeds while it runs; where none has, all runs and none apart."""
    per_seed = runs.groupby("seed").size()
    whole = per_seed.index[per_seed == runs["env_id"].nunique() * len(PAPER_TABLE1)]
    if len(whole) == 0:
        return runs, runs.iloc[:0]
    inside = runs["seed"].isin(whole)
    return runs[inside], runs[~inside]


def seed_list(seeds):
    """"seed 4" or "seeds 1, 2, 3"."""
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(str(seed) for seed in sorted(seeds))


def how_trained(runs: pd.DataFrame):
    """Which seeds' runs trained one to a process and which many (runs.csv's agents), or "" where all trained one to a
    process or none says."""
    if "agents" not in runs or not (runs["agents"] > 1).any():
        return ""
    parts = []
    for agents, group in runs.groupby(runs["agents"].fillna(0).astype(int)):
        how = {0: "not recorded", 1: "one run per process (ppo_continuous_action.py)"}.get(
            agents, f"{agents} runs per process (ppo_continuous_action_seeds.py: benchmark/run.py --batch-seeds)"
        )
        parts.append(f"{seed_list(group['seed'].unique())}: {how}")
    return " How they trained: " + "; ".join(parts) + "."


def by_process(runs: pd.DataFrame, random: pd.DataFrame, reference: pd.DataFrame):
    """The runs trained many to a process beside those trained one to a process (runs.csv's agents), on the (task,
    setting) cells that have both: per cell, the mean normalized score of the first minus that of the second, each
    run scaled as the table's are (by reference's best setting); per setting and over all cells, the mean difference
    with a 95% bootstrap interval over cells, and the Wilcoxon signed-rank test over all cells. "" without both kinds."""
    if "agents" not in runs:
        return ""
    normalized = normalized_scores(runs, random, reference)
    one, many = normalized[normalized["agents"] == 1], normalized[normalized["agents"] > 1]
    if one.empty or many.empty:
        return ""
    single = one.groupby(["env_id", "variant"])["normalized"].mean()
    batched = many.groupby(["env_id", "variant"])["normalized"].mean()
    cells = single.index.intersection(batched.index)
    if cells.empty:
        return ""
    difference = (batched[cells] - single[cells]).rename("difference").reset_index()
    lines = [
        f"Runs trained many to a process ({seed_list(many['seed'].unique())}, "
        f"{', '.join(map(str, sorted(many['agents'].astype(int).unique())))} runs a process) beside runs trained one to "
        f"a process ({seed_list(one['seed'].unique())}), on the {len(cells)} (task, setting) cells that have both: a cell's "
        "difference is the mean normalized score of its runs trained many to a process minus that of its others, each "
        "run scaled as in the table above; the interval resamples cells.\n",
        "| setting | cells | one to a process | many to a process | difference [95% interval] |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for variant in [*PAPER_TABLE1, "all"]:  # "all" last: its interval is the one the verdict below reads
        rows = difference if variant == "all" else difference[difference["variant"] == variant]
        if rows.empty:
            continue
        keys = pd.MultiIndex.from_frame(rows[["env_id", "variant"]])
        low, high = bootstrap_interval(rows["difference"].to_numpy())
        lines.append(f"| {variant} | {len(rows)} | {single[keys].mean():.2f} | {batched[keys].mean():.2f} | "
                     f"{rows['difference'].mean():+.2f} [{low:+.2f}, {high:+.2f}] |")  # fmt: skip
    p = signed_rank_test(difference["difference"].to_numpy())
    verdict = (
        "the interval holds 0 and the test finds no shift: no sign that the runs trained many to a process learn "
        "differently"
        if low <= 0 <= high and not p < 0.05
        else "they differ: the runs trained many to a process score "
        + ("higher" if difference["difference"].mean() > 0 else "lower")
    )
    lines += ["", f"Over all {len(cells)} cells, the Wilcoxon signed-rank test (two-sided): p = {p:.2f}; {verdict}."]
    return "\n".join(lines)


def study_time(runs: pd.DataFrame):
    """The time each seed's runs took: a run's share of its process's wall time is its seconds over its process's
    runs (runs.csv's agents; a batched process's runs each carry the whole process's seconds). The runner ran two
    processes at a time (data/notes.md), so a seed's wall time is half its process time. "" without seconds."""
    if "seconds" not in runs or runs["seconds"].isna().all():
        return ""
    agents = runs["agents"].fillna(1) if "agents" in runs else pd.Series(1, index=runs.index)
    runs = runs.assign(share=runs["seconds"] / agents, processes=1 / agents, host=runs["machine"].str.split(",").str[0])
    lines = [
        "The time each seed took: a run's share of its process's wall time is the process's seconds over the runs it "
        "trained; the runner ran two processes at a time, so a seed's wall time is half its process time.\n",
        "| seeds | runs | processes | process time | wall time, two at a time | machines (runs) |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    groups = [(str(seed), group) for seed, group in runs.groupby("seed")] + [("all", runs)]
    for name, group in groups:
        hours = group["share"].sum() / 3600
        counts = group["host"].fillna("not recorded").value_counts()
        machines = ", ".join(f"{host} ({counts[host]})" for host in sorted(counts.index, key=lambda h: (-counts[h], h)))
        lines.append(
            f"| {name} | {len(group)} | {group['processes'].sum():.0f} | {hours:.1f} h | {hours / 2:.1f} h | {machines} |"
        )
    return "\n".join(lines)


def table1_interval(normalized: pd.DataFrame, reps=10_000, seed=0):
    """The 95% percentile-bootstrap interval of a setting's average normalized score over its runs, each task's seeds
    resampled with replacement within that task (the tasks stay, each with its number of runs): report_stats'
    stratified_interval, the tasks in env_id order."""
    return stratified_interval([task["normalized"].to_numpy() for _, task in normalized.groupby("env_id")], reps, seed)


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
    table, coming = table1_seeds(runs)
    normalized = normalized_scores(table, random)
    tasks = sorted(runs["env_id"].unique())
    full = len(tasks) * max(PAPER_SEEDS, table["seed"].nunique())
    total = len(PAPER_TABLE1) * full
    caveat = (
        f": a setting with fewer than {full} runs is not yet comparable, and the best setting of a task is the best "
        "among those run so far"
    )
    later = (
        f" {seed_list(coming['seed'].unique()).capitalize()} {'is' if coming['seed'].nunique() == 1 else 'are'} coming in "
        f"({len(coming)} of "
        f"{coming['seed'].nunique() * len(tasks) * len(PAPER_TABLE1)} runs): these runs join the table once all of them "
        "are in, and stand beside the others at the end of this section until then."
        if len(coming)
        else ""
    )
    lines = [
        "Each run's score (the mean return of its last 100 episodes) is shifted and scaled within its task so that the "
        "random policy (100 episodes of uniform random actions, data/random.csv) scores 0 and the best setting's mean "
        "over its seeds scores 1, as in the paper; a setting's figure is the mean over its runs, with a 95% bootstrap "
        f"interval resampling seeds within tasks. {len(table)} of {total} runs are in{caveat if len(table) < total else ''}"
        f" ({seed_list(table['seed'].unique())}).{how_trained(table)}{later}\n",
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
    means = table.groupby(["variant", "env_id"])["score"].mean()
    lines += ["", "Raw means over seeds (the mean return of each run's last 100 episodes):", ""]
    lines += ["| setting | " + " | ".join(tasks) + " |", "| --- |" + " ---: |" * len(tasks)]
    random_means = random.groupby("env_id")["return"].mean()
    lines.append("| random policy | " + " | ".join(f"{random_means.get(t, np.nan):.1f}" for t in tasks) + " |")
    for variant in PAPER_TABLE1:
        cells = [f"{means[(variant, t)]:.1f}" if (variant, t) in means.index else "-" for t in tasks]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    beside, time = by_process(runs, random, table), study_time(runs)
    return "\n".join(lines + [part for text in (beside, time) if text for part in ("", text)])


def plot_table1(runs: pd.DataFrame, random: pd.DataFrame, path: Path):
    """The eleven settings' average normalized scores at a glance: ours (a dot and its 95% interval; hollow while a
    setting's runs are incomplete) beside the paper's (a cross), one row per setting, 0 the random policy."""
    table = table1_seeds(runs)[0]
    normalized = normalized_scores(table, random)
    full = runs["env_id"].nunique() * max(PAPER_SEEDS, table["seed"].nunique())
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


def plot_table1_curves(runs: pd.DataFrame, path: Path):
    """One panel per task, one line per family of objectives: the family's best setting on that task (named in the
    legend), its seeds' mean learning curve with a band of one sample standard deviation."""
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
    finish_panels(fig, axes, len(tasks), "Each family's best setting per task: mean ± sample std over seeds", path)
