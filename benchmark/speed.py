"""Speed, side by side: named configurations, each a command line, run alternately in rounds (every process fresh, in
a fresh scratch folder), their wall times and SPS, the medians, each one's ratio to a named base, the share of a
ceiling, iteration splits, and a Markdown report that opens with the command that reproduces it. The machine's speed
drifts, so a figure is quoted as a ratio measured in one such run.

    python benchmark/speed.py 'ours=ppo_continuous_action.py' 'cleanrl=$CLEANRL_DIR/ppo_continuous_action.py' \\
        --flags '--env-id Hopper-v5 --total-timesteps 102400 --seed 1' --base cleanrl --output report.md

A configuration is NAME=COMMAND; --flags are added to each of its commands, `;` between commands runs them one after
another as one configuration (wall times and steps summed), and {A..B} stands for the numbers A to B. A command is a
script and its flags: this repository's (its path from the root, benchmark/tune.py too: given `--out out` unless it
has an --out), CleanRL's `$CLEANRL_DIR/ppo.py` (CLEANRL_DIR: the folder of CleanRL's scripts; the script's folder goes
on PYTHONPATH), `REV:SCRIPT` (the script of a git revision, in a worktree made for the run, or of a checkout folder),
or a measurement of one of this repository's scripts made in a process of this file:
  env-only [--steps N] SCRIPT FLAGS  the script's vector env with all its wrappers under random actions (the ceiling)
  raw-env [--per-agent] [--steps N] SCRIPT FLAGS  its env without wrappers: envpool's one pool of all envs (its
      --vector-env envpool; --per-agent: a pool per agent of the batched script, stepped together), else gymnasium's
      envs stepped in a loop. N: env steps over all envs (default 20480; at least 200 steps of each)
  split SCRIPT FLAGS  training taken apart: its median iteration after the first as env steps, the rollout's policy
      calls, one update (between device syncs; the first, which builds the compiled graph, left out) and the rest
  update [--step graph|grad|loss-backward|plain] SCRIPT FLAGS  update_policy alone on a random batch of the run's
      size: the first call (compiling), the median of 3 after it (wall and CPU seconds), its FLOPs (counted on the
      plain backward), a 2048^3 float32 matmul's GFLOP/s; --step: the minibatch step (default: the one the run takes)
  cleanrl-tuner TUNE_FLAGS  CleanRL's tuner ($CLEANRL_DIR/cleanrl_utils/tuner.py) on CleanRL's --script, searching
      what tune.py's flags say (--env-id --space --trials --seeds 0..N-1 --total-timesteps --flags --sampler
      --sampler-seed --study; the others are tune.py's own); each trial's seeds run one after another in its process

Wall time runs from a process's start to its exit, or to its first line starting with --until. SPS: steps over wall
time, steps being --total-timesteps x the --seeds (the batched script's agents; tune.py's per trial) x the --settings
x the --trials. Logged: the sum of the last charts/SPS of the runs a process wrote (a batched one's agents each log
theirs), or what a measurement measured. A configuration NAME's base is GROUP/BASE for NAME = GROUP/VARIANT (the first
--base of its group), else BASE; the ratio is its SPS over the base's (else the base's wall time over its), logged
likewise, per round, then the median. --ceiling NAME=CEILING: NAME's SPS as a share of CEILING's logged SPS.
"""

import argparse
import dataclasses
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

from project import load_package, load_script, refuse as bad  # beside this file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUILTINS = {"env-only": {"--steps"}, "raw-env": {"--steps", "--per-agent"}, "split": set(), "update": {"--step"},
            "cleanrl-tuner": set()}  # fmt: skip
STEPS = ("graph", "grad", "loss-backward", "plain")
TUNE_END = "all trials ended"  # tune.py's line once its last trial has ended (--no-test); cleanrl-tuner's last line
load_package("ppo_utils")  # the scripts' package, for them and for the tools that import load_script from here


def machine():
    """One line: the CPU model, its cores, the GPU torch sees (if any), and the versions that matter."""
    model = platform.processor() or platform.machine()
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        model = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name"))
    except (OSError, StopIteration):
        pass
    import torch

    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{model}, {os.cpu_count()} CPUs{gpu}, Python {platform.python_version()}, torch {torch.__version__}"


# ---- the configurations


def configurations(specs, flags, checkout):
    """{name: [process, ...]} of the NAME=COMMAND specs; a process: kind (script or a built-in), script (a Path), words
    (its flags), options (a built-in's). checkout(revision, name) gives a revision's folder."""
    cleanrl = os.environ.get("CLEANRL_DIR", "")
    configs = {}
    for spec in specs:
        name, sep, command = spec.partition("=")
        if not sep or not re.fullmatch(r"[\w.+-]+(/[\w.+-]+)?", name) or not command.strip():
            bad(f"{spec!r}: write NAME=COMMAND (NAME: letters, digits, ._+- and at most one /), e.g. 'ours=ppo.py'")
        if name in configs:
            bad(f"{name} is given twice; give each configuration its own name")
        words = [w for word in shlex.split(command) for w in expand(word)]
        configs[name] = []
        while words:
            cut = words.index(";") if ";" in words else len(words)
            configs[name].append(process(name, words[:cut] + shlex.split(flags), cleanrl, checkout))
            words = words[cut + 1 :]
    return configs


def expand(word):
    found = re.fullmatch(r"\{(\d+)\.\.(\d+)\}", word)
    return [str(i) for i in range(int(found[1]), int(found[2]) + 1)] if found else [word]


def process(name, words, cleanrl, checkout):
    kind, options = words[0] if words and words[0] in BUILTINS else "script", {}
    words = words[kind != "script" :]
    while kind != "script" and words and words[0].startswith("--") and kind != "cleanrl-tuner":
        flag = words.pop(0)
        if flag not in BUILTINS[kind]:
            bad(f"{name}: {kind} takes {', '.join(sorted(BUILTINS[kind])) or 'no option'}, not {flag}; put its options "
                "before the script")  # fmt: skip
        options[flag[2:]] = True if flag == "--per-agent" else words.pop(0) if words else bad(f"{name}: {flag} needs a value")
    if options.get("step", "plain") not in STEPS or not str(options.get("steps", 1)).isdigit():
        bad(f"{name}: --step takes {', '.join(STEPS)} and --steps a whole number")
    if kind == "cleanrl-tuner":
        return SimpleNamespace(kind=kind, script=None, words=words, options={}, label="cleanrl-tuner")
    if not words or words[0].startswith("-"):
        bad(f"{name}: no script; a command starts with a script (ppo.py, $CLEANRL_DIR/ppo.py, REV:ppo.py) or one of "
            f"{', '.join(BUILTINS)}")  # fmt: skip
    word = words.pop(0)
    if re.match(r"\$\{?CLEANRL_DIR\}?/", word):
        if not cleanrl:
            bad(f"{name}: {word}: CLEANRL_DIR is not set; set it to the folder of CleanRL's scripts")
        path = Path(cleanrl).resolve() / word.split("/", 1)[1]
    elif ":" in word:
        revision, _, script = word.partition(":")
        path = Path(checkout(revision, name)) / script
    else:
        path = ROOT / word if (ROOT / word).is_file() else Path(word).resolve()
    if not path.is_file():
        bad(f"{name}: {path} is not a file; pass a script of this repository, $CLEANRL_DIR/SCRIPT or REV:SCRIPT")
    if kind != "script" and path.parent != ROOT:
        bad(f"{name}: {kind} measures a script of this repository, not {word}")
    if path == HERE / "tune.py" and "--out" not in words:
        words += ["--out", "out"]  # its scratch folder's; the default, under benchmark/runs/, would join one study
    said = [kind] + [f"--{k}" if v is True else f"--{k} {v}" for k, v in options.items()] if kind != "script" else []
    return SimpleNamespace(kind=kind, script=path, words=words, options=options, label=" ".join(said + [word]))


def steps_of(proc):
    """Steps a process trains: --total-timesteps x its --seeds x --settings x --trials; None for a measurement."""
    words = proc.words
    if proc.kind in ("env-only", "raw-env", "update") or "--total-timesteps" not in words:
        return None
    last = {w: i for i, w in enumerate(words)}  # a flag given twice: the last counts, as for tyro and argparse
    after = words[last["--seeds"] + 1 :] if "--seeds" in last else None  # the seeds run to the next flag or the end
    seeds = next((j for j, w in enumerate(after) if w.startswith("--")), len(after)) if after is not None else 1
    trials = int(words[last["--trials"] + 1]) if "--trials" in last else 1
    return int(words[last["--total-timesteps"] + 1]) * seeds * max(words.count("--setting"), 1) * trials


def script_args(script, flags):
    """The script (a module) and its Args (the batched script's SeedsArgs) from its flags; a bad flag or env id ends here
    with the script's own one-line error (tyro's for an unknown flag, ppo_utils' check_args for the rest)."""
    import tyro

    from ppo_utils.flag_checks import ArgError, check_args

    if script.endswith("_seeds.py"):  # the batched script imports its parent by name
        load_script(script.replace("_seeds", ""))
    module = load_script(script)
    args = tyro.cli(getattr(module, "SeedsArgs", module.Args), args=list(flags))
    try:
        check_args(args)
    except ArgError as e:
        raise SystemExit(f"error: {script}: {e}") from None
    return module, args


# ---- running


def run_process(proc, folder, env, timeout, until):
    """Runs one process in `folder`: (wall seconds, logged SPS or None, what a measurement printed, a search's draws)."""
    if proc.kind == "script":
        argv = [sys.executable, str(proc.script), *proc.words]
        extra = [str(proc.script.parent)] if proc.script.parent != ROOT else []  # CleanRL's cleanrl_utils, beside it
    else:
        payload = cleanrl_search(proc.words) if proc.kind == "cleanrl-tuner" else [proc.script.name, proc.words, proc.options]
        argv = [sys.executable, str(HERE / "speed.py"), "--child", proc.kind, json.dumps(payload)]
        extra = [str(ROOT), str(HERE)]  # for --vector-env async's env processes, which import the script by its name
    if extra:
        env = {**env, "PYTHONPATH": os.pathsep.join(extra + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))}
    killed, ended, measured = [], None, {}
    with open(folder / "output.log", "w") as log:
        start = time.perf_counter()
        child = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True)  # fmt: skip
        timer = threading.Timer(timeout, lambda: killed.append(os.killpg(child.pid, signal.SIGKILL)))
        timer.start()
        try:
            for line in child.stdout:
                log.write(line)
                if ended is None and until and line.startswith(until):
                    ended = time.perf_counter()
                if line.startswith("SPEED "):
                    measured = json.loads(line[6:])
            child.wait()
        finally:
            timer.cancel()
            if child.poll() is None:  # stopped here (Ctrl-C, a deadline): its process group goes too
                os.killpg(child.pid, signal.SIGKILL)
        ended = ended if ended is not None else time.perf_counter()
    if killed:
        bad(f"{proc.label} ran past --timeout {timeout:g} s; raise --timeout or lower --total-timesteps")
    if child.returncode != 0:
        tail = (folder / "output.log").read_text().strip().splitlines()[-1:] or ["(no output)"]
        bad(f"{proc.label} exited with {child.returncode}: {tail[0]}")
    if until and until not in (folder / "output.log").read_text():
        bad(f"{proc.label} printed no line starting with --until {until!r}; pass the line it ends its work with")
    logged = measured.pop("sps", None) if proc.kind != "script" else logged_sps(folder)
    return ended - start, logged, measured, drawn(folder)


def logged_sps(folder):
    """The sum of the last charts/SPS of each run under folder/runs/, or None."""
    logdirs = sorted({str(p.parent) for p in folder.glob("runs/*/events.out.tfevents*")})
    if not logdirs:
        return None
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found = []
    for logdir in logdirs:
        accumulator = EventAccumulator(logdir, size_guidance={"scalars": 0})
        accumulator.Reload()
        if "charts/SPS" in accumulator.Tags()["scalars"]:
            found.append(accumulator.Scalars("charts/SPS")[-1].value)
    return sum(found) if found else None


def drawn(folder):
    """A search's trials (tune.py's out/study.journal, cleanrl-tuner's cleanrl.db): (each trial's flags, rounded as the
    runs are given them, in trial order; how many completed), or None."""
    journal, sqlite = folder / "out" / "study.journal", folder / "cleanrl.db"
    if not journal.exists() and not sqlite.exists():
        return None
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if journal.exists():
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    else:
        storage = f"sqlite:///{sqlite}"
    study = optuna.load_study(study_name=None, storage=storage)
    ended = sorted((t for t in study.get_trials(deepcopy=False) if t.params), key=lambda t: t.user_attrs.get("slot", t.number))
    rounded = lambda v: float(f"{v:.6g}") if isinstance(v, float) else v  # noqa: E731
    params = [tuple(sorted((k, rounded(v)) for k, v in t.params.items())) for t in ended]
    return params, sum(t.state == optuna.trial.TrialState.COMPLETE for t in ended)


def run_rounds(options, configs, env):
    """{(name, round): {"wall", "steps", "logged", "draws", and what a measurement printed}}, the configurations run in
    order each round (with --swap-order, each group's in reverse every second round)."""
    found = {}
    for round_ in range(1, options.rounds + 1):
        groups = {}
        for name in configs:
            groups.setdefault(group_of(name), []).append(name)
        swap = options.swap_order and round_ % 2 == 0
        for name in [n for names in groups.values() for n in (reversed(names) if swap else names)]:
            walls, steps, logged, draws, measured = [], [], [], [], {}
            for i, proc in enumerate(configs[name]):
                with tempfile.TemporaryDirectory(prefix="speed-") as scratch:
                    folder = Path(options.keep) / f"round{round_}" / name / str(i) if options.keep else Path(scratch)
                    if options.keep and folder.exists():
                        bad(f"--keep {options.keep}: {folder} exists already; pass another folder")
                    folder.mkdir(parents=True, exist_ok=True)
                    wall, sps, measured, draw = run_process(proc, folder, env, options.timeout, options.until)
                walls.append(wall)
                steps.append(steps_of(proc))
                logged.append(sps)
                draws.append(draw)
            total = sum(steps) if None not in steps else None
            if len(logged) > 1:  # one after another: the steps over the sum of their logged times
                logged = [total / sum(s / r for s, r in zip(steps, logged))] if total and None not in logged else [None]
            found[name, round_] = {"wall": sum(walls), "steps": total, "logged": logged[0], "draws": draws[-1], **measured,
                                   "measure": any(p.kind in ("env-only", "raw-env", "update") for p in configs[name])}
            said = f", SPS {total / sum(walls):.0f}" if total else ""
            print(f"round {round_}/{options.rounds}: {name} {sum(walls):.1f} s{said}, logged {fmt(logged[0], '.0f')}",
                  flush=True)
    return found


# ---- the report


def group_of(name):
    return name.rsplit("/", 1)[0] if "/" in name else ""


def base_of(name, names, bases):
    group = group_of(name) + "/" if "/" in name else ""
    return next((group + b for b in bases if group + b in names), next((b for b in bases if b in names), None))


def fmt(value, spec, suffix=""):
    return "-" if value is None else format(value, spec) + suffix


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def speed_ratio(run, base):
    """Its SPS over the base's where both have steps, else the base's wall time over its (None for a measurement)."""
    if run["steps"] and base["steps"]:
        return run["steps"] / run["wall"] / (base["steps"] / base["wall"])
    return None if run["measure"] or base["measure"] else base["wall"] / run["wall"]


def report(options, configs, found, command):
    """The Markdown report; also returns {name: {"ratio", "logged_ratio"}} (medians of the rounds' ratios)."""
    names, rounds = list(configs), range(1, options.rounds + 1)
    lines = [f"# {options.title or 'Speed: ' + ', '.join(names)}", "", f"`{command}`", "",
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {machine()}; {options.rounds} round"
             f"{'s' * (options.rounds > 1)}{' (each group in reverse every second round)' * options.swap_order}, each "
             "process in a fresh folder, wall time from its start to "
             + (f"its line starting `{options.until}`" if options.until else "its exit (imports and compiling included)")
             + "; SPS: its steps over its wall time; logged: the runs' own charts/SPS summed, or what a measurement "
             "measured. Configurations:", ""]  # fmt: skip
    lines += [f"- `{name}`: `{' ; '.join(p.label + ' ' + shlex.join(p.words) for p in configs[name])}`" for name in names]
    bases = {name: base_of(name, names, options.base) for name in names}
    lines += ["", "| configuration | round | wall s | SPS | logged SPS | / base: SPS (else wall) / logged |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    summary = {}
    for name in names:
        runs, base = [found[name, r] for r in rounds], bases[name]
        pairs = [(speed_ratio(found[name, r], found[base, r]), ratio(found[name, r]["logged"], found[base, r]["logged"]))
                 for r in rounds] if base and base != name else [(None, None)] * len(runs)  # fmt: skip
        for r, run, (x, y) in zip(rounds, runs, pairs):
            sps = ratio(run["steps"], run["wall"])
            lines.append(f"| {name} | {r} | {run['wall']:.1f} | {fmt(sps, '.0f')} | {fmt(run['logged'], '.0f')} | "
                         f"{fmt(x, '.2f', 'x')} / {fmt(y, '.2f', 'x')} |")  # fmt: skip
        summary[name] = {"ratio": median([x for x, _ in pairs]), "logged_ratio": median([y for _, y in pairs])}
        versus = f"**{fmt(summary[name]['ratio'], '.2f', 'x')}** / {fmt(summary[name]['logged_ratio'], '.2f', 'x')} ({base})"
        lines.append(f"| {name} | median | {median(r['wall'] for r in runs):.1f} | "
                     f"{fmt(median(ratio(r['steps'], r['wall']) for r in runs), '.0f')} | "
                     f"{fmt(median(r['logged'] for r in runs), '.0f')} | {versus if base and base != name else 'base'} |")
    if options.ceiling:
        lines += ["", "The share of a ceiling (medians of the rounds' shares):", "",
                  "| configuration | ceiling | ceiling's SPS | SPS / ceiling | logged / ceiling |",
                  "| --- | --- | ---: | ---: | ---: |"]
        for name, ceiling in options.ceiling:
            shares = [(ratio(ratio(found[name, r]["steps"], found[name, r]["wall"]), found[ceiling, r]["logged"]),
                       ratio(found[name, r]["logged"], found[ceiling, r]["logged"])) for r in rounds]  # fmt: skip
            lines.append(f"| {name} | {ceiling} | {fmt(median(found[ceiling, r]['logged'] for r in rounds), '.0f')} | "
                         f"{fmt(median(s for s, _ in shares), '.0%')} | {fmt(median(s for _, s in shares), '.0%')} |")
    parts = {n: {k: median(found[n, r][k] for r in rounds) for k in found[n, 1] if k not in ("draws", "measure")}
             for n in names}
    splits = [n for n in names if "iteration" in found[n, 1]]
    if splits:
        lines += ["", "Training taken apart (`split`, medians of the rounds): its median iteration after the first. SPS "
                  "with the env free: the iteration's steps over its time without the env steps, the most any env could "
                  "give; then over the base's steady SPS.", ""] + split_table(parts, splits, bases)  # fmt: skip
    updates = [n for n in names if "gflop" in found[n, 1]]
    if updates:
        lines += ["", "| configuration | first call s (compiling) | update s | CPU s | GFLOP | GFLOP/s | matmul GFLOP/s | "
                  "base / it |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for n in updates:
            p, b = parts[n], parts.get(bases[n]) or {}
            faster = fmt(ratio(b.get("update"), p["update"]), ".2f", "x")
            lines.append(f"| {n} | {p['first']:.2f} | {p['update']:.3f} | {p['cpu']:.3f} | {p['gflop']:.1f} | "
                         f"{p['gflop'] / p['update']:.1f} | {p['matmul']:.0f} | {faster} |")
    searches = [n for n in names if found[n, 1]["draws"]]
    if searches:
        said = []
        for r in rounds:
            draws = {n: found[n, r]["draws"] for n in searches}
            same = all(d[0] == draws[searches[0]][0] for d in draws.values())
            said.append(f"round {r}: {'the same flags' if same else 'different flags'}; completed "
                        + ", ".join(f"{n} {d[1]}" for n, d in draws.items()))  # fmt: skip
        lines += ["", "Each search's trials' flags, read from its storage afterwards (to the 6 digits the runs are given): "
                  + "; ".join(said) + "."]  # fmt: skip
    return "\n".join(lines) + "\n", summary


def split_table(parts, names, bases):
    """Per configuration: the iteration in ms as env + policy calls + update + rest, the env's and the update's shares,
    the steady SPS (its steps over the iteration), the SPS with the env free, and that over the base's steady SPS."""
    lines = ["| configuration | iteration ms: env + policy + update + rest | env's share | update's share | steady SPS | "
             "SPS with the env free | that / base's steady SPS |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for n in names:
        p, b = parts[n], parts.get(bases[n]) or {}
        iteration, env, policy, update = (1e3 * p[k] for k in ("iteration", "env", "policy", "update"))
        free = p["batch"] / (p["iteration"] - p["env"])
        base = ratio(free, ratio(b.get("batch"), b.get("iteration")))
        lines.append(f"| {n} | {iteration:.0f}: {env:.0f} + {policy:.0f} + {update:.0f} + "
                     f"{iteration - env - policy - update:.0f} | {env / iteration:.0%} | {update / iteration:.0%} | "
                     f"{p['batch'] / p['iteration']:.0f} | {free:.0f} | {fmt(base, '.2f', 'x')} |")  # fmt: skip
    return lines


# ---- the measurements, each in a process of its own (--child)


def child(kind, payload):
    if kind == "cleanrl-tuner":
        return cleanrl_child(json.loads(payload))
    script, words, options = json.loads(payload)
    module, args = script_args(script, words)
    steps = int(options.get("steps", 20480))
    if kind == "env-only":
        envs = module.make_envs(args)
        result = {"sps": env_only_sps(envs, getattr(args, "seed", 1), max(steps // envs.num_envs, 200))}
    elif kind == "raw-env":
        result = {"sps": raw_env_sps(args, options.get("per-agent", False), steps)}
    elif kind == "split":
        sps, env, policy, update, iteration = timed_training(module, args)
        result = {"sps": sum(sps) if isinstance(sps, list) else sps, "env": env, "policy": policy, "update": update,
                  "iteration": iteration, "batch": getattr(args, "num_agents", 1) * args.batch_size}  # fmt: skip
    else:
        result = dict(zip(("update", "cpu", "first", "gflop", "matmul"), update_compute(module, args, options.get("step"))))
    print("SPEED " + json.dumps(result), flush=True)


def env_only_sps(envs, seed, steps):
    """Steps/s of a script's vector env `envs` (all its wrappers, all its envs) under random actions; closes it."""
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    actions = [envs.action_space.sample() for _ in range(steps)]  # drawn up front: only the env is timed
    start = time.perf_counter()
    for action in actions:
        envs.step(action)
    elapsed = time.perf_counter() - start
    envs.close()
    return steps * envs.num_envs / elapsed


def raw_env_sps(args, per_agent, steps):
    """Steps/s of the run's envs without wrappers, seeded 1, 2, ...: envpool's (one pool of all, or with per_agent one
    pool per agent, every pool sent its actions before the first is read), else gymnasium's stepped in a loop."""
    import numpy as np

    n = args.num_envs * getattr(args, "num_agents", 1)
    per_pool = args.num_envs if per_agent else n
    count = max(steps // n, 200)
    if args.vector_env != "envpool":
        import gymnasium as gym

        envs = [gym.make(args.env_id) for _ in range(n)]
        for i, env in enumerate(envs):
            env.reset(seed=i + 1)
            env.action_space.seed(i + 1)
        actions = [[env.action_space.sample() for env in envs] for _ in range(count)]
        start = time.perf_counter()
        for row in actions:
            for env, action in zip(envs, row):
                if any(env.step(action)[2:4]):
                    env.reset()
        return count * n / (time.perf_counter() - start)
    import envpool

    pools = [envpool.make_gymnasium(args.env_id, num_envs=per_pool, env_seed=list(range(i + 1, i + per_pool + 1)))
             for i in range(0, n, per_pool)]  # fmt: skip
    actions = np.random.default_rng(0).uniform(-1, 1, size=(count, len(pools), per_pool) + pools[0].action_space.shape)
    for pool in pools:
        pool.reset()
    start = time.perf_counter()
    for row in actions:
        for pool, action in zip(pools, row):
            pool.send(action)
        for pool in pools:
            pool.recv()
    elapsed = time.perf_counter() - start
    for pool in pools:
        pool.close()
    return count * n / elapsed


def sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_device(args):
    import torch

    return torch.device("cuda" if getattr(args, "cuda", False) and torch.cuda.is_available() else "cpu")


def timed_training(module, args):
    """module.train(args) with its env steps, the rollout's policy calls and update_policy calls timed. Returns (the
    run's SPS, env seconds per iteration, policy seconds per iteration, the median update's seconds, the median
    iteration's seconds after the first)."""
    import torch

    device, env_seconds, policy_seconds, updates, ends = run_device(args), [0.0], [0.0], [], []
    make_envs, update_policy, Agent = module.make_envs, module.update_policy, module.Agent

    def timed_make_envs(*a, **k):
        envs = make_envs(*a, **k)
        step = envs.step

        def timed_step(action):
            start = time.perf_counter()
            result = step(action)
            env_seconds[0] += time.perf_counter() - start
            return result

        envs.step = timed_step
        return envs

    class TimedAgent(Agent):
        def get_action_and_value(self, *a, **k):
            if torch.compiler.is_compiling() or not torch.is_inference_mode_enabled():  # the update's calls
                return super().get_action_and_value(*a, **k)
            start = time.perf_counter()
            result = super().get_action_and_value(*a, **k)
            policy_seconds[0] += time.perf_counter() - start
            return result

    def timed_update(*a, **k):
        sync(device)
        start = time.perf_counter()
        result = update_policy(*a, **k)
        sync(device)
        ends.append(time.perf_counter())
        updates.append(ends[-1] - start)
        return result

    module.make_envs, module.update_policy, module.Agent = timed_make_envs, timed_update, TimedAgent
    try:
        sps = module.train(args)["sps"]
    finally:
        module.make_envs, module.update_policy, module.Agent = make_envs, update_policy, Agent
    iterations = [b - a for a, b in zip(ends, ends[1:])]  # end of update i to end of update i + 1
    update = statistics.median(updates[1:] or updates)
    iteration = statistics.median(iterations) if iterations else float("nan")
    return sps, env_seconds[0] / len(updates), policy_seconds[0] / len(updates), update, iteration


def random_batch(envs, agent, args):
    """A flat batch of the run's size with the keys update_policy reads: random observations and actions of the env's
    spaces, random advantages and returns; old log-probs and values of 0 (the update's work does not depend on them)."""
    import gymnasium as gym
    import numpy as np
    import torch

    n, g = args.batch_size, torch.Generator().manual_seed(0)
    space, action_space = envs.single_observation_space, envs.single_action_space
    if space.dtype == np.uint8:
        obs = torch.randint(0, 256, (n,) + space.shape, dtype=torch.uint8, generator=g)
    else:
        obs = torch.randn((n,) + space.shape, generator=g)
    if isinstance(action_space, gym.spaces.Discrete):
        actions = torch.randint(0, int(action_space.n), (n,), generator=g)
    else:
        actions = torch.randn((n,) + action_space.shape, generator=g)
    batch = {"obs": obs, "actions": actions, "logprobs": torch.zeros(n), "values": torch.zeros(n)}
    batch |= {"advantages": torch.randn(n, generator=g), "returns": torch.randn(n, generator=g)}
    if hasattr(agent, "initial_state"):  # ppo_rnn.py: sequences from a zero state, no episode ends
        batch |= {"dones": torch.zeros(n), "state": agent.initial_state(args.num_envs)}
    return batch


def update_compute(module, args, step_kind=None):
    """(seconds of one update: the median of 3 after a first call, their CPU seconds (this thread's), the first call's
    wall seconds, its GFLOP, GFLOP/s of a 2048 x 2048 float32 matmul), on the run's threads and device."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    device = run_device(args)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = getattr(args, "tf32", False)  # as train()
    envs = module.make_envs(args)
    torch.manual_seed(args.seed)
    agent = module.Agent(envs, args).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=True)
    batch = {key: value.to(device) for key, value in random_batch(envs, agent, args).items()}
    envs.close()
    with FlopCounterMode(display=False) as counter:  # counted on the plain backward: compiled kernels bypass the counter
        module.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta)
    step = update_step(module, agent, optimizer, args, device, step_kind)
    calls = []
    for _ in range(4):  # the first builds a compiled step's graph (or reads inductor's cache)
        sync(device)
        start, cpu = time.perf_counter(), time.thread_time()
        module.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta, 1, step)
        sync(device)
        calls.append((time.perf_counter() - start, time.thread_time() - cpu))
    a = torch.randn(2048, 2048, device=device)
    a @ a
    sync(device)
    start = time.perf_counter()
    for _ in range(10):
        a @ a
    sync(device)
    matmul = 10 * 2 * 2048**3 / (time.perf_counter() - start) / 1e9
    seconds, cpu = (statistics.median(c[i] for c in calls[1:]) for i in range(2))
    return seconds, cpu, calls[0][0], counter.get_total_flops() / 1e9, matmul


def update_step(module, agent, optimizer, args, device, kind=None):
    """The minibatch step `kind` names: graph (ppo_utils.compiled.compiled_step: loss, gradients, G8 and Adam as one
    graph), grad (compiled_backward's gradients, G8 and Adam eager: torchrun's path), loss-backward (torch.compile'd
    ppo_loss, then loss.backward()) or plain; by default the one train() takes (compiled where --compile is on and the
    run long enough). For a script from before the compiled step (update_policy took the backward), its backward."""
    import torch

    from ppo_utils import compiled

    if not hasattr(module, "minibatch_step"):  # the scripts before issue 99, for the split before and after
        return compiled.compiled_backward(module.ppo_loss, agent, device) if args.compile else module.ppo_backward
    if kind is None:
        steps = args.num_iterations * args.update_epochs * args.num_minibatches
        pays_after = compiled.PAYS_AFTER_CNN if module.__name__.startswith("ppo_atari") else compiled.PAYS_AFTER
        kind = "graph" if getattr(args, "compile", False) and steps >= pays_after else "plain"  # ppo_rnn.py: no --compile
    if kind == "graph":
        return compiled.compiled_step(module.ppo_loss, module.minibatch_step, agent, optimizer, args.max_grad_norm, 1, device)
    if kind == "plain":
        return module.minibatch_step
    if kind == "grad":
        backward = compiled.compiled_backward(module.ppo_loss, agent, device)
    else:
        loss_fn = torch.compile(module.ppo_loss)

        def backward(agent_, mb, args_, clip_coef, kl_beta):  # floats as tensors, as compiled_backward passes them
            loss, stats = loss_fn(agent_, mb, args_, torch.tensor(clip_coef), torch.tensor(kl_beta))
            loss.backward()
            return stats

    return lambda *a: module.minibatch_step(*a, backward=backward)


# ---- CleanRL's tuner


def run_words(flags):
    """tune.py's --flags as (flag, value) pairs (CleanRL's tuner passes --FLAG=VALUE: no bare switches)."""
    pairs, words = [], shlex.split(flags)
    while words:
        word = words.pop(0)
        if not word.startswith("--"):
            bad(f"cleanrl-tuner --flags {flags!r}: {word!r} is no --FLAG; write --FLAG VALUE pairs")
        name, sep, value = word[2:].partition("=")
        if not sep:
            if not words or words[0].startswith("--"):
                bad(f"cleanrl-tuner --flags: --{name} has no value; CleanRL's tuner writes --FLAG=VALUE, which a "
                    "bare switch does not take")  # fmt: skip
            value = words.pop(0)
        pairs.append((name.replace("_", "-"), value))
    return pairs


def cleanrl_search(words):
    """The search tune.py's flags `words` describe, as cleanrl-tuner's process takes it (JSON): the space (parsed and
    checked as tune.py parses it, against our script's flags), the fixed per-run flags, the trials, seeds, sampler."""
    import tune  # beside this file

    parser = tune.make_parser()
    parser.prog = "cleanrl-tuner"
    o = parser.parse_known_args(words)[0]  # tune.py's options; --workers, --agents, --no-test, --out are its own
    tune.check_options(o)
    if o.pruner != "none":
        bad(f"cleanrl-tuner --pruner {o.pruner}: CleanRL's tuner is run without a pruner; pass --pruner none")
    if not os.environ.get("CLEANRL_DIR"):
        bad("cleanrl-tuner: CLEANRL_DIR is not set; set it to the folder of CleanRL's scripts and cleanrl_utils/tuner.py")
    cleanrl = Path(os.environ["CLEANRL_DIR"]).resolve()
    for need in (o.script, "cleanrl_utils/tuner.py"):
        if not (cleanrl / need).is_file():
            bad(f"cleanrl-tuner: CLEANRL_DIR={cleanrl} has no {need}")
    if o.seeds != list(range(len(o.seeds))):
        bad(f"cleanrl-tuner --seeds {' '.join(map(str, o.seeds))}: CleanRL's tuner trains seeds 0 .. N-1; pass --seeds 0 1")
    space = tune.parse_space(o.space, o.script, tune.load_script(o.script).Args)
    for d in space:
        if d.kind == "bool":
            bad(f"cleanrl-tuner --space {d.spec()}: CleanRL's tuner writes --FLAG=VALUE, which a switch does not take")
    dims = [{**dataclasses.asdict(d), "option": d.option[2:]} for d in space]
    return {"cleanrl_dir": str(cleanrl), "script": str(cleanrl / o.script), "env_id": o.env_id, "space": dims,
            "fixed": {"total-timesteps": str(o.total_timesteps), **dict(run_words(o.flags))}, "sampler": o.sampler,
            "sampler_seed": o.sampler_seed, "trials": o.trials, "seeds": len(o.seeds), "study": o.study or f"tune-{o.env_id}",
            "storage": "sqlite:///cleanrl.db"}  # fmt: skip


def cleanrl_params(spec, trial):
    """The tuner's params_fn: each flag of the space drawn under tune.py's name for it (learning_rate), as
    {option: value} (CleanRL's tuner writes --option=value), with the fixed per-run flags."""
    params = {}
    for d in spec["space"]:
        if d["choices"]:
            value = trial.suggest_categorical(d["flag"], d["choices"])
        elif d["kind"] == "int":
            value = trial.suggest_int(d["flag"], int(d["low"]), int(d["high"]), log=d["log"])
        else:
            value = trial.suggest_float(d["flag"], d["low"], d["high"], log=d["log"])
        params[d["option"]] = f"{value:.6g}" if isinstance(value, float) else value  # as tune.py gives its runs
    return {**params, **spec["fixed"]}


def cleanrl_child(spec):
    """CleanRL's Tuner on its script with the space as params_fn, the sampler seeded, no pruner (tune.py's --pruner
    none), the study in a sqlite file; prints TUNE_END once tune() returns. benchmark/ is taken off the path, and
    nothing of this project but its (empty) package's __init__ is loaded."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() not in (HERE, ROOT)]
    sys.path.insert(0, spec["cleanrl_dir"])
    import optuna
    from cleanrl_utils.tuner import Tuner

    sampler = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}[spec["sampler"]]
    tuner = Tuner(script=spec["script"], metric="charts/episodic_return", target_scores={spec["env_id"]: None},
                  params_fn=lambda trial: cleanrl_params(spec, trial), sampler=sampler(seed=spec["sampler_seed"]),
                  pruner=optuna.pruners.NopPruner(), storage=spec["storage"], study_name=spec["study"])  # fmt: skip
    tuner.tune(num_trials=spec["trials"], num_seeds=spec["seeds"])
    print(f"{TUNE_END} (CleanRL's tuner)", flush=True)


# ---- the command line


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        return child(*argv[1:3])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])  # fmt: skip
    p.add_argument("configs", nargs="+", metavar="NAME=COMMAND")
    p.add_argument("--flags", default="", help="flags added to every command, e.g. '--env-id Hopper-v5 --seed 1'")
    p.add_argument("--base", action="append", default=[], help="the configuration (or a group's VARIANT) the others are "
                   "compared with (default: the first); repeatable, the first a group has counts")  # fmt: skip
    p.add_argument("--ceiling", action="append", default=[], metavar="NAME=CEILING", help="NAME's SPS over CEILING's")
    p.add_argument("--rounds", type=int, default=3, help="each configuration once per round, in the order given")
    p.add_argument("--swap-order", action="store_true", help="every second round, each group's configurations reversed")
    p.add_argument("--until", help="a process's wall time ends at its first line starting with this (e.g. 'all trials "
                   "ended', tune.py --no-test's), not at its exit")  # fmt: skip
    p.add_argument("--timeout", type=float, default=3600, help="seconds one process may take")
    p.add_argument("--title", help="the report's heading")
    p.add_argument("--output", help="also write the Markdown report to this file")
    p.add_argument("--keep", metavar="DIR", help="keep each process's folder under DIR (default: deleted)")
    options = p.parse_args(argv)
    if options.rounds < 1 or options.timeout <= 0:
        p.error("--rounds takes 1 or more and --timeout a positive number of seconds")
    tmp, worktrees, folders = tempfile.mkdtemp(prefix="speed-checkouts-"), [], {}

    def checkout(revision, name):
        from same_scalars import BadInput, checkout as make  # beside this file

        try:
            if revision not in folders:
                folders[revision] = make(revision, name.replace("/", "-"), tmp, worktrees)
        except BadInput as e:
            bad(str(e))
        return folders[revision]

    try:
        configs = configurations(options.configs, options.flags, checkout)
        names = list(configs)
        options.base = options.base or names[:1]
        for base in options.base:
            if not any(n == base or n.endswith("/" + base) for n in names):
                p.error(f"--base {base}: no configuration NAME or GROUP/{base}; name one of {', '.join(names)}")
        for pair in options.ceiling:
            if not all(n in names for n in pair.partition("=")[::2]):
                p.error(f"--ceiling {pair}: write NAME=CEILING, both configurations ({', '.join(names)})")
        options.ceiling = [tuple(c.partition("=")[::2]) for c in options.ceiling]
        for proc in (proc for procs in configs.values() for proc in procs):  # a bad flag costs no waiting
            if proc.kind == "cleanrl-tuner":
                cleanrl_search(proc.words)
            elif proc.script.parent == ROOT and proc.script.name.startswith("ppo"):
                script_args(proc.script.name, proc.words)
        env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
        found = run_rounds(options, configs, env)
    finally:
        for folder in worktrees:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", folder], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    command = "python benchmark/speed.py " + shlex.join(argv)
    if os.environ.get("OMP_NUM_THREADS"):
        command = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} {command}"
    text, summary = report(options, configs, found, command)
    cleanrl = os.environ.get("CLEANRL_DIR")
    for path in {str(Path(cleanrl).resolve()), cleanrl.rstrip("/")} if cleanrl else ():
        text = text.replace(path + "/", "$CLEANRL_DIR/")  # a path the shell expanded, written as the variable again
    print(text)
    if options.output:
        Path(options.output).parent.mkdir(parents=True, exist_ok=True)
        Path(options.output).write_text(text)
    return summary


if __name__ == "__main__":
    main()
