"""The promise to a careful user, as a catalogue of bad input and faults: for each, the input, the one line the user
reads, the exit code, and what is left on disk. Nothing is written outside the run's folder, a run folder is never
shared, nothing is left half-written, and no library's traceback reaches the user. (Flag ranges, foreign or corrupt
checkpoints and module:EnvId ids: test_cli.py; signals and resume: test_long_runs.py; torchrun, a worker's death
included: test_distributed.py; damaged benchmark data: test_report.py.)"""

import glob
import importlib.util
import itertools
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Literal

from ppo_utils import checkpoints
import pytest
from ppo_utils import command_line, logs
from ppo_utils import run as ppo_run
import torch
from conftest import ROOT, load_script, needs, pythonpath_first, run_script, write_checkpoint
from long_run_helpers import NAN_OBSERVATION_ENVS, NAN_OBSERVATION_STEP, NAN_OBSERVATION_UPDATE

cont = load_script("ppo_continuous_action")
PENDULUM = dict(env_id="Pendulum-v1", num_steps=64, num_minibatches=2, update_epochs=1, compile=False)


def left_on_disk(folder):
    """Every path under `folder`, relative to it."""
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, dirs, files in os.walk(folder) for n in dirs + files)


def checkpoint_of(tmp_path, **fields):
    """A checkpoint file of a Pendulum run (no agent: enough for what is checked before one is made)."""
    fields = {"run_name": "run", "iteration": 1, **fields}
    return write_checkpoint(tmp_path / "saved" / "run" / "agent.pt", cont.Args(env_id="Pendulum-v1"), **fields)


# (script, flags, what the one line says, the checkpoint the case needs); each exits 1 before anything is written
ONE_LINE = [
    ("ppo_continuous_action", ["--exp-name", "../../../outside"], "--exp-name '../../../outside': pass one folder name", None),
    ("ppo_continuous_action", ["--exp-name", "x" * 300], "at most 100 bytes", None),
    ("ppo_continuous_action", ["--exp-name", ".."], "--exp-name '..': pass one folder name", None),
    ("ppo_continuous_action", ["--num-minibatches", "2048"], "minibatches of one sample", None),
    ("ppo_atari", ["--num-envs", "1", "--num-steps", "4", "--num-minibatches", "4"], "add --no-norm-adv", None),
    ("ppo_rnn", ["--env-id", "Blackjack-v1"], "has Tuple observations", None),
    ("ppo_continuous_action", ["--resume", "saved/run/agent.pt", "--eval-checkpoint", "saved/run/agent.pt"], "pass one",
     {}),  # fmt: skip
    ("ppo_continuous_action", ["--resume", "saved/run/agent.pt"], "holds a run name or wandb id", {"run_name": "../../x"}),
    ("ppo_continuous_action", ["--resume", "saved/run/agent.pt"], "holds a run name or wandb id", {"wandb_id": "../x"}),
    ("ppo_continuous_action", ["--resume", "saved/run/agent.pt"], "finished all its 488 updates", {"iteration": 488}),
    # a checkpoint of the run "other" copied into the folder of the run "run": resumed, it would write over run's agent.pt
    # and mix its scalars into run's events
    ("ppo_continuous_action", ["--resume", "saved/run/agent.pt"], "is a checkpoint of the run other, which would write into "
     "the folder saved/run of another run (or a renamed copy); resume it from a folder named other", {"run_name": "other"}),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name,flags,line,fields", ONE_LINE, ids=[f"{n}:{' '.join(f)[:40]}" for n, f, _, _ in ONE_LINE])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, name, flags, line, fields):
    (tmp_path / "work").mkdir()
    if fields is not None:
        checkpoint_of(tmp_path / "work", **fields)
    before = left_on_disk(tmp_path)
    result = run_script(name, *flags, cwd=tmp_path / "work", timeout=120)
    lines = [text for text in result.stderr.splitlines() if text.strip() and "Powered by Stella" not in text]
    assert result.returncode == 1 and len(lines) == 1 and line in lines[0], result.stderr[-2000:]
    assert lines[0].startswith("error: ") and left_on_disk(tmp_path) == before


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("pygame") is not None, reason="pygame is installed: CartPole renders")
def test_a_video_of_an_env_that_cannot_render_is_one_line_before_any_folder(tmp_path):
    result = run_script("ppo_rnn", "--env-id", "CartPoleNoVelocity-v1", "--capture-video", cwd=tmp_path, timeout=120)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert result.stderr.startswith("error: --capture-video: CartPoleNoVelocity-v1 cannot render here (pygame")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("script,env_id", [("ppo_continuous_action", "Hopper-v5"), ("ppo_atari", "BreakoutNoFrameskip-v4")])
def test_a_video_without_moviepy_is_one_line_before_any_folder(tmp_path, script, env_id):
    """--capture-video where moviepy is not installed (faked): gymnasium's RecordVideo would stop the run with its own
    traceback after the run folder is made; the checks say it in one line first."""
    flags = ["--env-id", env_id, "--capture-video", "--no-compile"]
    line = one_line_error(tmp_path, script, flags, without(tmp_path, "moviepy"))
    assert line.startswith("error: --capture-video: moviepy is not installed here;") and "pip install moviepy" in line


@pytest.mark.slow
@pytest.mark.parametrize("script", ["ppo_atari", "ppo_rnn"])
def test_envpool_not_installed_is_one_line_before_any_folder(tmp_path, script):
    flags = ["--env-id", "BreakoutNoFrameskip-v4", "--vector-env", "envpool"]
    line = one_line_error(tmp_path, script, flags, without(tmp_path, "envpool"))
    assert line.startswith("error: --vector-env envpool: envpool is not installed here;") and "pip install envpool" in line


def without(tmp_path, module):
    """The environment of a run where `module` is not installed (faked: a module of that name first on the path whose
    import fails as a missing package's does)."""
    (tmp_path / "fake").mkdir()
    fails = f'raise ModuleNotFoundError("No module named {module!r}", name={module!r})\n'
    (tmp_path / "fake" / f"{module}.py").write_text(fails)
    return {"PYTHONPATH": pythonpath_first(tmp_path / "fake")}


def one_line_error(tmp_path, script, flags, env):
    """Starts `script` with `flags` in an empty folder; asserts that it fails with one line, no traceback and no run
    folder left, and returns that line."""
    (tmp_path / "work").mkdir()
    result = run_script(script, *flags, cwd=tmp_path / "work", timeout=120, env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert os.listdir(tmp_path / "work") == []
    return lines[0]


TRACK = ["--env-id", "Pendulum-v1", "--num-steps", "64", "--total-timesteps", "64", "--track", "--no-compile"]


@pytest.mark.slow
@needs("wandb")
def test_wandb_that_cannot_start_is_one_line_and_leaves_no_run_folder(tmp_path):
    """--track with no wandb key (and no network): wandb's UsageError becomes a line that says how to log in or log
    offline, and the run folder made for the run is removed again."""
    env = {"HOME": str(tmp_path), "WANDB_MODE": "online", "WANDB_API_KEY": "", "WANDB_DIR": ""}
    line = one_line_error(tmp_path, "ppo_continuous_action", TRACK, env)
    assert line.startswith("error: --track: wandb did not start (") and "WANDB_MODE=offline" in line


@pytest.mark.slow
def test_track_without_wandb_installed_is_one_line_and_leaves_no_run_folder(tmp_path):
    """--track where wandb is not installed (faked): one line naming the flag and the fix, no run folder."""
    line = one_line_error(tmp_path, "ppo_continuous_action", TRACK, without(tmp_path, "wandb"))
    assert line.startswith("error: --track: wandb is not installed here;") and "pip install wandb" in line


def test_a_working_folder_where_runs_cannot_be_made_is_one_line(tmp_path, monkeypatch):
    """runs/ a file, or a folder this user may not write (faked: the tests run as root, whom permissions do not stop)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(checkpoints.ArgError, match=f"^runs is a file in {tmp_path}; .*move the file$"):
        cont.train(cont.Args(**PENDULUM, total_timesteps=64))
    (tmp_path / "runs").unlink()

    def refused(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(checkpoints.os, "makedirs", refused)
    with pytest.raises(checkpoints.ArgError, match=r"^cannot create the run folder runs/Pendulum-v1__.* \(Permission denied"):
        cont.train(cont.Args(**PENDULUM, total_timesteps=64))
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_two_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    clock = itertools.count(1_000_000.0, 0.001)  # both runs start within the same second
    monkeypatch.setattr(ppo_run, "time", SimpleNamespace(time=lambda: next(clock), monotonic=time.monotonic))
    first = cont.train(cont.Args(**PENDULUM, total_timesteps=64, save_model=True, seed=1))
    second = cont.train(cont.Args(**PENDULUM, total_timesteps=64, save_model=True, seed=1))
    assert (first["run_name"], second["run_name"]) == (
        "Pendulum-v1__ppo_continuous_action__1__1000000",
        "Pendulum-v1__ppo_continuous_action__1__1000000-2",
    )
    for result in (first, second):
        saved = torch.load(tmp_path / "runs" / result["run_name"] / "agent.pt", weights_only=True)
        torch.testing.assert_close(saved["model"], result["agent"].state_dict())  # each its own agent


def test_a_namespaced_env_id_stays_one_folder_name():
    from ppo_utils import flag_checks

    assert flag_checks.run_name_part("my_package/Walker-v0") == "my_package-Walker-v0"


def test_a_checkpoint_that_cannot_be_written_leaves_the_last_good_one_and_no_partial_file(tmp_path):
    """A full disk, made real: the temporary file is a link to /dev/full, where every write fails with ENOSPC."""
    path = str(tmp_path / "agent.pt")
    torch.save({"iteration": 1}, path)
    os.symlink("/dev/full", path + ".tmp")
    with pytest.raises(checkpoints.CheckpointError, match=r"\(No space left on device\); the last good one stays: .*pt$"):
        checkpoints.save_checkpoint(path, {"iteration": 2, "model": torch.zeros(100_000)})
    assert os.listdir(tmp_path) == ["agent.pt"] and torch.load(path, weights_only=True) == {"iteration": 1}


@pytest.mark.slow
def test_a_full_disk_during_a_run_is_one_line_with_the_command_that_continues_it(tmp_path, monkeypatch, capsys):
    """Update 1's checkpoint is written, update 2's finds the disk full: the run stops with one line naming the kept
    checkpoint and the command that continues from it; no partial file stays beside it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ppo_continuous_action.py"])
    real_save = torch.save

    def fills_the_disk(obj, f):
        if obj["iteration"] == 2:
            raise OSError(28, "No space left on device")
        real_save(obj, f)

    monkeypatch.setattr(checkpoints.torch, "save", fills_the_disk)
    args = cont.Args(**PENDULUM, total_timesteps=64 * 3, checkpoint_interval=1)
    with pytest.raises(SystemExit) as stop:
        command_line.main(args, cont.train, cont.make_envs, cont.Agent, cont.act)
    lines = capsys.readouterr().err.strip().splitlines()
    (folder,) = glob.glob("runs/*")
    assert stop.value.code == 1 and len(lines) == 1, lines
    assert lines[0] == (
        f"error: could not write the checkpoint {folder}/agent.pt (No space left on device); the last good one stays: "
        f"{folder}/agent.pt; once there is room, continue with: python ppo_continuous_action.py --resume {folder}/agent.pt"
    )
    assert sorted(os.listdir(folder))[0] == "agent.pt" and not glob.glob(f"{folder}/*.tmp")
    assert torch.load(f"{folder}/agent.pt", weights_only=True)["iteration"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("full_at", [2, 1], ids=["a later set", "the first set"])
def test_a_full_disk_while_the_agents_checkpoints_are_written_is_one_line_that_continues_them_all(
    tmp_path, monkeypatch, capsys, full_at
):
    """ppo_continuous_action_seeds.py: seed 3's checkpoint of update `full_at` is written, seed 5's finds the disk full.
    The agents' checkpoints stay a set (all of the last update written, or none), and the one line names them and the
    command that continues them all with this script, or says that none was written."""
    seeds_script = load_script("ppo_continuous_action_seeds")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ppo_continuous_action_seeds.py"])
    real_save = torch.save

    def fills_the_disk(obj, f):
        if obj["iteration"] == full_at and obj["args"]["seed"] == 5:
            raise OSError(28, "No space left on device")
        real_save(obj, f)

    monkeypatch.setattr(checkpoints.torch, "save", fills_the_disk)
    args = seeds_script.SeedsArgs(**PENDULUM, seeds=(3, 5), total_timesteps=64 * 3, checkpoint_interval=1)
    with pytest.raises(SystemExit) as stop:
        seeds_script.main(args, seeds_script.train, seeds_script.make_envs, seeds_script.Agent)
    lines = capsys.readouterr().err.strip().splitlines()
    folders = [glob.glob(f"runs/*__{seed}__*")[0] for seed in (3, 5)]
    paths = [f"{folder}/agent.pt" for folder in folders]
    assert stop.value.code == 1 and len(lines) == 1, lines
    if full_at == 1:
        assert lines[0] == (
            f"error: could not write the checkpoint {paths[1]} (No space left on device); none was written before; "
            "start the run again once there is room"
        )
        assert not glob.glob("runs/*/agent.pt")
    else:
        assert lines[0] == (
            f"error: could not write the checkpoint {paths[1]} (No space left on device); the last good ones stay: "
            f"{paths[0]} {paths[1]}; once there is room, continue with: python ppo_continuous_action_seeds.py --resume "
            f"{paths[0]} {paths[1]}"
        )
        assert [torch.load(path, weights_only=True)["iteration"] for path in paths] == [1, 1]
    assert not glob.glob("runs/*/*.tmp")


def test_the_resume_command_is_quoted_and_names_the_script_as_started(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["../ppo/ppo_continuous_action.py", "--exp-name", "my run"])
    command = checkpoints.resume_command("ppo_continuous_action.py", "runs/Hopper-v5__my run__1__7/agent.pt", 1, 1)
    assert command == "python ../ppo/ppo_continuous_action.py --resume 'runs/Hopper-v5__my run__1__7/agent.pt'"
    command = checkpoints.resume_command("ppo_continuous_action.py", "runs/a b/agent.pt", 2, 2)
    assert command == "torchrun --standalone --nproc-per-node 2 ../ppo/ppo_continuous_action.py --resume 'runs/a b/agent.pt'"


def test_a_budget_that_is_not_whole_updates_says_what_it_trains(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    result = cont.train(cont.Args(**PENDULUM, total_timesteps=100))
    err = capsys.readouterr().err
    assert "note: --total-timesteps 100 is not a whole number of updates of 64 steps: the run trains 64 (1 updates)" in err
    assert len(result["episodic_returns"]) == 0  # Pendulum's episodes are 200 steps: none ended in 64


def test_a_default_budget_that_is_not_whole_updates_goes_without_a_note(tmp_path, monkeypatch, capsys):
    """The continuous script's default 1M steps are 488 updates of 2048 (999,424 steps): the note is for a number the
    user chose, not for the default every run would open with."""
    monkeypatch.chdir(tmp_path)
    for total_timesteps in (1_000_000, 1_000_001):
        run = ppo_run.Run(cont.Args(total_timesteps=total_timesteps), resumed_from=None, rank=0, world_size=1)
        run.abandon()
        noted = f"note: --total-timesteps {total_timesteps} is not a whole number of updates of 2048 steps: the run trains"
        assert (noted in capsys.readouterr().err) == (total_timesteps != 1_000_000)


def stop_in_first_rollout(monkeypatch):
    """A stop request that arrives at the first env step of the run (as SIGTERM would)."""
    stop = []
    record = logs.RunLog.record_episodes

    def record_then_stop(self, infos, global_step):
        record(self, infos, global_step)
        if not stop:
            stop.append(signal.SIGTERM)  # only the run given `stop` looks at it

    monkeypatch.setattr(logs.RunLog, "record_episodes", record_then_stop)
    return stop


@pytest.mark.slow
def test_a_resumed_run_ends_with_its_own_last_update_in_agent_pt(tmp_path, monkeypatch):
    """Without --save-model, a run stopped by a signal leaves the checkpoint of its stop; resumed and finished, its
    agent.pt is the finished run, not the stop's (which --eval-checkpoint would evaluate without a word)."""
    monkeypatch.chdir(tmp_path)
    cont.train(cont.Args(**PENDULUM, total_timesteps=64 * 2), stop_in_first_rollout(monkeypatch))
    (path,) = glob.glob("runs/*/agent.pt")
    assert torch.load(path, weights_only=True)["iteration"] == 0
    cont.train(cont.Args(resume=path))
    assert torch.load(path, weights_only=True)["iteration"] == 2


@pytest.mark.slow
def test_a_resumed_run_writes_in_its_checkpoints_folder_from_anywhere(tmp_path, monkeypatch):
    """Resumed from another working folder, the run writes on in its checkpoint's folder, and nothing in the other."""
    (tmp_path / "first").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "first")
    cont.train(cont.Args(**PENDULUM, total_timesteps=64 * 2), stop_in_first_rollout(monkeypatch))
    (path,) = glob.glob(str(tmp_path / "first" / "runs" / "*" / "agent.pt"))
    monkeypatch.chdir(tmp_path / "elsewhere")
    cont.train(cont.Args(resume=path))
    assert os.listdir(tmp_path / "elsewhere") == [] and len(glob.glob(os.path.join(os.path.dirname(path), "events*"))) == 2


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("moviepy") is None, reason="needs moviepy (in requirements.txt)")
def test_a_resumed_run_never_overwrites_an_earlier_sessions_videos(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = cont.Args(**{**PENDULUM, "env_id": "InvertedPendulum-v5"}, total_timesteps=64 * 2, capture_video=True)
    cont.train(args, stop_in_first_rollout(monkeypatch))
    (folder,) = glob.glob("runs/*")
    shutil.copy(f"{folder}/agent.pt", "stopped.pt")

    def videos(session):
        return {path: os.path.getmtime(path) for path in glob.glob(f"{folder}/{session}/*.mp4")}

    written = {}
    for session in ("videos", "videos-from-step-0", "videos-from-step-0-2"):  # the run, then two resumes of its stop
        if session != "videos":
            shutil.copy("stopped.pt", f"{folder}/agent.pt")
            cont.train(cont.Args(resume=f"{folder}/agent.pt"))
        written[session] = videos(session)
        assert written[session], os.listdir(folder)
    assert {session: videos(session) for session in written} == written  # none overwritten by a later session
    assert sorted(os.listdir(".")) == ["runs", "stopped.pt"]


@pytest.mark.long
def test_a_compiler_that_cannot_build_falls_back_to_eager_with_one_warning(tmp_path):
    """--compile (the default) where g++ exists but cannot build inductor's code (a Python without its C headers, say):
    faked by a compiler that answers --version and fails everything else. The run warns once and trains eagerly."""
    fake = tmp_path / "g++"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && echo "g++ 12" && exit 0\necho "Python.h: missing" >&2\nexit 1\n')
    fake.chmod(0o755)
    (tmp_path / "work").mkdir()
    # 2 updates of 1000 epochs of 2 minibatches: a run long enough for --compile to build (ppo_utils.compiled.PAYS_AFTER)
    flags = ["--env-id", "Pendulum-v1", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1000",
             "--total-timesteps", "128", "--no-cuda"]  # fmt: skip  # on a GPU, inductor builds with Triton, not g++
    env = {"CXX": str(fake), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # nothing cached from a real build
    result = run_script("ppo_continuous_action", *flags, cwd=tmp_path / "work", env=env, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: --compile")]
    assert len(warnings) == 1 and "running eagerly" in warnings[0], result.stderr[-3000:]
    assert "step 128/128" in result.stdout


@pytest.mark.slow
def test_ctrl_c_with_async_envs_says_stopping_once(tmp_path):
    """The terminal's Ctrl-C reaches the env workers of --vector-env async too; only the trainer speaks."""
    flags = ["--env-id", "Pendulum-v1", "--num-envs", "4", "--num-steps", "64", "--vector-env", "async", "--no-compile",
             "--total-timesteps", "1000000", "--checkpoint-interval", "1"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, str(ROOT / "ppo_continuous_action.py"), *flags], cwd=tmp_path,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    deadline = time.time() + 120
    while not glob.glob(str(tmp_path / "runs" / "*" / "agent.pt")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and err.count("stopping") == 1, err[-2000:]
    assert "stopped by a signal; continue with:" in out


# ---------------------------------------------------------------------------------------------------------------------
# checkpoints changed after they were written: each refused in one line before anything is written


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A run folder holding the checkpoint of a Pendulum run's first update (of two)."""
    work = tmp_path_factory.mktemp("saved")
    os.chdir(work)
    try:
        cont.train(cont.Args(**PENDULUM, total_timesteps=128, checkpoint_interval=1), StopAfter(iteration=1))
    finally:
        os.chdir(ROOT)
    (path,) = glob.glob(str(work / "runs" / "*" / "agent.pt"))
    return path


class StopAfter(list):
    """stop_signals that read as non-empty (a signal came) from the first env step after update `iteration`."""

    def __init__(self, iteration):
        super().__init__()
        self.iteration, self.steps = iteration, 0

    def __bool__(self):
        self.steps += 1
        return self.steps > self.iteration * PENDULUM["num_steps"]


def edited(checkpoint):
    """Hand edits of a checkpoint of PENDULUM's first update, as a user or a damaged disk might make them."""
    edits = {
        "other env": lambda c: c["args"].update(env_id="MountainCarContinuous-v0"),
        "model key removed": lambda c: c["model"].pop("actor_logstd"),
        "env statistics None": lambda c: c["env_stats"].update(obs_rms=None),
        "garbage rng": lambda c: c["rng"].update(torch=torch.zeros(5, dtype=torch.uint8)),
        "no optimizer": lambda c: c.update(optimizer={}),
        "empty optimizer state": lambda c: c["optimizer"].update(state={}),
        "num_envs a string": lambda c: c["args"].update(num_envs="1"),
        "num_envs 0": lambda c: c["args"].update(num_envs=0),
        "iteration -5": lambda c: c.update(iteration=-5),
        "step of another update": lambda c: c.update(global_step=640),
        "flag unknown": lambda c: c["args"].update(probe_unknown_flag=True),
        "bad exp name": lambda c: c["args"].update(exp_name="../../pwned"),
        "num_envs a bool": lambda c: c["args"].update(num_envs=True),
        "vector_env not one of its choices": lambda c: c["args"].update(vector_env="threads"),
        "a later format": lambda c: c.update(format=2),
        "a NaN weight": lambda c: c["model"]["actor_mean.weight"].view(-1)[3].fill_(float("nan")),
        "an infinite Adam moment": lambda c: c["optimizer"]["state"][0]["exp_avg_sq"].view(-1)[0].fill_(float("inf")),
        "elapsed NaN": lambda c: c.update(elapsed=float("nan")),
    }
    return edits[checkpoint]


DAMAGED = [
    ("other env", "holds a network whose critic_body.0.weight is (64, 3), where one for its flags (--env-id "
                  "MountainCarContinuous-v0) is (64, 2)"),
    ("model key removed", "holds a model of another network (lacking actor_logstd)"),
    ("env statistics None", "holds no obs_rms statistics of the kind its flags keep"),
    ("garbage rng", "holds random number generator states that cannot be restored"),
    ("no optimizer", "holds an optimizer state that is not one of this network's"),
    ("empty optimizer state", "holds Adam's moments for 0 of 13 parameters after update 1"),
    ("num_envs a string", "holds --num-envs '1', which is not int"),
    ("num_envs 0", "holds flags this script refuses: --num-envs 0:"),
    ("iteration -5", "holds iteration -5, which no run reaches"),
    ("step of another update", "holds step 640 after update 1"),
    ("flag unknown", "was written by another version of ppo_continuous_action.py, with flags this one does not have "
                     "(--probe-unknown-flag)"),
    ("bad exp name", "holds flags this script refuses: --exp-name '../../pwned': pass one folder name"),
    ("num_envs a bool", "holds --num-envs True, which is not int"),
    ("vector_env not one of its choices", "holds --vector-env 'threads', which is not Literal['sync', 'async', 'envpool']"),
    ("a later format", "was written by another version of this project (checkpoint format 2, where this one reads format 1)"),
    ("a NaN weight", "holds weights that are NaN or infinite"),
    ("an infinite Adam moment", "holds Adam moments that are NaN or infinite"),
    ("elapsed NaN", "holds elapsed nan, which no run reaches"),
]  # fmt: skip
EVAL_UNCHECKED = {"step of another update", "num_envs 0", "no optimizer", "empty optimizer state", "an infinite Adam moment"}


ANNOTATED = [  # (a value in a checkpoint's flags, a flag's annotation, whether a run of that flag could have saved it)
    (3, int, True), (True, int, False), ("3", int, False), (3.0, int, False),
    (0.5, float, True), (1, float, True), (True, float, False),
    (True, bool, True), (1, bool, False),
    (None, int | None, True), (2, int | None, True), (None, int, False), (1, float | None, True),
    ("sync", Literal["sync", "async"], True), ("threads", Literal["sync", "async"], False), (1, Literal["sync"], False),
]  # fmt: skip


def test_a_checkpoints_flags_are_checked_against_their_annotations():
    """By hand, for each kind of annotation the scripts' flags have: an int will do for a float (Python code may pass
    one: Args(learning_rate=1)), a bool not for an int, None only where the flag is optional."""
    assert [checkpoints.fits(value, hint) for value, hint, _ in ANNOTATED] == [fine for _, _, fine in ANNOTATED]


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--resume", "--eval-checkpoint"])
@pytest.mark.parametrize("case,line", DAMAGED, ids=[case for case, _ in DAMAGED])
def test_a_changed_checkpoint_is_one_line_and_leaves_its_run_folder_as_it_was(
    saved_run, tmp_path, monkeypatch, capsys, flag, case, line
):
    if flag == "--eval-checkpoint" and case in EVAL_UNCHECKED:
        pytest.skip("an evaluation plays one env, counts no steps and restores no optimizer")
    folder = tmp_path / "runs" / "Pendulum-v1__ppo_continuous_action__1__7"
    folder.parent.mkdir()
    checkpoint = torch.load(saved_run, weights_only=True)
    edited(case)(checkpoint)
    torch.save(checkpoint | {"run_name": folder.name}, folder.parent / "agent.pt")
    folder.mkdir()
    os.replace(folder.parent / "agent.pt", folder / "agent.pt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ppo_continuous_action.py", flag, str(folder / "agent.pt")])
    before = left_on_disk(tmp_path)
    args = cont.Args(**{flag[2:].replace("-", "_"): str(folder / "agent.pt")})
    with pytest.raises(SystemExit) as end:
        command_line.main(args, cont.train, cont.make_envs, cont.Agent, cont.act)
    lines = capsys.readouterr().err.strip().splitlines()
    assert end.value.code == 1 and len(lines) == 1 and line in lines[0], lines
    assert lines[0].startswith(f"error: {flag} {folder / 'agent.pt'}") and left_on_disk(tmp_path) == before


@pytest.mark.parametrize("unnumbered", [False, True], ids=["as written", "without its format"])
def test_the_unchanged_checkpoint_of_that_table_resumes(saved_run, tmp_path, monkeypatch, unnumbered):
    """The control of the table above: its checkpoint, unedited, resumes and finishes the run in a copy of its folder
    (of the same name: the folder is the run); so does one without its format, as checkpoints were written before the
    format was numbered."""
    monkeypatch.chdir(tmp_path)
    name = os.path.basename(os.path.dirname(saved_run))
    path = shutil.copytree(os.path.dirname(saved_run), tmp_path / "copy" / name) / "agent.pt"  # the others read it
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["iteration"] == 1 and checkpoint["format"] == 1
    if unnumbered:
        del checkpoint["format"]
        torch.save(checkpoint, path)
    result = cont.train(cont.Args(resume=str(path)))
    assert torch.load(path, weights_only=True)["iteration"] == 2 and result["run_name"] == name
    assert sorted(os.listdir(tmp_path)) == ["copy"]  # written in the copy alone


def test_a_flag_typed_with_resume_is_refused_whatever_its_value(saved_run, tmp_path, monkeypatch, capsys):
    """--learning-rate 0.0003 is the default: only the command line tells that the user asked for it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ppo_continuous_action.py", "--resume", saved_run, "--learning-rate", "0.0003"])
    with pytest.raises(SystemExit) as end:
        command_line.main(cont.Args(resume=saved_run, learning_rate=0.0003), cont.train, cont.make_envs, cont.Agent, cont.act)
    lines = capsys.readouterr().err.strip().splitlines()
    assert end.value.code == 1 and lines == ["error: --resume continues the run with its own flags; drop --learning-rate"]
    for typed, flag in ((["--no-anneal-lr"], "--anneal-lr"), (["--seed=1"], "--seed"), (["--num_envs", "1"], "--num-envs")):
        monkeypatch.setattr(sys, "argv", ["ppo_continuous_action.py", "--resume", saved_run, *typed])  # tyro's spellings
        with pytest.raises(SystemExit):
            # every flag its default
            command_line.main(cont.Args(resume=saved_run), cont.train, cont.make_envs, cont.Agent, cont.act)
        assert capsys.readouterr().err == f"error: --resume continues the run with its own flags; drop {flag}\n"


@pytest.mark.slow
@pytest.mark.parametrize("case", ["device", "plain pickle", "dangling runs link"])
def test_messages_name_what_the_user_gave(tmp_path, case):
    (tmp_path / "work").mkdir()
    flags, line = ["--resume", "/dev/null"], "error: --resume /dev/null: not a regular file (a device or a pipe); "
    if case == "plain pickle":
        (tmp_path / "work" / "plain.pkl").write_bytes(pickle.dumps({"a": 1}, protocol=4))  # torch warns about protocol 4
        flags, line = ["--resume", "plain.pkl"], "error: --resume plain.pkl is not a readable checkpoint (UnpicklingError)"
    if case == "dangling runs link":
        os.symlink(tmp_path / "gone", tmp_path / "work" / "runs")
        flags = ["--total-timesteps", "2048"]
        line = f"error: runs in {tmp_path / 'work'} is a link to {tmp_path / 'gone'}, which does not exist"
    before = left_on_disk(tmp_path)
    result = run_script("ppo_continuous_action", *flags, cwd=tmp_path / "work", timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and lines[0].startswith(line), result.stderr[-2000:]
    assert left_on_disk(tmp_path) == before


@pytest.fixture
def small_disk(tmp_path):
    """A file system of a few KB, mounted at tmp_path/disk (a tmpfs): mount(size) makes it, its writes fail with ENOSPC
    once it is full, and remount_read_only() makes it refuse every write."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = []

    def mount(size):
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)], capture_output=True)
        if result.returncode != 0:
            pytest.skip(f"needs mount -t tmpfs (root, where the container allows it) to fill a disk: {result.stderr!r}")
        mounted.append(disk)
        return disk

    def remount_read_only():
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)

    yield SimpleNamespace(mount=mount, remount_read_only=remount_read_only)
    for path in mounted:
        subprocess.run(["umount", str(path)], check=True)


FULL_DISK = [  # (env, flags, disk size, the line's start)
    ("Pendulum-v1", ["--total-timesteps", "25600", "--update-epochs", "1"], "24k",
     "error: could not write the TensorBoard log in runs/Pendulum-v1__ppo_continuous_action__1__"),
    ("Pendulum-v1", ["--total-timesteps", "640", "--checkpoint-interval", "1"], "64k",
     "error: could not write the checkpoint runs/Pendulum-v1__ppo_continuous_action__1__"),
    ("Reacher-v5", ["--total-timesteps", "2048", "--update-epochs", "1", "--capture-video"], "32k",
     "error: could not write a video in runs/Reacher-v5__ppo_continuous_action__1__"),  # its second video fills it
]  # fmt: skip


@pytest.mark.long
@pytest.mark.parametrize("env_id,flags,size,line", FULL_DISK, ids=["events", "first checkpoint", "video"])
def test_a_disk_that_fills_under_the_logs_is_one_line_and_leaves_no_broken_file(small_disk, env_id, flags, size, line):
    """Made real: the run works on a tmpfs of a few KB. TensorBoard's writer thread, torch.save and ffmpeg each meet
    ENOSPC in their own way; the user reads one line naming what failed and the disk's reason."""
    if "--capture-video" in flags and importlib.util.find_spec("moviepy") is None:
        pytest.skip("needs moviepy (in requirements.txt)")
    disk = small_disk.mount(size)
    flags = ["--env-id", env_id, "--num-steps", "64", "--num-minibatches", "2", "--no-compile", *flags]
    result = run_script("ppo_continuous_action", *flags, cwd=disk, timeout=300)
    lines = [text for text in result.stderr.strip().splitlines() if "settotalmass" not in text and text]  # MuJoCo's own
    assert result.returncode == 1 and len(lines) == 1 and lines[0].startswith(line), result.stderr[-3000:]
    written = "none was written before; " if "checkpoint" in line else ""
    assert lines[0].endswith(f"(No space left on device); {written}start the run again once there is room"), lines[0]
    (folder,) = glob.glob(str(disk / "runs" / "*"))
    assert not glob.glob(f"{folder}/*.tmp") and not glob.glob(f"{folder}/agent.pt")
    for video in glob.glob(f"{folder}/videos/*.mp4"):
        with open(video, "rb") as f:
            assert b"moov" in f.read(), f"{video} was left unfinished"


@pytest.mark.slow
def test_a_read_only_run_folder_is_one_line(saved_run, small_disk):
    disk = small_disk.mount("1m")
    folder = disk / "runs" / os.path.basename(os.path.dirname(saved_run))
    shutil.copytree(os.path.dirname(saved_run), folder)
    small_disk.remount_read_only()
    result = run_script("ppo_continuous_action", "--resume", str(folder / "agent.pt"), cwd=disk.parent, timeout=120)
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        f"error: --resume {folder / 'agent.pt'}: its run folder {folder} cannot be written (Read-only file system); "
        "make it writable, or copy the run folder to where you can write and resume the agent.pt in the copy"
    ]


# ---------------------------------------------------------------------------------------------------------------------
# NaN observations from the env: one line naming the env and the step, before an update learns from them

NAN_OBSERVATION_RUNS = [  # (script, its flags for long_run_helpers' env of NaN observations)
    ("ppo", {"env_id": NAN_OBSERVATION_ENVS["discrete"]}),
    ("ppo_masked", {"env_id": NAN_OBSERVATION_ENVS["discrete"], "mask_actions": False, "vector_env": "sync"}),
    ("ppo_rnn", {"env_id": NAN_OBSERVATION_ENVS["discrete"]}),
    # M1's statistics shared by both envs: env 1's NaN makes both envs' normalized observations NaN
    ("ppo_continuous_action", {"env_id": NAN_OBSERVATION_ENVS["continuous"]}),
    ("ppo_continuous_action", {"env_id": NAN_OBSERVATION_ENVS["continuous"], "norm_per_env": True}),
    ("ppo_continuous_action", {"env_id": NAN_OBSERVATION_ENVS["continuous"], "no_norm_obs": True}),
    ("ppo_rnn_continuous_action", {"env_id": NAN_OBSERVATION_ENVS["continuous"]}),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,flags", NAN_OBSERVATION_RUNS, ids=[f"{n}:{'-'.join(f)[7:]}" for n, f in NAN_OBSERVATION_RUNS])
def test_a_nan_observation_is_one_line_naming_the_env_and_the_step(tmp_path, monkeypatch, capsys, name, flags):
    """Env 1 returns a NaN observation at global step 160 (update 3's rollout): the run ends there with one line naming
    env 1 and the step (not the update's NaN loss after it, nor Categorical.sample's traceback), and the last good
    checkpoint, update 2's, stays as it was written (finite weights, no .tmp beside it)."""
    module = load_script(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [f"{name}.py"])
    flags = dict(flags)
    if flags.pop("no_norm_obs", False):
        flags["norm_obs"] = False
    flags |= {"compile": False} if hasattr(module.Args, "compile") else {}  # the recurrent scripts never compile
    args = module.Args(**flags, num_envs=2, num_steps=32, num_minibatches=2, update_epochs=1, total_timesteps=64 * 4,
                       checkpoint_interval=1, cuda=False)  # fmt: skip
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as end:
            command_line.main(args, module.train, module.make_envs, module.Agent, module.act)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    (path,) = glob.glob("runs/*/agent.pt")
    lines = capsys.readouterr().err.strip().splitlines()
    assert end.value.code == 1 and lines == [
        f"error: env 1 of {flags['env_id']} returned a NaN observation at step {NAN_OBSERVATION_STEP} (in the rollout of "
        f"update {NAN_OBSERVATION_UPDATE}); training stopped before an update learned from it and wrote no checkpoint; "
        f"the last good one: {path}"
    ], lines
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["iteration"] == NAN_OBSERVATION_UPDATE - 1 and not glob.glob("runs/*/*.tmp")
    assert all(torch.isfinite(v).all() for v in checkpoint["model"].values())


def test_a_nan_observation_while_evaluating_is_one_line_naming_the_step(tmp_path, monkeypatch, capsys):
    """--eval-checkpoint --seed 2: its one env is the one long_run_helpers' env makes NaN at its 80th step; the
    evaluation stops there in one line, not with Categorical.sample's traceback."""
    ppo = load_script("ppo")
    monkeypatch.chdir(tmp_path)
    env_id = NAN_OBSERVATION_ENVS["discrete"]
    ppo.train(ppo.Args(env_id=env_id, num_envs=1, num_steps=64, total_timesteps=64, num_minibatches=2, compile=False))
    (path,) = glob.glob("runs/*/agent.pt")
    monkeypatch.setattr(sys, "argv", ["ppo.py", "--eval-checkpoint", path, "--seed", "2"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as end:
        command_line.main(
            ppo.Args(eval_checkpoint=path, seed=2, eval_episodes=1000), ppo.train, ppo.make_envs, ppo.Agent, ppo.act
        )
    signal.signal(signal.SIGINT, signal.default_int_handler)  # main() set it for the evaluation: pytest's own again
    lines = capsys.readouterr().err.strip().splitlines()
    assert end.value.code == 1 and lines == [
        f"error: {env_id} returned a NaN observation at step 80 of the evaluation, which stopped there; fix the env, or "
        "evaluate on another --seed"
    ], lines


@pytest.mark.slow
@pytest.mark.parametrize("vector_env", ["sync", "async"])
def test_mujocos_settotalmass_deprecation_is_said_once_and_written_nowhere(tmp_path, vector_env):
    """HalfCheetah-v5's model (gymnasium's) sets settotalmass, which MuJoCo 4 warns about at every compile: in the flag
    checks and in each of the two envs (three times), the first into a MUJOCO_LOG.TXT in the working folder before any
    run folder. Now once, on the console; no log file holds it; the run goes on."""
    flags = ["--env-id", "HalfCheetah-v5", "--total-timesteps", "128", "--num-envs", "2", "--num-steps", "32",
             "--num-minibatches", "2", "--update-epochs", "1", "--no-compile", "--vector-env", vector_env]  # fmt: skip
    result = run_script("ppo_continuous_action", *flags, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("compiler attribute 'settotalmass' is deprecated") == 1, result.stderr[-3000:]
    assert os.listdir(tmp_path) == ["runs"]
    assert not any("settotalmass" in open(log).read() for log in glob.glob(str(tmp_path / "runs" / "*" / "MUJOCO_LOG.TXT")))
