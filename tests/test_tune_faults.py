"""benchmark/tune.py's faults (issue 95), each as a user or a machine causes it: a journal torn by a cut write, a study
whose creator died while it queued the trials, a file that is no journal, flags the study owns, counts out of range,
folders that cannot be written, a thread's exception, a trial whose runs end no episode, a worker on another machine
that must not take a live worker's queued trials for dead, and a Ctrl-C on the held-out seeds."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import optuna
import pytest
from conftest import ROOT, load_script
from optuna.trial import TrialState

import journal  # benchmark/journal.py
import tune  # benchmark/tune.py
import tune_workers  # benchmark/tune_workers.py

CONTINUOUS = load_script("ppo_continuous_action").Args
SLEEP = time.sleep
# the probe's tiny study: ppo.py on CartPole, 256 steps a run, one trial at a time
PROBE = ["--script", "ppo.py", "--env-id", "CartPole-v1", "--total-timesteps", "256", "--space",
         "learning-rate=1e-4..1e-3:log", "--seeds", "1", "--test-seeds", "3", "--workers", "1", "--no-test", "--last", "5",
         "--flags=--num-steps 32 --num-envs 2 --num-minibatches 2 --update-epochs 1 --no-compile"]  # fmt: skip


def options(**changed):
    """tune.py's options as its parser gives them, for the functions that take them."""
    defaults = dict(script="ppo_continuous_action.py", env_id="Pendulum-v1", seeds=[1, 2], total_timesteps=2048, flags="",
                    last=100, rungs=3, pruner="none", prune_after=4, test_seeds=[101], test_timesteps=None, baseline=[],
                    grace=600.0, study="s", trials=3, argv=[], storage=None)  # fmt: skip
    return SimpleNamespace(**(defaults | changed))


def a_journal(path, trials=3, finished=2):
    """A study's journal as a tuner writes it (Optuna's own writer): `trials` slots queued, `finished` of them taken,
    drawn and told."""
    storage = tune.open_storage(str(path), path.parent)
    space = tune.parse_space(["ent-coef=0..0.01"], "ppo_continuous_action.py", CONTINUOUS)
    study, _, _ = tune.join_study(options(trials=trials), space, storage, None, None, path.parent)
    for k in range(finished):
        trial = study.ask()
        trial.suggest_float("ent_coef", 0, 0.01)
        study.tell(trial, float(k))
    return path


def load(path, name="s"):
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    return optuna.load_study(study_name=name, storage=storage)


# ----------------------------------------------------------------------------------------------------- the journal
def test_a_torn_last_line_is_dropped_and_the_next_append_reads_whole(tmp_path):
    """A write cut inside the last entry: Optuna reads past the fragment and glues its next append onto it (the whole
    study unreadable after). check_journal drops the fragment, says so, and the study takes appends and reads whole."""
    path = a_journal(tmp_path / "study.journal")
    whole = path.read_bytes()
    last = whole[:-1].rfind(b"\n") + 1
    path.write_bytes(whole[: last + (len(whole) - last) // 2])  # cut inside the last entry
    said = journal.check_journal(path)
    assert "dropped its torn last line" in said and "\n" not in said
    assert path.read_bytes() == whole[:last]
    study = load(path)
    study.set_user_attr("after", 1)  # an append after the mend
    assert load(path).user_attrs["after"] == 1 and len(load(path).trials) == 3
    assert journal.check_journal(path) is None  # whole: nothing to say


def test_a_last_entry_cut_before_its_newline_is_kept(tmp_path):
    path = a_journal(tmp_path / "study.journal")
    whole = path.read_bytes()
    path.write_bytes(whole[:-1])
    assert "newline" in journal.check_journal(path)
    assert path.read_bytes() == whole


def test_a_fragment_glued_before_an_entry_is_dropped_and_the_study_reads_again(tmp_path):
    """What an older tuner left: the append after a torn line glued onto it, in the middle of the journal."""
    path = a_journal(tmp_path / "study.journal")
    lines = path.read_bytes().split(b"\n")[:-1]
    glued = lines[:-3] + [lines[-3][:25] + lines[-2], lines[-1]]  # entry -3 torn, -2 appended onto it, -1 after
    path.write_bytes(b"".join(line + b"\n" for line in glued))
    with pytest.raises(Exception):
        load(path)  # Optuna cannot read it
    assert "dropped the torn fragment before line" in journal.check_journal(path)
    assert len(load(path).trials) == 3


@pytest.mark.parametrize("text", ["not json\n", '{"a": 1}\n', "x"], ids=["text", "json but no journal", "one word"])
def test_a_file_that_is_no_journal_is_refused_in_one_line_and_left_as_it_was(tmp_path, text):
    path = tmp_path / "notes.journal"
    path.write_text(text)
    with pytest.raises(SystemExit) as refused:
        tune.main([*PROBE, "--out", str(tmp_path / "runs"), "--storage", str(path)])
    said = str(refused.value)
    assert said.startswith(f"error: --storage {path}: line 1 is not an entry of an Optuna journal") and "\n" not in said
    assert path.read_text() == text and not (tmp_path / "runs").exists()


@pytest.mark.long
def test_a_study_cut_inside_a_line_is_mended_then_finished_by_the_same_command_twice(tmp_path):
    """The probe: a finished 2-trial study's journal cut inside its 20th line (of 27), then its command twice. The first
    mends the journal (one line) and finishes the study; the second finds it finished; every run scored the flags of
    its trial (a trial whose draw the cut lost trains its new draw, the old runs moved aside)."""
    command = [sys.executable, str(ROOT / "benchmark" / "tune.py"), *PROBE, "--trials", "2", "--out", str(tmp_path)]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    path = tmp_path / "study.journal"
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(lines[:19]) + b"\n" + lines[19][: len(lines[19]) // 2])
    for attempt in range(2):
        again = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and "Traceback" not in again.stderr, again.stdout + again.stderr[-2000:]
        assert ("mended " in again.stdout) == (attempt == 0), again.stdout
    study = optuna.load_study(study_name="tune-CartPole-v1", storage=tune.open_storage(str(path), tmp_path))
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert sorted(t.user_attrs["slot"] for t in complete) == [0, 1]
    for trial in complete:
        done = json.loads((tmp_path / "CartPole-v1" / f"trial-{trial.user_attrs['slot']}" / "seed1" / "done.json").read_text())
        assert done["command"].endswith(trial.user_attrs["flags"]), (done["command"], trial.user_attrs["flags"])


# --------------------------------------------------------------------------------------------------- the trial queue
def test_a_study_whose_creator_died_while_queueing_is_queued_to_the_end_by_the_next_worker(tmp_path, monkeypatch):
    """The creator (this machine, its lock free: dead) queued 3 of 10 slots; the worker that joins queues the other
    7 at once, each slot once, instead of waiting and failing."""
    storage = tune.open_storage(str(tmp_path / "study.journal"), tmp_path)
    space = tune.parse_space(["ent-coef=0..0.01"], "ppo_continuous_action.py", CONTINUOUS)
    study = optuna.create_study(storage=storage, study_name="s", direction="maximize")
    study.set_user_attr(tune_workers.CREATOR_KEY, f"{socket.gethostname()}:999999999")
    study.set_user_attr(tune.SPACE_KEY, tune_workers.study_spec(options(trials=10), space))
    study.set_user_attr(tune.CAP_KEY, 10)
    for slot in range(3):
        study.enqueue_trial({}, user_attrs={"slot": slot})
    monkeypatch.setattr(tune.time, "sleep", waited)
    joined, created, _ = tune.join_study(options(trials=10), space, storage, None, None, tmp_path)
    assert not created
    assert sorted(t.user_attrs["slot"] for t in joined.get_trials(states=[TrialState.WAITING])) == list(range(10))


def test_a_slot_queued_twice_trains_once(tmp_path):
    """Two workers that queued a dead creator's missing slots at once: the later trial of a slot is failed when taken,
    and the worker takes the next one."""
    storage = tune.open_storage(str(tmp_path / "study.journal"), tmp_path)
    space = tune.parse_space(["ent-coef=0..0.01"], "ppo_continuous_action.py", CONTINUOUS)
    study, _, lock = tune.join_study(options(trials=2, seeds=[1]), space, storage, None, None, tmp_path)
    study.enqueue_trial({}, user_attrs={"slot": 0})  # slot 0 again
    worker = tune.Worker(options(trials=2, seeds=[1], no_batch=True, agents=1, workers=1, out=str(tmp_path)), space, study,
                         CONTINUOUS)  # fmt: skip
    for _ in range(3):  # this worker holds its lock: alive
        worker.ask()
    lock.close()
    states = sorted((t.user_attrs["slot"], t.state.name) for t in study.trials)
    assert states == [(0, "FAIL"), (0, "RUNNING"), (1, "RUNNING")]
    assert sorted(worker.trials) == [0, 1]


@pytest.mark.parametrize(
    "how", [pytest.param(signal.SIGKILL, marks=pytest.mark.long), pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
    ids=["SIGKILL", "Ctrl-C"],
)
def test_a_tuner_stopped_while_it_queues_leaves_a_study_the_next_worker_finishes_queueing(tmp_path, how, monkeypatch):
    """The probe: `--trials 3000` (here 600) stopped once its journal has 50 lines. Ctrl-C says so in one line (no
    traceback); the next worker with the same options queues the missing slots, each slot once, without waiting for the
    dead creator (after a SIGKILL inside the journal's lock, Optuna itself takes 30 s to release the lock: `long`)."""
    command = [sys.executable, str(ROOT / "benchmark" / "tune.py"), *PROBE, "--trials", "600", "--out", str(tmp_path)]
    tuner = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    path, deadline = tmp_path / "study.journal", time.time() + 120
    while not (path.exists() and path.read_bytes().count(b"\n") >= 50) and time.time() < deadline:
        time.sleep(0.05)
    tuner.send_signal(how)
    out, err = tuner.communicate(timeout=60)
    if how == signal.SIGINT:
        assert tuner.returncode != 0 and "Traceback" not in err, err
        assert err.strip().splitlines() == [
            "interrupted while the study's trials were queued; run the same command again to queue the rest and start"
        ]
    study = optuna.load_study(study_name="tune-CartPole-v1", storage=tune.open_storage(str(path), tmp_path))
    assert len(study.trials) < 600  # stopped mid-queue
    space = tune.parse_space(["learning-rate=1e-4..1e-3:log"], "ppo.py", load_script("ppo").Args)
    flags = "--num-steps 32 --num-envs 2 --num-minibatches 2 --update-epochs 1 --no-compile"
    same = options(script="ppo.py", env_id="CartPole-v1", total_timesteps=256, seeds=[1], test_seeds=[3], last=5, flags=flags,
                   trials=600, study="tune-CartPole-v1")  # fmt: skip
    monkeypatch.setattr(tune.time, "sleep", waited)  # it knows the creator dead (its lock free): it waits for nothing
    joined, _, _ = tune.join_study(same, space, tune.open_storage(str(path), tmp_path), None, None, tmp_path)
    slots = [t.user_attrs["slot"] for t in joined.trials]
    assert sorted(slots) == list(range(600)), (len(slots), len(set(slots)))


def waited(seconds):
    """time.sleep while a worker joins: wait_for_creator's pause fails the test (it waited for a creator that is dead);
    Optuna's own waits pass (a journal lock a SIGKILL left behind, which Optuna releases after 30 s)."""
    if sys._getframe(1).f_code.co_name == "wait_for_creator":
        raise AssertionError("waited for a creator that is dead")
    SLEEP(seconds)


# -------------------------------------------------------------------------------------------------- bad options
@pytest.mark.parametrize("flag", ["--out", "--results", "--storage", "--slurm"])
def test_a_folder_that_cannot_be_made_is_one_line_before_anything_is_written(tmp_path, flag):
    """A file where a folder must be (for --slurm: a folder that does not exist); the default storage (in --out) is
    blamed on --out, the flag typed."""
    (tmp_path / "file").write_text("")
    bad = str(tmp_path / ("missing" if flag == "--slurm" else "file") / "x")
    words = {"--out": ["--out", bad], "--results": ["--out", str(tmp_path / "runs"), "--results", bad],
             "--storage": ["--out", str(tmp_path / "runs"), "--storage", bad + "/study.journal"],
             "--slurm": ["--out", str(tmp_path / "runs"), "--slurm", bad]}[flag]  # fmt: skip
    with pytest.raises(SystemExit) as refused:
        tune.main(["--env-id", "Pendulum-v1", "--total-timesteps", "2048", "--space", "clip-coef=0.1,0.2", *words])
    said = str(refused.value)
    assert said.startswith(f"error: {flag} {bad}") and "\n" not in said, said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.parametrize("text", ["", "not a journal\n"], ids=["empty", "no journal"])
def test_report_of_a_folder_without_a_study_is_one_line(tmp_path, text):
    (tmp_path / "study.journal").write_text(text)
    with pytest.raises(SystemExit) as refused:
        tune.main(["--report", str(tmp_path)])
    said = str(refused.value)
    assert said.startswith(f"error: --report {tmp_path}: its study.journal") and "\n" not in said, said


# ------------------------------------------------------------------------------------------------- while it runs
def test_an_exception_in_a_worker_thread_stops_the_tuner_in_one_line_and_leaves_the_trial_to_requeue(tmp_path, monkeypatch):
    """A journal error (a full disk) while a trial trains: the tuner stops with one line and a non-zero status, the
    trial left running in the storage for the next worker to queue again (its runs continue from their checkpoints)."""

    def full_disk(self, unit):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tune.Worker, "train", full_disk)
    monkeypatch.setattr(tune.signal, "signal", lambda signum, handler: None)  # the test process keeps its handlers
    with pytest.raises(SystemExit) as stopped:
        tune.main([*PROBE, "--trials", "2", "--out", str(tmp_path)])
    said = str(stopped.value)
    assert said.startswith("error: this worker stopped: OSError: [Errno 28] No space left on device;") and "\n" not in said
    study = load(tmp_path / "study.journal", "tune-CartPole-v1")
    assert [t.state for t in study.trials] == [TrialState.RUNNING, TrialState.WAITING]
    assert tune_workers.requeue_dead(study, tmp_path, 600) == 1  # this process's lock is free now: the next worker queues it


@pytest.mark.slow
def test_a_trial_whose_runs_end_no_episode_fails_saying_so(tmp_path):
    """Pendulum's episodes last 200 steps; runs of 128 end none: the trial fails with that said, no nan, no warning."""
    command = [sys.executable, str(ROOT / "benchmark" / "tune.py"), "--script", "ppo_continuous_action.py", "--env-id",
               "Pendulum-v1", "--total-timesteps", "128", "--space", "clip-coef=0.1,0.2", "--seeds", "1", "--trials", "1",
               "--workers", "1", "--no-test", "--no-batch", "--out", str(tmp_path),
               "--flags=--num-steps 64 --num-minibatches 2 --no-compile"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    said = result.stdout + result.stderr
    assert result.returncode != 0 and "nan" not in said and "Warning" not in said and "Traceback" not in said, said
    assert "no episode of seed 1 ended within --total-timesteps 128" in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: no trial of tune-Pendulum-v1 completed (trial 0: no episode"), last


ELSEWHERE = """
import os, runpy, socket, sys
socket.gethostname = lambda: "another-machine"
sys.argv, sys.path[0] = [{tune!r}, *{words!r}], os.path.dirname({tune!r})  # as `python benchmark/tune.py` starts
runpy.run_path({tune!r}, run_name="__main__")
"""


def running(storage):
    """The running trials of the study tune-Pendulum-v1 in `storage`; none before it exists."""
    if "tune-Pendulum-v1" not in optuna.get_all_study_names(storage):
        return []
    study = optuna.load_study(study_name="tune-Pendulum-v1", storage=storage)
    return study.get_trials(states=[TrialState.RUNNING])


@pytest.mark.slow
def test_a_worker_elsewhere_never_takes_a_live_workers_queued_trial_for_dead(tmp_path):
    """Worker A takes two trials that cannot share a process (another --num-envs: two batches, one process at a time),
    so that the second waits in its queue while the first trains. Past --grace, a worker on another machine joins: it
    must find both alive (A beats every trial it holds) and take none."""
    grace = 8  # a worker elsewhere judges A's trials after more than this; A beats them every grace / 4 s
    words = ["--script", "ppo_continuous_action.py", "--env-id", "Pendulum-v1", "--total-timesteps", "200000", "--space",
             "num-envs=1,2", "--space", "clip-coef=0.1,0.2", "--seeds", "1", "--trials", "2", "--agents", "2", "--workers",
             "1", "--grace", str(grace), "--no-test", "--out", str(tmp_path), "--sampler", "random", "--sampler-seed", "1",
             "--flags=--num-steps 64 --num-minibatches 2 --no-compile"]  # fmt: skip
    a = subprocess.Popen([sys.executable, str(ROOT / "benchmark" / "tune.py"), *words], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        storage, deadline = tune.open_storage(str(tmp_path / "study.journal"), tmp_path), time.time() + 120
        # a trial is running from its pop off the queue, before tune.py draws its flags: wait for both trials' values
        while time.time() < deadline and sum("num_envs" in t.params for t in running(storage)) < 2:
            time.sleep(0.2)
        held = running(storage)
        assert len({t.params.get("num_envs") for t in held}) == 2, [t.params for t in held]  # two batches, one queued
        taken = max(t.user_attrs["heartbeat"] for t in held)
        while time.time() < deadline + 60 and time.time() - taken < grace + 1:  # until past --grace since A took them
            time.sleep(0.2)
        b = subprocess.run([sys.executable, "-c", ELSEWHERE.format(words=words, tune=str(ROOT / "benchmark" / "tune.py"))],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        assert b.returncode == 0 and "found no waiting trial" in b.stdout, b.stdout + b.stderr
        trials = optuna.load_study(study_name="tune-Pendulum-v1", storage=storage).get_trials()
        assert [t.state for t in trials] == [TrialState.RUNNING] * 2, [t.user_attrs for t in trials]
        batches = list((tmp_path / "Pendulum-v1").glob("*/output.log"))
        assert len(batches) == 1, "both trials were training: the check proves nothing"
    finally:
        a.send_signal(signal.SIGTERM)
        a.communicate(timeout=120)


@pytest.mark.long
def test_ctrl_c_on_the_held_out_seeds_says_how_to_continue_in_one_line(tmp_path):
    """Ctrl-C (SIGINT to the tuner's process group, as a terminal sends it) while the held-out runs train: no
    traceback; the last line is the same tune.py command, which continues them."""
    words = [*PROBE[: PROBE.index("--no-test")], *PROBE[PROBE.index("--no-test") + 1 :]]
    words[words.index("--total-timesteps") + 1] = "256"
    command = [sys.executable, str(ROOT / "benchmark" / "tune.py"), *words, "--trials", "1", "--test-timesteps", "100000",
               "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results")]  # fmt: skip
    tuner = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    held, deadline = tmp_path / "runs" / "held-out" / "CartPole-v1", time.time() + 180
    while not list(held.glob("*/seed3/runs/*/events.out.tfevents*")) and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(tuner.pid, signal.SIGINT)
    out, err = tuner.communicate(timeout=120)
    assert tuner.returncode != 0 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1].startswith("interrupted on the held-out seeds; run the same command again"), err
    assert "python benchmark/tune.py --script ppo.py" in err.strip().splitlines()[-1]


def test_a_study_of_that_name_that_no_tuner_made_is_refused_and_left_as_it_was(tmp_path, monkeypatch):
    """A study made through Optuna alone (no space, no creator) is not taken for one whose creator died: one line."""
    path = tmp_path / "study.journal"
    optuna.create_study(storage=tune.open_storage(str(path), tmp_path), study_name="plain", direction="maximize")
    before = path.read_bytes()
    monkeypatch.setattr(tune.time, "sleep", lambda seconds: None)  # its creator's moment to name itself, not waited out
    with pytest.raises(SystemExit) as refused:
        tune.main([*PROBE, "--trials", "2", "--out", str(tmp_path / "runs"), "--storage", str(path), "--study", "plain"])
    said = str(refused.value)
    assert said.startswith("error: --study plain exists in this storage with another origin") and "\n" not in said, said
    assert path.read_bytes() == before and not (tmp_path / "runs").exists()
