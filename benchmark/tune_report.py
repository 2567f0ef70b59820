"""benchmark/tune.py's report of a study: <results>/README.md (the trials table, the best flags, the held-out comparison)
and Optuna's plots as PNGs, from the study kept in <results>/study.journal (keep_study), which --report rebuilds from."""

from pathlib import Path

from tune_workers import CAP_KEY, SPACE_KEY  # beside this file


def write_report(results: Path, study):
    """<results>/README.md and the PNGs from the study kept in <results>/study.journal and the held-out report."""
    import warnings

    import matplotlib
    import optuna
    from optuna.trial import TrialState

    matplotlib.use("Agg")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    import matplotlib.pyplot as plt

    spec = study.user_attrs[SPACE_KEY]
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    rows = ["| trial | state | value | " + " | ".join(d.split("=")[0] for d in spec["space"]) + " | seconds |",
            "|---|---|---|" + "---|" * len(spec["space"]) + "---|"]  # fmt: skip
    for t in trials:
        if t.state == TrialState.WAITING:
            continue
        value = f"{t.value:.2f}" if t.value is not None else ""
        if t.state == TrialState.PRUNED and t.intermediate_values:
            last = max(t.intermediate_values)
            value = f"({t.intermediate_values[last]:.2f} at rung {last + 1})"
        drawn = [t.params.get(d.split("=")[0].replace("-", "_"), "") for d in spec["space"]]
        params = " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in drawn)
        seconds = f"{t.duration.total_seconds():.0f}" if t.duration else ""
        rows.append(f"| {t.user_attrs.get('slot', t.number)} | {t.state.name.lower()} | {value} | {params} | {seconds} |")
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = max(complete, key=lambda t: t.value)
    pruned = sum(t.state == TrialState.PRUNED for t in trials)
    failed = sum(t.state == TrialState.FAIL for t in trials)
    plots = {"history.png": lambda: optuna.visualization.matplotlib.plot_optimization_history(study)}
    if len(spec["space"]) > 1 and len(complete) >= 4:  # PED-ANOVA's: no scikit-learn, which fANOVA's would need
        evaluator = optuna.importance.PedAnovaImportanceEvaluator()
        plots["importance.png"] = lambda: optuna.visualization.matplotlib.plot_param_importances(study, evaluator=evaluator)
    for name, plot in plots.items():
        plot()
        plt.gcf().set_size_inches(7, 4)
        plt.tight_layout()
        plt.savefig(results / name, dpi=100)
        plt.close("all")
    importance = "\n![the parameters' importance](importance.png)\n" if "importance.png" in plots else ""
    held = results / "held-out" / "README.md"
    held_text = "(not run yet)\n"
    if held.exists():  # its Scores and its comparisons, one level down; the rest (curves, runs) in its own README
        sections = held.read_text().split("\n## ")[1:]
        kept = [part for part in sections if part.startswith("Scores") or " against " in part.split("\n")[0]]
        kept = [part for part in kept if not part.startswith("Each variant")]
        held_text = "".join(f"### {part.rstrip()}\n\n" for part in kept)
        held_text += "The learning curves, the runs and the commands: [held-out/README.md](held-out/README.md).\n"
    flags = best.user_attrs["flags"]
    text = f"""# Tuning {spec["script"]} on {spec["env_id"]}

Produced by (the study's first worker; more join it with the same command):

```bash
{study.user_attrs.get("tune:command", "")}
```

{len(complete)} trials completed, {pruned} pruned, {failed} failed (of {study.user_attrs[CAP_KEY]}); each trial trained seeds
{" ".join(map(str, spec["seeds"]))} for {spec["total_timesteps"]} steps with `{spec["flags"] or "(no common flags)"}`; its
value is the mean over its seeds of each run's mean return over its last {spec["last"]} episodes.

The space: {", ".join(f"`{d}`" for d in spec["space"])}.

**Best:** trial {best.user_attrs.get("slot", best.number)}, {best.value:.2f}: `{flags}`

![the study's history](history.png)
{importance}
## On held-out seeds

{held_text}
## Trials

{chr(10).join(rows)}

Rebuild: `python benchmark/tune.py --report {results}` (from study.journal and held-out/data).
"""
    (results / "README.md").write_text(text)
    print(f"wrote {results / 'README.md'}")


def keep_study(study, storage, results: Path):
    """Copies the study into <results>/study.journal (committed; what --report rebuilds from)."""
    import optuna

    results.mkdir(parents=True, exist_ok=True)
    path = results / "study.journal"
    if path.exists():
        path.unlink()
    to = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    optuna.copy_study(from_study_name=study.study_name, from_storage=storage, to_storage=to)
    return optuna.load_study(study_name=study.study_name, storage=to)
