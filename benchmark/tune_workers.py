"""benchmark/tune.py's scheduler: the study its workers share, and a worker's processes (tune.py is the search: the space,
sampler and pruner, held-out runs and report). The trial cap is the storage's: the study is created with --trials waiting
trials, one per slot, which workers take one by one, so that any number of tuner processes run each trial once. A Worker
takes a process's worth (for ppo_continuous_action.py, --agents runs, seeds included, of the trials that share every flag
an agent cannot set: one ppo_continuous_action_seeds.py process, as run.py's --batch-seeds; else a process per trial and
seed), --workers processes at a time, reports each trial at its rungs, stops a pruned one's process, scores and tells. A
worker killed mid-trial leaves it running in the storage; the next to look finds it dead (here: its lock is free;
elsewhere: no heartbeat for --grace seconds), fails it and queues it again with the same flags and slot, so that its runs
continue from their checkpoints. Optuna's storage is reached past its public API only through tune_optuna.py."""

import contextlib
import fcntl
import io
import json
import os
import re
import shlex
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from project import refuse  # beside this file
from report_data import read_run
from run import RUNNING, Batch, PlannedRun, checkpoint_of, execute, gather_batch_runs, per_agent_part
from tune_optuna import fail_running, take_waiting

SPACE_KEY = "tune:space"  # the study's user attributes: what a joining worker must match
CAP_KEY = "tune:trials"
CREATOR_KEY = "tune:creator"  # the worker that created the study and queues its trials
STALL = 30.0  # seconds without a trial queued after which a creator on another machine counts as dead
WORKER = f"{socket.gethostname()}:{os.getpid()}"  # this worker's name in its trials' user attributes


def first_line(error):
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


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


# ------------------------------------------------------------------------------------------------------------- queue
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
    if queued := queue_slots(study, cap, check):
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


def hold_worker_lock(out: Path):
    """An flock on <out>/workers/<host>:<pid>.lock, held while this worker lives: a worker on the same machine tells a
    dead one's trials by its free lock."""
    folder = out / "workers"
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / f"{WORKER}.lock", "w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def worker_alive(worker, out: Path, heartbeat, grace):
    if worker.partition(":")[0] == socket.gethostname():
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
    from optuna.trial import TrialState

    requeued = 0
    for trial in study.get_trials(deepcopy=False, states=[TrialState.RUNNING]):
        attrs = trial.user_attrs
        if "worker" not in attrs or worker_alive(attrs["worker"], out, attrs.get("heartbeat"), grace):
            continue
        if fail_running(study, trial, f"its worker {attrs['worker']} died"):  # False: another worker was first
            study.enqueue_trial(trial.params, user_attrs={k: v for k, v in attrs.items() if k == "slot"})  # its draw again
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
        self.started, self.finished = time.time(), 0
        self.common = shlex.split(options.flags)  # the flags of every run
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
        requeue_dead(self.study, self.out, self.options.grace)
        count = max(1, self.options.agents // len(self.options.seeds)) if self.batched else 1
        taken = []
        for _ in range(count):
            trial = take_waiting(self.study)  # the storage's atomic pop: each waiting trial once
            if trial is None:
                break
            trial.set_user_attr("worker", WORKER)
            trial.set_user_attr("heartbeat", time.time())
            params = {d.flag: d.suggest(trial) for d in self.space}
            words = [w for d in self.space for w in d.words(params[d.flag])]
            trial.set_user_attr("flags", shlex.join(words))  # what its runs are given
            slot = trial.user_attrs["slot"]
            if self.held_elsewhere(trial, slot):
                continue
            why = check_trial_flags(self.Args, ["--env-id", self.options.env_id, "--total-timesteps",
                                                str(self.options.total_timesteps), *self.common, *words])  # fmt: skip
            if why:  # a combination the script refuses (e.g. minibatches that do not split the batch)
                self.fail(trial, why)
                print(f"trial {slot}: {shlex.join(words)}: the script refuses it ({why}); failed", flush=True)
                continue
            runs = [PlannedRun(self.options.script, self.options.env_id, f"trial-{slot}", seed,
                               self.options.total_timesteps, self.common + words)
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
        from optuna.trial import TrialState

        earlier = [t for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get("slot") == slot
                   and t.number < trial.number and t.state != TrialState.FAIL]  # fmt: skip
        if earlier:
            self.fail(trial, f"slot {slot} is trial {earlier[0].number}'s")
        return bool(earlier)

    def fail(self, trial, why):
        """Tells a trial of this worker failed, user attribute "failed" = `why`."""
        from optuna.trial import TrialState

        trial.set_user_attr("failed", why)
        self.study.tell(trial, state=TrialState.FAIL)

    def score(self, one, run):
        """A finished run's score: the mean return of its last --last episodes (benchmark/report.py's)."""
        logged = read_run(run.folder(self.out))
        returns = logged[0]["episodic_return"].to_numpy() if logged else []
        one.scores[run.seed] = float(returns[-self.options.last :].mean()) if len(returns) else None  # None: no episode
        one.ended.add(run.seed)

    # training
    def train(self, unit):
        """Trains a unit to its end: a Batch again without its pruned trials' runs after each prune (their processes'
        checkpoints: the others continue), or one run."""
        while unit is not None and not self.stopping.is_set():
            watcher = threading.Thread(target=self.guarded(self.watch), args=(unit,), daemon=True)
            watcher.start()
            status = execute(unit, self.out, self.stopping)[2]
            unit.ended = True
            watcher.join()
            if status == "live":  # a killed worker's process still saves its checkpoints there: once it has ended
                unit.ended = False
                time.sleep(2.0)
                continue
            unit = self.after(unit, status)

    def after(self, unit, status):
        """What follows a unit's process: its runs scored (done), recorded as pruned, or failed; returns the unit
        of the survivors still to train (a pruned Batch's), else None."""
        survivors = []
        with self.lock:
            for run in unit.runs:
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
                    self.fail(one.trial, f"see {where}")
                    print(f"trial {one.slot}: FAILED (see {where})", flush=True)
                    one.trial = None
                elif len(one.ended) == len(self.options.seeds) and one.trial is not None:
                    self.tell(one)
        if not survivors or self.stopping.is_set():
            return None
        return Batch(survivors) if isinstance(unit, Batch) else survivors[0]

    def tell(self, one):
        from optuna.trial import TrialState

        empty = [seed for seed in self.options.seeds if one.scores.get(seed, 0.0) is None]
        if one.trial.number not in {t.number for t in self.study.get_trials(deepcopy=False, states=[TrialState.RUNNING])}:
            said = "ended elsewhere (another worker took this worker for dead and queued it again); this result dropped"
        elif one.pruned:
            self.study.tell(one.trial, state=TrialState.PRUNED)
            said = f"pruned at step {self.rung_steps[one.reported - 1]}"
        elif empty:  # nothing to score: a mean of no return is no score
            said = (f"no episode of seed {empty[0]} ended within --total-timesteps {self.options.total_timesteps}; "
                    "failed (raise --total-timesteps, or search a task whose episodes end sooner)")  # fmt: skip
            self.fail(one.trial, said)
        else:
            value = float(np.mean([one.scores[seed] for seed in self.options.seeds]))
            for seed, score in one.scores.items():
                one.trial.set_user_attr(f"score_seed{seed}", score)
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
        best = max((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: t.value, default=None)
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
        log, offset = unit.folder(self.out) / "output.log", None
        pattern = re.compile(r"^(?:(?:\S+-trial-(\d+) )?seed (\d+): )?step (\d+)/\d+ .*mean return \(last \d+\) (\S+)")
        runs = unit.runs
        single = not isinstance(unit, Batch) or len(unit.variants) == 1
        while not getattr(unit, "ended", False):
            time.sleep(1.0)
            if not log.exists():
                continue
            with open(log) as handle:
                handle.seek(0, 2) if offset is None else handle.seek(offset)  # at first its end: this process's lines only
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
            with contextlib.suppress(OSError):  # a process that has ended meanwhile
                if os.readlink(f"/proc/{process.pid}/cwd") in folders:
                    process.send_signal(signal.SIGTERM)

    def beat(self):
        """Beats the heartbeat of every trial this worker holds, training or queued behind another, every quarter of
        --grace (30 s at most), so that a worker on another machine never takes a live one for dead."""
        import optuna

        while not self.beating.wait(min(30.0, self.options.grace / 4)):
            with self.lock:
                held = [one.trial for one in self.trials.values() if one.trial is not None]
            for trial in held:
                with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):  # told meanwhile, here or elsewhere
                    trial.set_user_attr("heartbeat", time.time())

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
                        self.after(unit, "stopped")
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
