"""Searches a script's flags with Optuna: each trial trains its flags on the same seeds, is scored by the mean return of
its runs' last episodes, and may be pruned on the way; the study ends by training the best flags and the defaults on
seeds no trial used.

    python benchmark/tune.py --script ppo_continuous_action.py --env-id Hopper-v5 --total-timesteps 100000 \\
        --space learning-rate=1e-5..1e-3:log --space ent-coef=0..0.01 --space gae-lambda=0.8,0.9,0.95,0.99 \\
        --trials 32 --seeds 1 2 --test-seeds 101 102 103 104 105
    python benchmark/tune.py ... --pruner median          # stop trials that fall behind the median at the same step
    python benchmark/tune.py ... --storage postgresql://user@host/db   # workers on many machines share one study

The space: one --space FLAG=VALUES per flag of the script, VALUES a range LOW..HIGH (uniform; LOW..HIGH:log for a
log-uniform one; integers for an integer flag) or a list of choices A,B,C (numbers, a Literal's choices, or true,false
for a switch). Every trial runs the same --seeds with the same --total-timesteps and --flags. Its value is the mean over
its seeds of each run's mean episodic return over its last --last episodes: the score benchmark/report.py gives a run,
so that a study ranks trials as the reports rank runs, final performance over several episodes and seeds rather than one
lucky episode (the training episodes themselves: no extra evaluation steps).

Trials are asked from Optuna a process at a time (its sampler, seeded, TPE's with the constant liar: a trial asked while
others run counts them as bad, so that a batch spreads out) and trained by benchmark/tune_workers.py's workers: as agents
of one process where the script can, by any number of tuner processes (on one machine or many) that share the study's
storage (default: the journal file <out>/study.journal; any Optuna storage URL) and --out, each trial once, a killed
worker's trials continued by the next (its docstring says how). Watch a study live with optuna-dashboard, which opens
the same storages (docs/tuning.md).

Each trial's runs are ordinary run folders, <out>/<env id>/trial-<k>/seed<s>/, that benchmark/report.py reads. Once
every trial has ended, the worker that ends the last one trains the best trial's flags and the defaults on
--test-seeds (disjoint from --seeds) through benchmark/run.py and writes the report, <results>/README.md: the trials
table, the best flags, the held-out comparison (benchmark/report.py --compare default best, in <results>/held-out/)
and Optuna's plots (the history, the parameters' importance) as PNGs; <results>/study.journal keeps the study, so that
`python benchmark/tune.py --report <results>` rebuilds it.
"""

import argparse
import math
import os
import shlex
import signal
import subprocess
import sys
import time
import typing
from dataclasses import dataclass, fields
from pathlib import Path

from journal import JournalError, check_journal  # beside this file
from project import load_package, load_script
from run import die_with_runner, interrupt, slurm_job
from tune_workers import CAP_KEY, SPACE_KEY, Worker, check_trial_flags, first_line, join_study, refuse, signals_deferred

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["ppo.py", "ppo_continuous_action.py", "ppo_atari.py", "ppo_rnn.py", "ppo_rnn_continuous_action.py",
           "ppo_masked.py"]  # fmt: skip
# flags that are the study's, not a dimension of its space
NOT_SEARCHED = {"exp_name", "seed", "env_id", "total_timesteps", "resume", "eval_checkpoint", "eval_episodes", "track", "cuda",
                "wandb_project_name", "wandb_entity", "capture_video", "save_model", "checkpoint_interval"}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------- space
@dataclass
class Dimension:
    """One flag of the space: a range (low, high; log) or a list of choices, of the flag's type (kind)."""

    flag: str  # the field's name, e.g. learning_rate
    kind: str  # "float", "int", "bool" or "choice" (a Literal's)
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple = ()

    @property
    def option(self):
        return "--" + self.flag.replace("_", "-")

    def spec(self):
        if self.choices:
            return f"{self.option[2:]}={','.join(map(str, self.choices))}"
        return f"{self.option[2:]}={self.low}..{self.high}" + (":log" if self.log else "")

    def suggest(self, trial):
        if self.choices:
            return trial.suggest_categorical(self.flag, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.flag, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.flag, self.low, self.high, log=self.log)

    def words(self, value):
        """The command-line words that give the flag `value` (a float to 6 significant digits: what the runs use)."""
        if self.kind == "bool":
            return [self.option if value else f"--no-{self.option[2:]}"]
        return [self.option, f"{value:.6g}" if isinstance(value, float) else str(value)]


def flag_kind(annotation):
    """(kind, a Literal's choices) of an Args field's type; None for one a search cannot draw (a tuple, a str)."""
    drawn = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is not typing.Literal and len(drawn) == 1:  # X | None: X
        annotation = drawn[0]
    if typing.get_origin(annotation) is typing.Literal:
        return "choice", typing.get_args(annotation)
    return {bool: ("bool", ()), int: ("int", ()), float: ("float", ())}.get(annotation)


def parse_dimension(spec, script, Args):
    """One --space FLAG=VALUES as a Dimension, checked against the script's flag (its type, and its range as the script
    checks it); SystemExit in one line for an unknown flag, a malformed range, a choice of the wrong type or a value the
    flag's rules refuse."""
    from ppo_utils.flag_checks import FLAG_RULES

    name, sep, values = spec.partition("=")
    flag = name.removeprefix("--").replace("-", "_")
    option = "--" + flag.replace("_", "-")
    if not sep or not values:
        refuse(f"--space {spec}: write FLAG=LOW..HIGH, FLAG=LOW..HIGH:log or FLAG=A,B,C, e.g. --space "
               "learning-rate=1e-5..1e-3:log")  # fmt: skip
    kinds = {f.name: f.type for f in fields(Args)}
    if flag not in kinds:
        refuse(f"--space {spec}: {script} has no flag {option}; see python {script} --help")
    if flag in NOT_SEARCHED:
        refuse(f"--space {spec}: {option} is the study's, not a searched flag; pass it as tune.py's own option or in "
               "--flags")  # fmt: skip
    found = flag_kind(kinds[flag])
    if found is None:
        refuse(f"--space {spec}: {option} takes no number or choice a search can draw")
    kind, literal = found
    rules = FLAG_RULES | getattr(Args, "flag_rules", {})

    def checked(value):
        if kind in ("int", "float") and not math.isfinite(value):
            refuse(f"--space {spec}: {option} {value}: pass finite numbers")
        if flag in rules and not rules[flag][0](value):
            refuse(f"--space {spec}: {option} {value}: {rules[flag][1]}")
        return value

    def typed(word):
        try:
            if kind == "bool":
                return {"true": True, "false": False}[word.lower()]
            if kind == "choice":
                assert word in literal
                return word
            return int(word) if kind == "int" else float(word)
        except (KeyError, AssertionError, ValueError):
            wanted = {"bool": "true or false", "choice": f"one of {', '.join(literal)}", "int": "a whole number",
                      "float": "a number"}[kind]  # fmt: skip
            refuse(f"--space {spec}: {word!r} is no value of {option}; pass {wanted}")

    if ".." in values:
        if kind in ("bool", "choice"):
            refuse(f"--space {spec}: {option} takes choices, not a range; list them, e.g. "
                   f"{name}={','.join(map(str, literal or ('true', 'false')))}")  # fmt: skip
        bounds, _, scale = values.partition(":")
        low, _, high = bounds.partition("..")
        if scale not in ("", "log"):
            refuse(f"--space {spec}: the scale is :log or none (uniform), not :{scale}")
        low, high = checked(typed(low)), checked(typed(high))
        if not low < high:
            refuse(f"--space {spec}: the range's low end must be below its high end")
        if scale == "log" and low <= 0:
            refuse(f"--space {spec}: a log range needs a low end > 0")
        return Dimension(flag, kind, low, high, log=scale == "log")
    choices = tuple(checked(typed(word)) for word in values.split(","))
    if len(set(choices)) < 2:
        refuse(f"--space {spec}: give two or more distinct choices, or a range LOW..HIGH")
    return Dimension(flag, kind, choices=choices)


def parse_space(specs, script, Args):
    if not specs:
        refuse("--space: give one or more flags to search, e.g. --space learning-rate=1e-5..1e-3:log")
    space = [parse_dimension(spec, script, Args) for spec in specs]
    names = [d.flag for d in space]
    if len(set(names)) < len(names):
        twice = max(names, key=names.count).replace("_", "-")
        refuse(f"--space {twice}: the flag is given twice; give each flag one --space")
    return space


# ------------------------------------------------------------------------------------------------------------ storage
def open_storage(url, out: Path):
    """An Optuna storage: a journal file (the default <out>/study.journal, or a path ending in .journal), or any URL
    Optuna's RDBStorage opens (sqlite:///..., postgresql://..., mysql://...). SystemExit in one line where it cannot be
    opened."""
    import optuna

    flag = f"--storage {url}" if url else f"--out {out}: its study.journal"
    url = url or str(out / "study.journal")
    if "://" not in url:  # a journal file: read whole before anything is written to it
        check_folder(flag, Path(url).parent)
        if Path(url).is_dir():
            refuse(f"{flag}: a folder, not a journal file; pass a file's path (a new one makes a new study)")
        try:
            mended = check_journal(url)
        except JournalError as e:
            refuse(f"{flag}: {e}; nothing was written to it: pass a journal this program wrote, or a new path")
        if mended:
            print(f"mended {mended}", flush=True)
    try:
        if "://" not in url:
            Path(url).parent.mkdir(parents=True, exist_ok=True)
            backend = optuna.storages.journal.JournalFileBackend(url)
            return optuna.storages.JournalStorage(backend)
        for attempt in range(3):
            try:
                return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
            except Exception as e:  # workers started together on an empty database: one made the tables a moment ago
                if "already exists" not in str(e) and "UniqueViolation" not in str(e) or attempt == 2:
                    raise
                time.sleep(1.0)
    except Exception as e:  # sqlalchemy's, a driver's, the file system's: one line
        refuse(f"{flag}: cannot open it ({first_line(e)}); pass a journal file path or a URL Optuna opens "
               "(sqlite:///study.db, postgresql://user:password@host/db)")  # fmt: skip


def check_folder(flag, path):
    """SystemExit in one line where `path` cannot be a folder this program writes in (it or a folder above it is a file,
    or the nearest folder above it that exists is not writable); nothing is made."""
    path = Path(path).absolute()
    for above in [path, *path.parents]:
        if above.exists():
            if not above.is_dir():
                refuse(f"{flag}: {above} is a file, not a folder; pass a folder there is none in the way of")
            if not os.access(above, os.W_OK | os.X_OK):
                refuse(f"{flag}: cannot write in {above}; pass a folder you may write in")
            return


# ----------------------------------------------------------------------------------------------------------- held out
def held_out(options, study, space):
    """Trains the best trial's flags and the script's defaults (with --flags both) on --test-seeds through
    benchmark/run.py, in <out>/held-out/, and reports them with benchmark/report.py in <results>/held-out/."""
    best = study.best_trial
    words = [w for d in space for w in d.words(best.params[d.flag])]
    out, results = Path(options.out) / "held-out", Path(options.results)
    command = [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", options.script, "--env-ids",
               options.env_id, "--seeds", *map(str, options.test_seeds), "--total-timesteps",
               str(options.test_timesteps or options.total_timesteps), "--flags=" + options.flags, "--variant", "default=",
               "--variant", "best=" + shlex.join(words), "--out", str(out), "--workers", str(options.workers),
               "--results", str(results / "held-out")]  # fmt: skip
    for baseline in options.baseline:  # NAME=FLAGS: more settings to hold the best one against
        command += ["--variant", baseline]
    if options.script == "ppo_continuous_action.py" and not options.no_batch:
        command.append("--batch-seeds")
    slot, seeds = best.user_attrs.get("slot", best.number), " ".join(map(str, options.test_seeds))
    print(f"the best trial ({slot}: {shlex.join(words)}, {best.value:.2f}) and the defaults on the held-out seeds {seeds}: "
          f"{shlex.join(command)}", flush=True)  # fmt: skip
    run_to_end(command, "the held-out runs (benchmark/run.py)")
    report = [sys.executable, str(ROOT / "benchmark" / "report.py"), str(out), "--output", str(results / "held-out"),
              "--last", str(options.last), "--compare", "default", "best"]  # fmt: skip
    for baseline in options.baseline:
        report += ["--compare", baseline.partition("=")[0], "best"]
    run_to_end(report, "their report (benchmark/report.py)")


def run_to_end(command, what):
    """Runs one of the benchmark's tools to its end, in a process group of its own: a Ctrl-C or SIGTERM of the tuner
    reaches it once, passed on as SIGINT (its runs save their checkpoints), and is waited for; then KeyboardInterrupt.
    SystemExit in one line where it fails (its own lines, above, say why)."""
    process = subprocess.Popen(command, process_group=0, preexec_fn=die_with_runner)
    try:
        status = process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)
        process.wait()
        raise
    if status != 0:
        refuse(f"{what} ended with exit status {status}; its lines above say why")


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
    text = f"""# Tuning {spec["script"]} on {spec["env_id"]}

Produced by (the study's first worker; more join it with the same command):

```bash
{study.user_attrs.get("tune:command", "")}
```

{len(complete)} trials completed, {pruned} pruned, {failed} failed (of {study.user_attrs[CAP_KEY]}); each trial trained seeds
{" ".join(map(str, spec["seeds"]))} for {spec["total_timesteps"]} steps with `{spec["flags"] or "(no common flags)"}`; its
value is the mean over its seeds of each run's mean return over its last {spec["last"]} episodes.

The space: {", ".join(f"`{d}`" for d in spec["space"])}.

**Best:** trial {best.user_attrs.get("slot", best.number)}, {best.value:.2f}: `{best.user_attrs["flags"]}`

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
    path.unlink(missing_ok=True)
    to = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    optuna.copy_study(from_study_name=study.study_name, from_storage=storage, to_storage=to)
    return optuna.load_study(study_name=study.study_name, storage=to)


def make_sampler(options, offset=0):
    """--sampler, seeded with --sampler-seed + `offset`: TPE with the constant liar, or random."""
    import optuna

    if options.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=options.sampler_seed + offset, constant_liar=True)
    return optuna.samplers.RandomSampler(seed=options.sampler_seed + offset)


def make_pruner(options):
    """--pruner: none; median (a trial below the median of the completed trials at the same rung, once --prune-after
    have completed); halving (successive halving: at rungs 1, 2, 4, ... a trial outside the top half of those that
    reached it)."""
    import optuna

    if options.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=options.prune_after)
    if options.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2)
    return optuna.pruners.NopPruner()


def make_parser():
    """tune.py's command line (benchmark/speed.py's cleanrl-tuner reads a search from it too)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--script", default="ppo_continuous_action.py", help=", ".join(SCRIPTS))
    parser.add_argument("--env-id", help="the task")
    parser.add_argument("--space", action="append", default=[], help="FLAG=LOW..HIGH[:log] or FLAG=A,B,C, repeatable")
    parser.add_argument("--trials", type=int, default=32, help="trials of the study, over all its workers")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2], help="the seeds every trial trains")
    parser.add_argument("--test-seeds", nargs="+", type=int, default=[101, 102, 103, 104, 105],
                        help="the held-out seeds the best flags and the defaults train on at the end")  # fmt: skip
    parser.add_argument("--total-timesteps", type=int, help="steps of every trial's runs")
    parser.add_argument("--test-timesteps", type=int, help="steps of the held-out runs (default: --total-timesteps)")
    parser.add_argument("--baseline", action="append", default=[], metavar="NAME=FLAGS",
                        help="a setting the held-out seeds also train, against which the best is compared too")  # fmt: skip
    parser.add_argument("--flags", default="", help='flags for every run, e.g. --flags "--num-envs 8"')
    parser.add_argument("--last", type=int, default=100, help="episodes at the end of each run that make its score")
    parser.add_argument("--sampler", choices=["tpe", "random"], default="tpe", help="Optuna's sampler")
    parser.add_argument("--sampler-seed", type=int, default=0, help="the sampler's seed (its creator's; others add their pid)")
    parser.add_argument("--pruner", choices=["none", "median", "halving"], default="none", help="stop trials that fall "
                        "behind: below the median of others at the same rung, or successive halving")  # fmt: skip
    parser.add_argument("--prune-after", type=int, default=4, help="median: the trials that complete before any is pruned")
    parser.add_argument("--rungs", type=int, default=3, help="steps a trial is reported (and may be pruned) at, evenly spaced")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="training processes of this tuner at a time")
    parser.add_argument("--agents", type=int, default=8, help="batched: the runs (trials x seeds) one process trains")
    parser.add_argument("--no-batch", action="store_true", help="one process per trial and seed, for every script")
    parser.add_argument("--study", help="the study's name (default: tune-<env id>)")
    parser.add_argument("--storage", help="an Optuna storage URL or journal file (default: <out>/study.journal)")
    parser.add_argument("--grace", type=float, default=600, help="seconds without a heartbeat after which a trial "
                        "of a worker on another machine counts as dead")  # fmt: skip
    parser.add_argument("--out", help="the run folders (default: benchmark/runs/tune-<env id>)")
    parser.add_argument("--results", help="the report (default: benchmark/results/tune-<env id>)")
    parser.add_argument("--no-test", action="store_true", help="end without the held-out runs and the report")
    parser.add_argument("--slurm", metavar="FILE", help="write a Slurm array job of --slurm-workers tuners and exit")
    parser.add_argument("--slurm-workers", type=int, default=4, help="tuner processes of the --slurm array job")
    parser.add_argument("--report", metavar="RESULTS", help="rebuild RESULTS/README.md and its PNGs from its study.journal")
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    options = make_parser().parse_args(argv)
    options.argv = argv

    import optuna

    if options.report:
        write_report(Path(options.report), reported_study(Path(options.report)))
        return
    check_options(options)
    options.study = options.study or f"tune-{options.env_id}"
    options.out = options.out or str(ROOT / "benchmark" / "runs" / f"tune-{options.env_id}")
    options.results = options.results or str(ROOT / "benchmark" / "results" / f"tune-{options.env_id}")
    Args = load_script(options.script).Args
    space = parse_space(options.space, options.script, Args)
    check_common_flags(options, space, Args)
    options.flags = shlex.join(shlex.split(options.flags))  # one spelling, as the study keeps it
    check_folder(f"--out {options.out}", options.out)
    if not options.no_test:
        check_folder(f"--results {options.results}", options.results)
    if options.slurm:
        if not Path(options.slurm).parent.is_dir():
            refuse(f"--slurm {options.slurm}: no folder {Path(options.slurm).parent}; make it, or write the job elsewhere")
        job = slurm_job(f"tune-{options.study}", options.slurm_workers, options.workers, options.out, __file__, argv,
                        ["--slurm", "--slurm-workers"])  # tuners joining the study: its storage must reach them all
        Path(options.slurm).write_text(job)
        print(f"wrote {options.slurm}: sbatch it (its {options.slurm_workers} tuners share --storage and --out)")
        return

    out = Path(options.out)
    os.environ.setdefault("PPO_PROGRESS_SECONDS", "2")  # the runs' progress lines, which the rungs are read from
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)  # a cluster's preemption or a kill stops it as Ctrl-C does
    storage = open_storage(options.storage, out)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with signals_deferred() as check:
            study, created, lock = join_study(options, space, storage, make_sampler(options), make_pruner(options), out, check)
    except KeyboardInterrupt:
        raise SystemExit("interrupted while the study's trials were queued; run the same command again to queue the rest "
                         "and start") from None  # fmt: skip
    if not created:  # a worker that joins: draws of its own, not its creator's again
        study.sampler = make_sampler(options, os.getpid())
    where = options.storage or out / "study.journal"
    print(f"study {options.study} in {where} ({'created' if created else 'joined'}); runs in {out}; watch it with: "
          f"optuna-dashboard {where}", flush=True)  # fmt: skip
    worker = Worker(options, space, study, Args)
    print(worker.progress(), flush=True)
    try:
        ended = worker.work()
    finally:
        lock.close()
    if not ended:
        print(f"this worker found no waiting trial; the others' running trials end elsewhere: {worker.progress()}")
        return
    if not study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE]):
        failed = [t for t in study.trials if "failed" in t.user_attrs]
        why = f"trial {failed[-1].user_attrs.get('slot')}: {failed[-1].user_attrs['failed']}" if failed else f"see {out}"
        raise SystemExit(f"error: no trial of {options.study} completed ({why})")
    if options.no_test:
        print(f"all trials ended; best {study.best_value:.2f}: {study.best_params}")
        return
    try:
        held_out(options, study, space)
    except KeyboardInterrupt:
        raise SystemExit(f"interrupted on the held-out seeds; run the same command again to continue them from their "
                         f"checkpoints: python benchmark/tune.py {shlex.join(argv)}") from None  # fmt: skip
    write_report(Path(options.results), keep_study(study, storage, Path(options.results)))


def check_options(options):
    """tune.py's own options, each in one line before anything is written or trained."""
    load_package("ppo_utils")
    from ppo_utils.flag_checks import FLAG_RULES

    if options.script not in SCRIPTS:
        refuse(f"--script {options.script}: pass one of {', '.join(SCRIPTS)}")
    if not options.env_id or not options.total_timesteps:
        refuse("pass --env-id and --total-timesteps: every trial trains on that task for that many steps")
    for name in ("total_timesteps", "test_timesteps", "trials", "workers", "agents", "last", "slurm_workers"):
        if getattr(options, name) is not None and getattr(options, name) < 1:
            refuse(f"--{name.replace('_', '-')} {getattr(options, name)}: pass a positive count")
    for name in ("rungs", "prune_after"):
        if getattr(options, name) < 0:
            refuse(f"--{name.replace('_', '-')} {getattr(options, name)}: pass a count >= 0")
    if not (math.isfinite(options.grace) and options.grace > 0):
        refuse(f"--grace {options.grace}: pass the seconds (> 0) without a heartbeat after which a worker counts as dead")
    in_range, fix = FLAG_RULES["seed"]
    for seed in [*options.seeds, *options.test_seeds]:
        if not in_range(seed):
            refuse(f"--seeds and --test-seeds {seed}: {fix}")
    if len(set(options.seeds)) < len(options.seeds) or len(set(options.test_seeds)) < len(options.test_seeds):
        refuse("--seeds and --test-seeds: give each seed once")
    if set(options.seeds) & set(options.test_seeds):
        both = " ".join(map(str, sorted(set(options.seeds) & set(options.test_seeds))))
        refuse(f"--test-seeds {both}: the search trains on these too; held-out seeds must be others (Eimer et al., 2023)")


# the flags of a study's runs that the study itself sets or needs, which --flags may not carry: what to use instead
STUDY_FLAGS = {
    "seed": "--seeds and --test-seeds set each run's", "seeds": "--seeds and --test-seeds set each run's",
    "setting": "each trial is a setting of its own", "env_id": "pass tune.py's --env-id",
    "total_timesteps": "pass tune.py's --total-timesteps (and --test-timesteps)",
    "exp_name": "the study names each run's folder", "resume": "the same tune.py command continues the study's runs",
    "save_model": "the study's runs keep checkpoints to continue from",
    "checkpoint_interval": "the study's runs keep checkpoints to continue from",
    "eval_checkpoint": "evaluate a run's agent.pt with the script's --eval-checkpoint after the study",
    "eval_episodes": "evaluate a run's agent.pt with the script's --eval-checkpoint after the study",
}  # fmt: skip


def check_common_flags(options, space, Args):
    """--flags: neither a searched flag nor one the study owns (STUDY_FLAGS), and flags the script takes."""
    common = [
        w[2:].partition("=")[0].replace("-", "_").removeprefix("no_") for w in shlex.split(options.flags) if w.startswith("--")
    ]
    searched = sorted({d.flag for d in space} & set(common))
    if searched:
        refuse(f"--flags {options.flags}: --{searched[0].replace('_', '-')} is searched; leave it out of --flags")
    owned = [name for name in common if name in STUDY_FLAGS]
    if owned:
        refuse(f"--flags {options.flags}: --{owned[0].replace('_', '-')} is the study's ({STUDY_FLAGS[owned[0]]}); leave it "
               "out of --flags")  # fmt: skip
    why = check_trial_flags(Args, shlex.split(options.flags) + ["--env-id", options.env_id, "--total-timesteps",
                                                                str(options.total_timesteps)])  # fmt: skip
    if why:
        refuse(f"--flags {options.flags!r} with --env-id {options.env_id}: {why}")


def reported_study(results: Path):
    """The study of a results folder's study.journal, for --report; SystemExit in one line where there is none."""
    import optuna

    path = results / "study.journal"
    if not path.is_file():
        refuse(f"--report {results}: no study.journal there; pass a results folder this program wrote")
    try:
        if mended := check_journal(path):  # mends a torn last line, as a tuner does
            print(f"mended {mended}", flush=True)
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
        names = optuna.get_all_study_names(storage)
    except (JournalError, ValueError) as e:
        refuse(f"--report {results}: its study.journal is no journal of a study ({first_line(e)}); pass a results folder "
               "this program wrote")  # fmt: skip
    if not names:
        refuse(f"--report {results}: its study.journal holds no study; pass a results folder this program wrote")
    study = optuna.load_study(study_name=names[0], storage=storage)
    if SPACE_KEY not in study.user_attrs or not study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE]):
        refuse(f"--report {results}: its study has no completed trial of a tune.py search; run the search first")
    return study


if __name__ == "__main__":
    main()
