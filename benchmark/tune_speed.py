"""Trials per hour of one search run three ways, side by side: (a) benchmark/tune.py batched (trials as agents of
ppo_continuous_action_seeds.py), (b) benchmark/tune.py --no-batch (one process of ppo_continuous_action.py per trial
and seed) and (c) CleanRL's Optuna tuner (cleanrl_utils/tuner.py from the folder CLEANRL_DIR names, on its
ppo_continuous_action.py: each trial's seeds one after another inside the tuner's own process, through runpy).

    CLEANRL_DIR=~/cleanrl python benchmark/tune_speed.py --env-id Hopper-v5 --trials 8 --seeds 2 \\
        --total-timesteps 20480 --rounds 2 --output benchmark/results/tune-speed.md

The three run the same search: the same --space (each flag drawn under the same name), Optuna's TPE sampler seeded
with the same --sampler-seed, the same --trials, the same seeds (0 .. --seeds - 1: CleanRL's tuner's range(num_seeds))
and --total-timesteps, and the same per-run flags (--num-envs, --num-steps and --flags go to every run of all three;
--no-compile to ours only, CleanRL's script has no torch.compile). tune.py runs with --no-test (no held-out runs),
--workers processes at a time and, batched, --agents runs per process. Each variant runs in fresh temporary folders
(CleanRL's tuner writes runs/ into its working directory) in the order a b c a b c ..., --rounds times; its wall time
runs from its process's start to the line it prints once its last trial has ended, and trials per hour is --trials
over that. The ratios a/c, a/b and b/c are taken within each round (the machine's speed drifts) and then averaged.
The search's runs must be alone on the machine: anything else running there takes cores from one variant and not
from another.
"""

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VARIANTS = {
    "a": "tune.py batched",
    "b": "tune.py --no-batch",
    "c": "CleanRL's tuner",
}
DEFAULT_SPACE = ["learning-rate=1e-4..3e-3:log", "ent-coef=0..0.01", "clip-coef=0.1..0.3", "gae-lambda=0.9..0.99"]
STUDY = "tune-speed"
CLEANRL_END = "tune_speed: CleanRL's tuner ended"  # the child's line once tune() has returned
TUNE_END = "all trials ended"  # tune.py's line once its last trial has ended (--no-test)


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--env-id", default="Hopper-v5")
    p.add_argument("--trials", type=int, default=8, help="trials of each search")
    p.add_argument("--seeds", type=int, default=2, help="seeds per trial: 0 .. SEEDS-1 (CleanRL's tuner's)")
    p.add_argument("--total-timesteps", type=int, default=20480, help="steps of every run")
    p.add_argument("--space", action="append", help="FLAG=LOW..HIGH[:log] or FLAG=A,B,C, repeatable (tune.py's "
                   f"form); default: {' '.join(DEFAULT_SPACE)}")  # fmt: skip
    p.add_argument("--sampler-seed", type=int, default=0, help="TPE's seed, the same in all three")
    p.add_argument("--num-envs", type=int, default=1, help="every run's --num-envs")
    p.add_argument("--num-steps", type=int, default=2048, help="every run's --num-steps")
    p.add_argument("--flags", default="", help="more flags for every run of all three, each --FLAG VALUE (CleanRL's "
                   "tuner passes --FLAG=VALUE: no bare switches)")  # fmt: skip
    p.add_argument("--no-compile", action="store_true", help="our scripts without torch.compile (default: on)")
    p.add_argument("--agents", type=int, default=8, help="(a): runs (trials x seeds) per process")
    p.add_argument("--workers", type=int, default=2, help="(a), (b): training processes at a time")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS), help="which to run")
    p.add_argument("--rounds", type=int, default=2, help="a b c, this many times")
    p.add_argument("--timeout", type=float, default=4 * 3600, help="seconds one variant's search may take")
    p.add_argument("--output", default=str(ROOT / "benchmark" / "results" / "tune-speed.md"), help="the report")
    p.add_argument("--keep", metavar="DIR", help="keep each variant's folders under DIR (default: deleted)")
    return p


def run_words(options):
    """The per-run flags all three scripts are given, as (flag, value) pairs."""
    pairs, words = [("num-envs", str(options.num_envs)), ("num-steps", str(options.num_steps))], shlex.split(options.flags)
    while words:
        word = words.pop(0)
        if not word.startswith("--"):
            raise SystemExit(f"error: --flags {options.flags!r}: {word!r} is no --FLAG; write --FLAG VALUE pairs")
        name, sep, value = word[2:].partition("=")
        if not sep:
            if not words or words[0].startswith("--"):
                raise SystemExit(f"error: --flags: --{name} has no value; CleanRL's tuner writes --FLAG=VALUE, which "
                                 "a bare switch does not take")  # fmt: skip
            value = words.pop(0)
        pairs.append((name.replace("_", "-"), value))
    return pairs


def parse_space(options):
    """tune.py's Dimensions of --space (checked against our ppo_continuous_action.py's flags, as tune.py checks them)."""
    sys.path.insert(0, str(HERE))
    import tune

    space = tune.parse_space(options.space or DEFAULT_SPACE, "ppo_continuous_action.py",
                             tune.load_script("ppo_continuous_action.py").Args)  # fmt: skip
    for d in space:
        if d.kind == "bool":
            raise SystemExit(f"error: --space {d.spec()}: CleanRL's tuner writes --FLAG=VALUE, which a switch does not "
                             "take; search numbers or choices")  # fmt: skip
    return space


def commands(options, space, scratch, cleanrl_dir):
    """{variant: (argv, working directory)}: the three searches' processes, in folders under `scratch` (one each)."""
    seeds = [str(s) for s in range(options.seeds)]
    pairs = run_words(options)
    ours = shlex.join([w for name, value in pairs for w in (f"--{name}", value)] + (["--no-compile"] * options.no_compile))
    tune = [sys.executable, str(HERE / "tune.py"), "--script", "ppo_continuous_action.py", "--env-id", options.env_id,
            "--total-timesteps", str(options.total_timesteps), "--trials", str(options.trials), "--seeds", *seeds,
            "--sampler", "tpe", "--sampler-seed", str(options.sampler_seed), "--flags=" + ours,
            "--workers", str(options.workers), "--study", STUDY, "--no-test"]  # fmt: skip
    tune += [w for d in space for w in ("--space", d.spec())]
    out = {}
    for name, extra in (("a", ["--agents", str(options.agents)]), ("b", ["--no-batch"])):
        folder = Path(scratch) / name
        out[name] = (tune + extra + ["--out", str(folder / "out"), "--results", str(folder / "results")], folder)
    folder = Path(scratch) / "c"
    spec = {
        "cleanrl_dir": str(cleanrl_dir),
        "script": str(Path(cleanrl_dir) / "ppo_continuous_action.py"),
        "env_id": options.env_id,
        "space": [
            {
                "name": d.flag,
                "option": d.option[2:],
                "kind": d.kind,
                "low": d.low,
                "high": d.high,
                "log": d.log,
                "choices": list(d.choices),
            }
            for d in space
        ],  # fmt: skip
        "fixed": {"total-timesteps": str(options.total_timesteps), **dict(pairs)},
        "sampler_seed": options.sampler_seed,
        "trials": options.trials,
        "seeds": options.seeds,
        "storage": f"sqlite:///{folder / 'cleanrl.db'}",
    }
    out["c"] = ([sys.executable, str(Path(__file__).resolve()), "--cleanrl-child", json.dumps(spec)], folder)
    return out


def cleanrl_params(spec, trial):
    """(c)'s params_fn: each flag of the space drawn under tune.py's name for it (learning_rate), as
    {option: value} (CleanRL's tuner writes --option=value), with the fixed per-run flags."""
    params = {}
    for d in spec["space"]:
        if d["choices"]:
            value = trial.suggest_categorical(d["name"], d["choices"])
        elif d["kind"] == "int":
            value = trial.suggest_int(d["name"], int(d["low"]), int(d["high"]), log=d["log"])
        else:
            value = trial.suggest_float(d["name"], d["low"], d["high"], log=d["log"])
        params[d["option"]] = f"{value:.6g}" if isinstance(value, float) else value  # as tune.py gives its runs
    return {**params, **spec["fixed"]}


def cleanrl_child(spec):
    """(c), in its own process: CleanRL's Tuner on its script with the space as params_fn, TPE seeded, the study in
    a sqlite file; prints CLEANRL_END once tune() returns. Nothing of this project is imported here."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    sys.path.insert(0, spec["cleanrl_dir"])
    import optuna
    from cleanrl_utils.tuner import Tuner

    tuner = Tuner(script=spec["script"], metric="charts/episodic_return", target_scores={spec["env_id"]: None},
                  params_fn=lambda trial: cleanrl_params(spec, trial), sampler=optuna.samplers.TPESampler(seed=spec["sampler_seed"]),
                  storage=spec["storage"], study_name=STUDY)  # fmt: skip
    tuner.tune(num_trials=spec["trials"], num_seeds=spec["seeds"])
    print(CLEANRL_END, flush=True)


def run_variant(name, argv, folder, env, timeout):
    """Runs one search; returns (seconds from its start to its end line, its output). SystemExit where it fails."""
    if folder.exists():
        raise SystemExit(f"error: ({name}) {folder} exists already (a search there would join its study); pass another --keep")
    folder.mkdir(parents=True)
    log = folder / "output.log"
    marker = CLEANRL_END if name == "c" else TUNE_END
    ended = None
    with open(log, "w") as handle:
        start = time.perf_counter()
        process = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)  # fmt: skip
        timer = threading.Timer(timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
        timer.start()
        try:
            for line in process.stdout:
                if ended is None and line.startswith(marker):
                    ended = time.perf_counter() - start
                handle.write(line)
            process.wait()
        finally:
            timer.cancel()
    if process.returncode != 0 or ended is None:
        tail = log.read_text().strip().splitlines()[-3:] or ["(no output)"]
        why = (
            f"ran past --timeout {timeout:g} s"
            if process.returncode == -signal.SIGKILL
            else f"exited with {process.returncode}"
        )
        raise SystemExit(f"error: ({name}) {VARIANTS[name]} {why} (see {log}): " + " / ".join(tail))
    return ended


def drawn(name, folder):
    """The flags each trial of a finished search drew, in trial order ([(name, value rounded), ...] per trial), and the
    number that completed: read from its storage after the timing."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if name == "c":
        storage = f"sqlite:///{folder / 'cleanrl.db'}"
    else:
        storage = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(folder / "out" / "study.journal"))
        )
    study = optuna.load_study(study_name=STUDY, storage=storage)
    ended = [t for t in study.get_trials(deepcopy=False) if t.params]
    ended.sort(key=lambda t: t.user_attrs.get("slot", t.number))
    rounded = lambda v: float(f"{v:.6g}") if isinstance(v, float) else v  # noqa: E731
    params = [tuple(sorted((k, rounded(v)) for k, v in t.params.items())) for t in ended]
    complete = sum(t.state == optuna.trial.TrialState.COMPLETE for t in ended)
    return params, complete


def report(options, space, rounds, command, note):
    from versus import machine

    names = options.variants
    pairs = [(x, y) for x, y in (("a", "c"), ("a", "b"), ("b", "c")) if x in names and y in names]
    flags = " ".join(f"--{k} {v}" for k, v in run_words(options))
    lines = [
        "# Trials per hour: tune.py batched, tune.py --no-batch and CleanRL's tuner",
        "",
        f"`{command}`",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {machine()}. The search's runs must be alone on the "
        "machine: anything else running takes cores from one variant and not from another.",
        "",
        f"The search: {options.env_id}, {options.trials} trials x {options.seeds} seed{'s' * (options.seeds > 1)} "
        f"({', '.join(map(str, range(options.seeds)))}) x {options.total_timesteps} steps; the space "
        f"{', '.join(f'`{d.spec()}`' for d in space)}; TPE seeded {options.sampler_seed}; every run `{flags}`, ours "
        f"torch.compile {'off (--no-compile)' if options.no_compile else 'on (the default)'}.",
        "",
        f"- (a) {VARIANTS['a']}: `benchmark/tune.py --agents {options.agents} --workers {options.workers} --no-test`, "
        f"trials as agents of ppo_continuous_action_seeds.py ({options.agents} runs per process, {options.workers} "
        "processes at a time); TPE with the constant liar, as tune.py has it.",
        f"- (b) {VARIANTS['b']}: `benchmark/tune.py --no-batch --workers {options.workers} --no-test`, one process "
        f"of ppo_continuous_action.py per trial and seed, {options.workers} at a time.",
        "- (c) CleanRL's tuner: `Tuner(script=$CLEANRL_DIR/ppo_continuous_action.py, metric=\"charts/episodic_return\", "
        "target_scores={env: None}, sampler=TPESampler(seed)).tune(trials, seeds)` in a process of its own: every run "
        "one after another in that process (runpy), with torch's default threads (ours: one per process).",
        "",
        "Wall time: from the search's process start to the line it prints once its last trial has ended (imports, "
        "compiling and the storage included); trials/h = trials / wall hours. Variants alternate (" + " ".join(names)
        + f" ...), {options.rounds} round{'s' * (options.rounds > 1)}, each in fresh temporary folders; the ratios are of trials/h within a round.",
        "",
        "| round | " + " | ".join(f"({n}) wall s / trials/h" for n in names) + " | "
        + " | ".join(f"{x}/{y}" for x, y in pairs) + " |",
        "| ---: | " + " | ".join("---:" for _ in names) + " | " + " | ".join("---:" for _ in pairs) + " |",
    ]  # fmt: skip
    ratios = {pair: [] for pair in pairs}
    for i, result in enumerate(rounds, 1):
        rate = {n: options.trials / (result[n]["wall"] / 3600) for n in names}
        for x, y in pairs:
            ratios[(x, y)].append(rate[x] / rate[y])
        lines.append(f"| {i} | " + " | ".join(f"{result[n]['wall']:.1f} / {rate[n]:.1f}" for n in names) + " | "
                     + " | ".join(f"{rate[x] / rate[y]:.2f}x" for x, y in pairs) + " |")  # fmt: skip
    mean_rate = {n: statistics.mean(options.trials / (r[n]["wall"] / 3600) for r in rounds) for n in names}
    lines.append("| mean | " + " | ".join(f"{statistics.mean(r[n]['wall'] for r in rounds):.1f} / {mean_rate[n]:.1f}"
                                          for n in names) + " | "
                 + " | ".join(f"**{statistics.mean(ratios[p]):.2f}x**" for p in pairs) + " |")  # fmt: skip
    lines += ["", note]
    return "\n".join(lines) + "\n"


def same_draws(options, rounds):
    """A line: whether every variant's trials drew the same flags (and how many completed)."""
    names = options.variants
    said = []
    for i, result in enumerate(rounds, 1):
        draws = {n: result[n]["params"] for n in names}
        same = all(draws[n] == draws[names[0]] for n in names)
        completed = ", ".join(f"({n}) {result[n]['complete']}" for n in names)
        said.append(f"round {i}: {'the same flags' if same else 'different flags'}; completed {completed}")
    return ("Each trial's drawn flags, read from each search's storage afterwards (rounded to the 6 digits the runs are "
            f"given): {'; '.join(said)} (of {options.trials}).")  # fmt: skip


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--cleanrl-child"]:
        return cleanrl_child(json.loads(argv[1]))
    options = parser().parse_args(argv)
    if min(options.trials, options.seeds, options.total_timesteps, options.agents, options.workers, options.rounds) < 1:
        raise SystemExit("error: --trials, --seeds, --total-timesteps, --agents, --workers and --rounds take counts >= 1")
    cleanrl_dir = os.environ.get("CLEANRL_DIR", "")
    if "c" in options.variants:
        if not cleanrl_dir:
            raise SystemExit("error: (c) CleanRL's tuner: CLEANRL_DIR is not set; set CLEANRL_DIR to the folder of "
                             "CleanRL's ppo_continuous_action.py and cleanrl_utils/tuner.py, or leave c out of --variants")  # fmt: skip
        cleanrl_dir = Path(cleanrl_dir).resolve()
        missing = [p for p in ("ppo_continuous_action.py", "cleanrl_utils/tuner.py") if not (cleanrl_dir / p).is_file()]
        if missing:
            raise SystemExit(f"error: (c) CleanRL's tuner: CLEANRL_DIR={cleanrl_dir} has no {' or '.join(missing)}")
    space = parse_space(options)
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    command = "python benchmark/tune_speed.py " + shlex.join(argv)
    rounds = []
    for i in range(1, options.rounds + 1):
        result = {}
        for name in options.variants:
            with tempfile.TemporaryDirectory(prefix=f"tune-speed-{name}-") as scratch:
                if options.keep:
                    scratch = Path(options.keep) / f"round{i}"
                argv_, folder = commands(options, space, scratch, cleanrl_dir or Path("."))[name]
                wall = run_variant(name, argv_, folder, env, options.timeout)
                params, complete = drawn(name, folder)
                result[name] = {"wall": wall, "params": params, "complete": complete}
                print(f"round {i}/{options.rounds}: ({name}) {VARIANTS[name]}: {wall:.1f} s, "
                      f"{options.trials / (wall / 3600):.1f} trials/h", flush=True)  # fmt: skip
        rounds.append(result)
    text = report(options, space, rounds, command, same_draws(options, rounds))
    print(text)
    Path(options.output).parent.mkdir(parents=True, exist_ok=True)
    Path(options.output).write_text(text)
    print(f"wrote {options.output}")


if __name__ == "__main__":
    main()
