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

Trials as agents: for ppo_continuous_action.py the trials of a process (--agents of them, seeds included) that share
every flag an agent cannot set for itself are trained by one process of ppo_continuous_action_seeds.py, one --setting
per trial (benchmark/run.py's --batch-seeds batches); the others, and every other script, train one process per
trial and seed, --workers at a time. Trials are asked from Optuna a process at a time (its sampler, seeded, TPE's with
the constant liar: a trial asked while others run counts them as bad, so that a batch spreads out).

The study lives in its storage (default: the journal file <out>/study.journal; any Optuna storage URL). The trial cap
is the storage's: the study is created with --trials waiting trials, which workers take one by one, so that any
number of tuner processes, on one machine or on many sharing the storage (and --out, for the run folders), run each
trial once. A worker killed mid-trial leaves it running in the storage; the next worker to look (the same command
again, or another worker) finds it dead (on this machine: its lock is gone; elsewhere: no heartbeat for --grace
seconds), marks it failed and queues it again with the same flags and folders, so that its runs continue from their
checkpoints. Watch a study live with optuna-dashboard, which opens the same storages (docs/benchmarks.md).

Each trial's runs are ordinary run folders, <out>/<env id>/trial-<k>/seed<s>/, that benchmark/report.py reads. Once
every trial has ended, the worker that ends the last one trains the best trial's flags and the defaults on
--test-seeds (disjoint from --seeds) through benchmark/run.py and writes the report, <results>/README.md: the trials
table, the best flags, the held-out comparison (benchmark/report.py --compare default best, in <results>/held-out/)
and Optuna's plots (the history, the parameters' importance) as PNGs; <results>/study.journal keeps the study, so that
`python benchmark/tune.py --report <results>` rebuilds it.
"""

import argparse
import contextlib
import fcntl
import io
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from journal import JournalError, check_journal  # beside this file
from project import load_package, load_script
from report_data import read_run
from run import (
    RUNNING,
    Batch,
    PlannedRun,
    checkpoint_of,
    die_with_runner,
    execute,
    execute_batch,
    folder_name,
    gather_batch_runs,
    interrupt,
    per_agent_part,
    slurm_header,
)

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["ppo.py", "ppo_continuous_action.py", "ppo_atari.py", "ppo_rnn.py", "ppo_rnn_continuous_action.py",
           "ppo_masked.py"]  # fmt: skip
# flags that are the study's, not a dimension of its space
NOT_SEARCHED = {"exp_name", "seed", "env_id", "total_timesteps", "resume", "eval_checkpoint", "eval_episodes", "track",
                "wandb_project_name", "wandb_entity", "capture_video", "save_model", "checkpoint_interval", "cuda"}  # fmt: skip
SPACE_KEY = "tune:space"  # the study's user attributes: what a joining worker must match
CAP_KEY = "tune:trials"
CREATOR_KEY = "tune:creator"  # the worker that created the study and queues its trials
STALL = 30.0  # seconds without a trial queued after which a creator on another machine counts as dead


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
    if not sep or not values:
        refuse(
            f"--space {spec}: write FLAG=LOW..HIGH, FLAG=LOW..HIGH:log or FLAG=A,B,C, e.g. --space learning-rate=1e-5..1e-3:log"
        )
    kinds = {f.name: f.type for f in fields(Args)}
    if flag not in kinds:
        refuse(f"--space {spec}: {script} has no flag --{flag.replace('_', '-')}; see python {script} --help")
    if flag in NOT_SEARCHED:
        refuse(f"--space {spec}: --{flag.replace('_', '-')} is the study's, not a searched flag; pass it as tune.py's own "
               "option or in --flags")  # fmt: skip
    found = flag_kind(kinds[flag])
    if found is None:
        refuse(f"--space {spec}: --{flag.replace('_', '-')} takes no number or choice a search can draw")
    kind, literal = found
    rules = FLAG_RULES | getattr(Args, "flag_rules", {})

    def checked(value):
        if kind in ("int", "float") and not math.isfinite(value):
            refuse(f"--space {spec}: --{flag.replace('_', '-')} {value}: pass finite numbers")
        if flag in rules and not rules[flag][0](value):
            refuse(f"--space {spec}: --{flag.replace('_', '-')} {value}: {rules[flag][1]}")
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
            refuse(f"--space {spec}: {word!r} is no value of --{flag.replace('_', '-')}; pass {wanted}")

    if ".." in values:
        if kind in ("bool", "choice"):
            refuse(f"--space {spec}: --{flag.replace('_', '-')} takes choices, not a range; list them, e.g. "
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


def refuse(message):
    raise SystemExit(f"error: {message}")


def check_trial_flags(Args, words):
    """Why the script would refuse these flags (its own checks, ppo_utils.flag_checks.check_args, before anything
    starts: a batch the minibatches do not split, a bad env id), or None; its parser's error, or its ArgError's."""
    import tyro

    from ppo_utils.flag_checks import ArgError, check_args

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            args = tyro.cli(Args, args=words)
            check_args(args, world_size=1)
    except SystemExit:
        lines = [line.strip(" │╭╰─") for line in said.getvalue().splitlines()]
        return next((line for line in lines if line and ("rror" in line or "nrecognized" in line)), "its parser refused them")
    except ArgError as e:
        return str(e)
    return None


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


def first_line(error):
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def study_spec(options, space):
    """What a study's workers must agree on, kept in its user attributes: what its trials train and how they are
    scored, pruned, held out and found dead."""
    return {"script": options.script, "env_id": options.env_id, "space": [d.spec() for d in space],
            "seeds": list(options.seeds), "total_timesteps": options.total_timesteps, "flags": options.flags,
            "last": options.last, "rungs": options.rungs, "pruner": options.pruner, "prune_after": options.prune_after,
            "test_seeds": list(options.test_seeds), "test_timesteps": options.test_timesteps,
            "baseline": list(options.baseline), "grace": options.grace}  # fmt: skip


def join_study(options, space, storage, sampler, pruner, out: Path, check=lambda: None):
    """Creates the study with its --trials waiting trials, or joins it; SystemExit where it exists with another space or
    setup. A study whose creator died while it queued the trials is queued to the end by the worker that joins it.
    `check` is called between two writes (signals_deferred's). Returns (study, whether this worker created it, this
    worker's lock: hold_worker_lock's, taken before the study is created, or joined once it matches)."""
    import optuna

    spec = study_spec(options, space)
    try:
        exists = options.study in optuna.get_all_study_names(storage)
    except Exception as e:  # a database without Optuna's tables
        refuse(f"--storage {options.storage or 'its journal'}: cannot read its studies ({first_line(e)}); pass another")
    try:
        if not exists:  # checked first, so that joining writes nothing where the study turns out to differ
            lock = hold_worker_lock(out)  # before the study: a worker that joins while this one queues sees it live
            study = optuna.create_study(storage=storage, study_name=options.study, direction="maximize", sampler=sampler,
                                        pruner=pruner)  # fmt: skip
            study.set_user_attr(CREATOR_KEY, WORKER)
            study.set_user_attr(SPACE_KEY, spec)
            study.set_user_attr("tune:command", shlex.join(["python", "benchmark/tune.py", *options.argv]))  # its creator's
            study.set_user_attr(CAP_KEY, options.trials)
            queue_slots(study, options.trials, check)
            return study, True, lock
    except optuna.exceptions.DuplicatedStudyError:  # another worker created it a moment ago
        lock.close()
    study = optuna.load_study(study_name=options.study, storage=storage, sampler=sampler, pruner=pruner)
    for _ in range(50):  # a tuner names itself or the space right after it creates the study; else it is none of ours
        if CREATOR_KEY in study.user_attrs or SPACE_KEY in study.user_attrs:
            break
        check()
        time.sleep(0.1)
    else:
        refuse(f"--study {options.study} exists in this storage with another origin (no tune.py study: it names no space); "
               "pass another --study")  # fmt: skip
    wait_for_creator(study, out, check)
    theirs = study.user_attrs.get(SPACE_KEY)
    if theirs is not None and any(theirs[key] != spec[key] for key in spec if key in theirs):  # a study of an older
        differ = next(key for key in spec if key in theirs and theirs[key] != spec[key])  # tuner holds fewer keys
        refuse(f"--study {options.study} exists in this storage with another {differ.replace('_', '-')} "
               f"({theirs[differ]!r}); give the same options to join it, or another --study")  # fmt: skip
    cap = study.user_attrs.get(CAP_KEY, options.trials)
    if cap != options.trials:
        refuse(f"--study {options.study} was created with --trials {cap}; pass that to join it")
    lock = hold_worker_lock(out)
    if theirs is None:  # its creator died before it wrote what the study is: the same command's
        study.set_user_attr(SPACE_KEY, spec)
        study.set_user_attr(CAP_KEY, cap)
    queued = queue_slots(study, cap, check)
    if queued:
        print(f"--study {options.study}: its creator stopped while it queued the trials; queued the {queued} missing")
    return study, False, lock


def queue_slots(study, cap, check):
    """Queues a waiting trial for each slot 0..cap-1 that no trial holds yet (the trial cap: a worker takes a waiting
    one, or none), calling `check` before each; returns how many."""
    held = {t.user_attrs.get("slot") for t in study.get_trials(deepcopy=False)}
    missing = [slot for slot in range(cap) if slot not in held]
    for slot in missing:
        check()
        study.enqueue_trial({}, user_attrs={"slot": slot})
    return len(missing)


@contextlib.contextmanager
def signals_deferred():
    """Ctrl-C and SIGTERM held back while the study is created or joined (one landing inside the journal's lock leaves
    the lock or an entry half written): yields a check that raises KeyboardInterrupt, between two writes, once one
    came; it is raised at the end too."""
    caught = []
    handlers = {signum: signal.signal(signum, lambda signum, frame: caught.append(signum))
                for signum in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip

    def check():
        if caught:
            raise KeyboardInterrupt

    try:
        yield check
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    check()


def wait_for_creator(study, out: Path, check):
    """Waits while the study's creator queues its trials: until it has queued them all, or is found dead (on this
    machine: its lock is free; elsewhere, or for a study of an older tuner that names no creator: no trial queued for
    STALL seconds)."""
    seen, since = -1, time.time()
    while True:
        check()
        attrs, trials = study.user_attrs, study.get_trials(deepcopy=False)
        if CAP_KEY in attrs and len({t.user_attrs.get("slot") for t in trials} - {None}) >= attrs[CAP_KEY]:
            return
        creator = attrs.get(CREATOR_KEY, "")
        if creator.partition(":")[0] == socket.gethostname() and not worker_alive(creator, out, None, STALL):
            return
        if len(trials) != seen:
            seen, since = len(trials), time.time()
        elif time.time() - since > STALL:
            return
        time.sleep(0.2)


WORKER = f"{socket.gethostname()}:{os.getpid()}"  # this worker's name in its trials' user attributes


def hold_worker_lock(out: Path):
    """An flock on <out>/workers/<host>:<pid>.lock, held while this worker lives: a worker on the same machine tells a
    dead one's trials by its free lock."""
    folder = out / "workers"
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / f"{WORKER}.lock", "w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def worker_alive(worker, out: Path, heartbeat, grace):
    host, _, _ = worker.partition(":")
    if host == socket.gethostname():
        path = out / "workers" / f"{worker}.lock"
        if not path.exists():
            return False
        with open(path) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False
    return heartbeat is not None and time.time() - heartbeat < grace


def requeue_dead(study, out: Path, grace):
    """Marks the running trials of dead workers failed and queues each again with its flags and slot (its folders: its
    runs continue from their checkpoints). Returns how many."""
    import optuna
    from optuna.trial import TrialState

    requeued = 0
    for trial in study.get_trials(deepcopy=False, states=[TrialState.RUNNING]):
        attrs = trial.user_attrs
        if "worker" not in attrs or worker_alive(attrs["worker"], out, attrs.get("heartbeat"), grace):
            continue
        try:  # another worker may be first: then the trial has ended already, and the storage refuses both
            study._storage.set_trial_user_attr(trial._trial_id, "failed", f"its worker {attrs['worker']} died")
            if not study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        kept = {key: value for key, value in attrs.items() if key in ("slot",)}
        study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, params=trial.params,
                                                  distributions=trial.distributions, user_attrs=kept,
                                                  system_attrs={"fixed_params": trial.params}))  # fmt: skip
        requeued += 1
    return requeued


# ------------------------------------------------------------------------------------------------------------- trials
@dataclass
class TrialRun:
    """A trial of the study in this worker: its Optuna trial, its flags (words), its runs (one per seed)."""

    trial: object
    slot: int
    words: list
    runs: list
    values: dict = field(default_factory=dict)  # rung -> {seed: the mean return its progress line gave there}
    reported: int = 0  # rungs reported to Optuna
    pruned: bool = False
    scores: dict = field(default_factory=dict)  # seed -> score
    ended: set = field(default_factory=set)  # seeds whose process ended (done or stopped)

    @property
    def variant(self):
        return f"trial-{self.slot}"


def saved_update(runs, out):
    """The update every run of `runs` was last saved at (their checkpoints'); None where none has begun, "some" where
    only some have a checkpoint (their process starts them all over)."""
    import torch

    checkpoints = [checkpoint_of(run.folder(out)) for run in runs]
    if not any(checkpoints) and not any((run.folder(out) / "runs").exists() for run in runs):
        return None
    if not all(checkpoints):
        return "some"
    updates = {torch.load(path, map_location="cpu", weights_only=True)["iteration"] for path in checkpoints}
    return updates.pop() if len(updates) == 1 else "some"


class Worker:
    """One tuner process: takes waiting trials, trains them (--workers processes at a time), reports and tells."""

    def __init__(self, options, space, study, Args):
        self.options, self.space, self.study, self.Args = options, space, study, Args
        self.out = Path(options.out)
        self.lock, self.stopping, self.beating = threading.Lock(), threading.Event(), threading.Event()
        self.error = None  # the first exception of a thread of this worker
        self.pending = []  # units (a TrialRun's runs, or a Batch of several trials') not yet started
        self.trials = {}  # slot -> TrialRun of this worker
        self.started, self.finished, self.durations = time.time(), 0, []
        self.batched = options.script == "ppo_continuous_action.py" and not options.no_batch
        self.rung_steps = [options.total_timesteps * (k + 1) // (options.rungs + 1) for k in range(options.rungs)]

    # taking trials
    def take(self):
        """The next unit to train, asking Optuna for trials where none is pending; None once no trial is waiting."""
        with self.lock:
            if not self.pending and not self.stopping.is_set():
                self.ask()
            return self.pending.pop(0) if self.pending else None

    def ask(self):
        """Takes waiting trials (one; batched: --agents // len(--seeds) of them), draws their flags and makes them units:
        batched, the trials that share every flag an agent cannot set go into one process, a trial whose runs were
        interrupted (they have checkpoints) alone; otherwise one process per trial and seed."""
        import optuna

        requeue_dead(self.study, self.out, self.options.grace)
        count = max(1, self.options.agents // len(self.options.seeds)) if self.batched else 1
        taken = []
        for _ in range(count):
            trial_id = self.study._pop_waiting_trial_id()  # the storage's atomic pop: each waiting trial once
            if trial_id is None:
                break
            trial = optuna.Trial(self.study, trial_id)
            self.study._storage.set_trial_user_attr(trial_id, "worker", WORKER)
            self.study._storage.set_trial_user_attr(trial_id, "heartbeat", time.time())
            params = {d.flag: d.suggest(trial) for d in self.space}
            words = [w for d in self.space for w in d.words(params[d.flag])]
            self.study._storage.set_trial_user_attr(trial_id, "flags", shlex.join(words))  # what its runs are given
            slot = self.study._storage.get_trial(trial_id).user_attrs["slot"]
            if self.held_elsewhere(trial, slot):
                continue
            why = check_trial_flags(self.Args, self.run_words() + words)
            if why:  # a combination the script refuses (e.g. minibatches that do not split the batch)
                self.study._storage.set_trial_user_attr(trial_id, "failed", why)
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                print(f"trial {slot}: {shlex.join(words)}: the script refuses it ({why}); failed", flush=True)
                continue
            runs = [PlannedRun(self.options.script, self.options.env_id, f"trial-{slot}", seed,
                               self.options.total_timesteps, self.common_words() + words)
                    for seed in self.options.seeds]  # fmt: skip
            one = self.trials[slot] = TrialRun(trial, slot, words, runs)
            gather_batch_runs(self.out, runs)  # a killed batched process's run folders, where their runs' are
            self.claim(slot, words)
            for run in runs:  # a run that finished before its worker was killed: its score, no new process
                if (run.folder(self.out) / "done.json").exists():
                    self.score(one, run)
            one.runs = [run for run in runs if run.seed not in one.ended]
            if not one.runs:
                self.tell(one)
                continue
            taken.append(one)
        if not self.batched:
            self.pending += [run for one in taken for run in one.runs]
            return
        groups = {}
        for one in taken:  # an interrupted trial continues with others saved at the same update (--resume's rule)
            key = (saved_update(one.runs, self.out), tuple(per_agent_part(one.words)[0]))
            groups.setdefault(key if key[0] != "some" else one.slot, []).extend(one.runs)
        self.pending += [Batch(runs) for runs in groups.values()]

    def claim(self, slot, words):
        """<out>/<env id>/trial-<slot>/flags.json records the flags the trial's runs train with. Where it records others
        (the journal lost the trial's draw, a write cut short, and the trial drew anew) the folder is moved aside, said
        in one line, so that no run of other flags is scored as this trial's."""
        folder, flags = self.out / self.options.env_id / f"trial-{slot}", shlex.join(words)
        record = folder / "flags.json"
        if record.exists() and json.loads(record.read_text())["flags"] != flags:
            aside = folder.with_name(f"{folder.name}.other-flags-{time.strftime('%Y%m%d-%H%M%S')}")
            folder.rename(aside)
            theirs = json.loads((aside / "flags.json").read_text())["flags"]
            print(f"trial {slot}: {folder} holds runs of other flags ({theirs}: a draw the journal lost); moved them to "
                  f"{aside.name}, and the trial trains {flags}", flush=True)  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"flags": flags}) + "\n")

    def held_elsewhere(self, trial, slot):
        """Whether an earlier trial holds `slot` (two workers that queued a dead creator's missing slots at once both
        queued it): this one is then failed, so that each slot trains once, in its own folders."""
        import optuna

        earlier = [t for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get("slot") == slot
                   and t.number < trial.number and t.state != optuna.trial.TrialState.FAIL]  # fmt: skip
        if earlier:
            self.study._storage.set_trial_user_attr(trial._trial_id, "failed", f"slot {slot} is trial {earlier[0].number}'s")
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return bool(earlier)

    def run_words(self):
        """The command-line words every run of the study has, as the script's checks read them."""
        return ["--env-id", self.options.env_id, "--total-timesteps", str(self.options.total_timesteps)] + self.common_words()

    def score(self, one, run):
        """A finished run's score: the mean return of its last --last episodes (benchmark/report.py's)."""
        logged = read_run(run.folder(self.out))
        returns = logged[0]["episodic_return"].to_numpy() if logged else []
        one.scores[run.seed] = float(returns[-self.options.last :].mean()) if len(returns) else None  # None: no episode
        one.ended.add(run.seed)

    def common_words(self):
        return shlex.split(self.options.flags)

    # training
    def train(self, unit):
        """Trains a unit to its end: a Batch again without its pruned trials' runs after each prune (their processes'
        checkpoints: the others continue), or one run."""
        while unit is not None and not self.stopping.is_set():
            watcher = threading.Thread(target=self.guarded(self.watch), args=(unit,), daemon=True)
            watcher.start()
            if isinstance(unit, Batch):
                _, seconds, status = execute_batch(unit, self.out, self.stopping)
            else:
                _, seconds, status = execute(unit, self.out, self.stopping)
            unit.ended = True
            watcher.join()
            if status == "live":  # a killed worker's process still saves its checkpoints there: once it has ended
                unit.ended = False
                time.sleep(2.0)
                continue
            unit = self.after(unit, status, seconds)

    def after(self, unit, status, seconds):
        """What follows a unit's process: its runs scored (done), recorded as pruned, or failed; returns the unit
        of the survivors still to train (a pruned Batch's), else None."""
        import optuna

        runs = unit.runs if isinstance(unit, Batch) else [unit]
        survivors = []
        with self.lock:
            for run in runs:
                one = self.trials[int(run.variant.split("-")[1])]
                if status == "done":
                    self.score(one, run)
                elif one.pruned:
                    folder = run.folder(self.out)
                    folder.mkdir(parents=True, exist_ok=True)
                    record = {"trial": one.slot, "pruned_at_step": self.rung_steps[one.reported - 1]}
                    (folder / "pruned.json").write_text(json.dumps(record) + "\n")
                    one.ended.add(run.seed)
                elif status == "stopped" and not self.stopping.is_set():  # another trial of its batch was pruned
                    survivors.append(run)
                    continue
                if status == "failed" and one.trial is not None and not self.stopping.is_set():
                    where = (unit.folder(self.out) if isinstance(unit, Batch) else run.folder(self.out)) / "output.log"
                    self.study._storage.set_trial_user_attr(one.trial._trial_id, "failed", f"see {where}")
                    self.study.tell(one.trial, state=optuna.trial.TrialState.FAIL)
                    print(f"trial {one.slot}: FAILED (see {where})", flush=True)
                    one.trial = None
                elif len(one.ended) == len(self.options.seeds) and one.trial is not None:
                    self.tell(one)
            self.durations.append(seconds)
        if not survivors or self.stopping.is_set():
            return None
        return Batch(survivors) if isinstance(unit, Batch) else survivors[0]

    def tell(self, one):
        import optuna

        empty = [seed for seed in self.options.seeds if one.scores.get(seed, 0.0) is None]
        if self.study._storage.get_trial(one.trial._trial_id).state.is_finished():  # failed and queued again elsewhere
            said = "ended elsewhere (another worker took this worker for dead and queued it again); this result dropped"
        elif one.pruned:
            self.study.tell(one.trial, state=optuna.trial.TrialState.PRUNED)
            said = f"pruned at step {self.rung_steps[one.reported - 1]}"
        elif empty:  # nothing to score: a mean of no return is no score
            said = (f"no episode of seed {empty[0]} ended within --total-timesteps {self.options.total_timesteps}; "
                    "failed (raise --total-timesteps, or search a task whose episodes end sooner)")  # fmt: skip
            self.study._storage.set_trial_user_attr(one.trial._trial_id, "failed", said)
            self.study.tell(one.trial, state=optuna.trial.TrialState.FAIL)
        else:
            value = float(np.mean([one.scores[seed] for seed in self.options.seeds]))
            for seed, score in one.scores.items():
                self.study._storage.set_trial_user_attr(one.trial._trial_id, f"score_seed{seed}", score)
            self.study.tell(one.trial, value)
            said = f"{value:.2f}"
        one.trial = None
        self.finished += 1
        print(f"trial {one.slot} ({shlex.join(one.words)}): {said}; {self.progress()}", flush=True)

    def progress(self):
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)
        count = lambda *states: sum(t.state in states for t in trials)  # noqa: E731
        done, pruned = count(TrialState.COMPLETE, TrialState.PRUNED), count(TrialState.PRUNED)
        running, waiting = count(TrialState.RUNNING), count(TrialState.WAITING)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        best = max(complete, key=lambda t: t.value, default=None)
        said = f"{done}/{self.options.trials} trials ended ({pruned} pruned), {running} running, {waiting} waiting"
        if best is not None:
            said += f"; best {best.value:.2f} (trial {best.user_attrs.get('slot', best.number)})"
        if self.finished:  # this worker's pace: its trials ended per second, its processes at a time
            pace = (time.time() - self.started) / self.finished
            said += f"; about {pace * (running + waiting) / 60:.0f} min left at this worker's pace"
        return said

    def watch(self, unit):
        """While the unit's process trains: reads its progress lines (each run's step and mean return), reports each
        trial at each rung its seeds have all passed, and stops the process where Optuna prunes one of its trials
        (SIGTERM: every run saves a checkpoint; the others then continue from theirs)."""
        folder = unit.folder(self.out)
        log, offset = folder / "output.log", None
        pattern = re.compile(r"^(?:(?:\S+-trial-(\d+) )?seed (\d+): )?step (\d+)/\d+ .*mean return \(last \d+\) (\S+)")
        runs = unit.runs if isinstance(unit, Batch) else [unit]
        single = not isinstance(unit, Batch) or len(unit.variants) == 1
        while not getattr(unit, "ended", False):
            time.sleep(1.0)
            if not log.exists():
                continue
            with open(log) as handle:
                if offset is None:
                    handle.seek(0, 2)  # the lines of this process, not of earlier ones in the same folder
                else:
                    handle.seek(offset)
                lines = handle.readlines()
                offset = handle.tell()
            for line in lines:
                found = pattern.match(line.strip())
                if not found or found.group(4) == "n/a":
                    continue
                slot = int(found.group(1)) if found.group(1) else int(runs[0].variant.split("-")[1])
                seed = int(found.group(2)) if found.group(2) else runs[0].seed
                if not single and found.group(1) is None:
                    continue
                self.record(unit, slot, seed, int(found.group(3)), float(found.group(4)))

    def record(self, unit, slot, seed, step, mean_return):
        one = self.trials.get(slot)
        if one is None or one.trial is None or one.pruned:
            return
        for rung, rung_step in enumerate(self.rung_steps):
            if step >= rung_step:
                one.values.setdefault(rung, {}).setdefault(seed, mean_return)
        while one.reported < len(self.rung_steps) and len(one.values.get(one.reported, {})) == len(self.options.seeds):
            value = float(np.mean(list(one.values[one.reported].values())))
            one.reported += 1
            one.trial.report(value, one.reported)  # steps 1, 2, ...: the rungs
            if self.options.pruner != "none" and one.trial.should_prune():
                one.pruned = True
                print(f"trial {one.slot}: pruned at step {self.rung_steps[one.reported - 1]} ({value:.2f})", flush=True)
                self.stop(unit if isinstance(unit, Batch) else None, one)
                break

    def stop(self, batch, one):
        """SIGTERM to the processes that train the pruned trial `one`: its Batch's, or its seeds' own."""
        folders = [str(batch.folder(self.out).resolve())] if batch else [str(r.folder(self.out).resolve()) for r in one.runs]
        for process in list(RUNNING):
            try:
                cwd = os.readlink(f"/proc/{process.pid}/cwd")
            except OSError:
                continue
            if cwd in folders:
                process.send_signal(signal.SIGTERM)

    def beat(self):
        """Beats the heartbeat of every trial this worker holds, training or queued behind another, every quarter of
        --grace (30 s at most), so that a worker on another machine never takes a live one for dead."""
        import optuna

        while not self.beating.wait(min(30.0, self.options.grace / 4)):
            with self.lock:
                held = [one.trial for one in self.trials.values() if one.trial is not None]
            for trial in held:
                try:
                    self.study._storage.set_trial_user_attr(trial._trial_id, "heartbeat", time.time())
                except optuna.exceptions.UpdateFinishedTrialError:  # told meanwhile (here, or by a worker elsewhere)
                    pass

    def guarded(self, function):
        """`function` for a thread of this worker: an exception in it (a journal error, a bug) stops the whole worker,
        its processes saving their checkpoints, and is said in one line by work(), not as a thread's traceback."""

        def run(*args):
            try:
                function(*args)
            except Exception as e:
                with self.lock:
                    self.error = self.error or e
                self.stopping.set()
                for process in list(RUNNING):
                    process.send_signal(signal.SIGTERM)

        return run

    def work(self):
        """Trains units until no trial is waiting; returns whether every trial of the study has ended."""
        from optuna.trial import TrialState

        def loop():
            while not self.stopping.is_set():
                unit = self.take()
                if unit is None:
                    return
                if isinstance(unit, PlannedRun) and self.trials[int(unit.variant.split("-")[1])].pruned:
                    with self.lock:  # a seed of a pruned trial that had not started
                        self.after(unit, "stopped", 0.0)
                    continue
                self.train(unit)

        threads = [threading.Thread(target=self.guarded(loop), daemon=True) for _ in range(self.options.workers)]
        heart = threading.Thread(target=self.guarded(self.beat), daemon=True)
        for thread in [*threads, heart]:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.5)
        except KeyboardInterrupt:
            self.stopping.set()
            for process in list(RUNNING):
                process.send_signal(signal.SIGTERM)
            for thread in threads:
                thread.join()
            print("interrupted; run the same command again to continue the study (its running trials are queued again "
                  "and continue from their checkpoints)", flush=True)  # fmt: skip
            raise SystemExit(130)
        finally:
            self.beating.set()
        if self.error is not None:
            raise SystemExit(f"error: this worker stopped: {type(self.error).__name__}: {first_line(self.error)}; its "
                             "trials are queued again, and continue from their checkpoints, when a tuner next joins the "
                             "study (the same command)")  # fmt: skip
        trials = self.study.get_trials(deepcopy=False)
        return not any(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials)


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
    print(f"the best trial ({best.user_attrs.get('slot', best.number)}: {shlex.join(words)}, {best.value:.2f}) and the "
          f"defaults on the held-out seeds {' '.join(map(str, options.test_seeds))}: {shlex.join(command)}", flush=True)  # fmt: skip
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

    matplotlib.use("Agg")
    warnings.filterwarnings("ignore", category=optuna_warning())
    import matplotlib.pyplot as plt
    import optuna
    from optuna.trial import TrialState

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
        params = " | ".join(f"{t.params[d.split('=')[0].replace('-', '_')]:.4g}"
                            if isinstance(t.params.get(d.split('=')[0].replace('-', '_')), float)
                            else str(t.params.get(d.split("=")[0].replace("-", "_"), ""))
                            for d in spec["space"])  # fmt: skip
        seconds = f"{t.duration.total_seconds():.0f}" if t.duration else ""
        rows.append(f"| {t.user_attrs.get('slot', t.number)} | {t.state.name.lower()} | {value} | {params} | {seconds} |")
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = max(complete, key=lambda t: t.value)
    pruned = sum(t.state == TrialState.PRUNED for t in trials)
    failed = sum(t.state == TrialState.FAIL for t in trials)
    optuna.visualization.matplotlib.plot_optimization_history(study)
    plt.gcf().set_size_inches(7, 4)
    plt.tight_layout()
    plt.savefig(results / "history.png", dpi=100)
    plt.close("all")
    importance = ""
    if len(spec["space"]) > 1 and len(complete) >= 4:
        evaluator = optuna.importance.PedAnovaImportanceEvaluator()  # no scikit-learn: fANOVA's would need it
        optuna.visualization.matplotlib.plot_param_importances(study, evaluator=evaluator)
        plt.gcf().set_size_inches(7, 4)
        plt.tight_layout()
        plt.savefig(results / "importance.png", dpi=100)
        plt.close("all")
        importance = "\n![the parameters' importance](importance.png)\n"
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


def optuna_warning():
    import optuna

    return optuna.exceptions.ExperimentalWarning


def keep_study(study, results: Path):
    """Copies the study into <results>/study.journal (committed; what --report rebuilds from)."""
    import optuna

    results.mkdir(parents=True, exist_ok=True)
    path = results / "study.journal"
    if path.exists():
        path.unlink()
    to = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    optuna.copy_study(from_study_name=study.study_name, from_storage=study._storage, to_storage=to)
    return optuna.load_study(study_name=study.study_name, storage=to)


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


def slurm_script(options, argv):
    """A Slurm array job of --slurm-workers tuner processes joining the study (its storage must reach them all)."""
    arguments, words = [], list(argv)
    while words:  # all but --slurm and --slurm-workers, which are the job's
        word = words.pop(0)
        if word in ("--slurm", "--slurm-workers"):
            words.pop(0)
        elif not word.startswith(("--slurm=", "--slurm-workers=")):
            arguments.append(word)
    worker = shlex.join([sys.executable, str(Path(__file__).resolve()), *arguments])
    return slurm_header(f"tune-{options.study}", options.slurm_workers, options.workers, options.out) + f"{worker}\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
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
    parser.add_argument("--pruner", choices=["none", "median", "halving"], default="none",
                        help="stop trials that fall behind: below the median of others at the same rung, or successive "
                        "halving")  # fmt: skip
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
    options = parser.parse_args(argv)
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
        Path(options.slurm).write_text(slurm_script(options, argv))
        print(f"wrote {options.slurm}: sbatch it (its {options.slurm_workers} tuners share --storage and --out)")
        return

    out = Path(options.out)
    os.environ.setdefault("PPO_PROGRESS_SECONDS", "2")  # the runs' progress lines, which the rungs are read from
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)  # a cluster's preemption or a kill stops it as Ctrl-C does
    storage = open_storage(options.storage, out)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler_seed = options.sampler_seed
    if options.sampler == "tpe":
        sampler = optuna.samplers.TPESampler(seed=sampler_seed, constant_liar=True)
    else:
        sampler = optuna.samplers.RandomSampler(seed=sampler_seed)
    pruner = make_pruner(options)
    try:
        with signals_deferred() as check:
            study, created, lock = join_study(options, space, storage, sampler, pruner, out, check)
    except KeyboardInterrupt:
        raise SystemExit("interrupted while the study's trials were queued; run the same command again to queue the rest "
                         "and start") from None  # fmt: skip
    if not created:  # a worker that joins: draws of its own, not its creator's again
        study.sampler = type(sampler)(
            seed=sampler_seed + os.getpid(), **({"constant_liar": True} if options.sampler == "tpe" else {})
        )
    print(f"study {options.study} in {options.storage or out / 'study.journal'} ({'created' if created else 'joined'}); "
          f"runs in {out}; watch it with: optuna-dashboard {options.storage or out / 'study.journal'}", flush=True)  # fmt: skip
    worker = Worker(options, space, study, Args)
    print(worker.progress(), flush=True)
    try:
        ended = worker.work()
    finally:
        lock.close()
    if not ended:
        print(f"this worker found no waiting trial; the others' running trials end elsewhere: {worker.progress()}")
        return
    complete = study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE])
    if not complete:
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
    write_report(Path(options.results), keep_study(study, Path(options.results)))


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
    folder_name(options.env_id)


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
        mended = check_journal(path)  # mends a torn last line, as a tuner does
        if mended:
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
