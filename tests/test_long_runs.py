"""Long runs that lose nothing: checkpoints, SIGTERM and resume with continuous logs and schedules, a saved model
evaluated by each script, the NaN guard, identical logs from identical seeds, corrupt checkpoints refused."""

import glob
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from ppo_utils import checkpoints
from ppo_utils import evaluation
from ppo_utils import run as ppo_run
import torch
from conftest import ROOT, SCRIPTS, continuous, load_script, read_scalars, restored_env_statistics, run_script
from long_run_helpers import SAVE_THEN_EVALUATE, stop_mid_rollout_then_resume
from ppo_utils.flag_checks import check_args

cont = load_script("ppo_continuous_action")
# 40 updates of 256 steps on Pendulum (under a second each), with a checkpoint every 5
UPDATES = 40
FLAGS = ["--env-id", "Pendulum-v1", "--num-steps", "256", "--total-timesteps", str(256 * UPDATES), "--num-minibatches", "4",
         "--update-epochs", "2", "--checkpoint-interval", "5"]  # fmt: skip
# the same for the recurrent script: one env, whose 256-step sequence is the one minibatch
RNN_FLAGS = ["--env-id", "Pendulum-v1", "--num-envs", "1", "--num-steps", "256", "--total-timesteps", str(256 * UPDATES),
             "--num-minibatches", "1", "--update-epochs", "2", "--checkpoint-interval", "5"]  # fmt: skip


def start(flags, cwd, name="ppo_continuous_action"):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(ROOT / f"{name}.py"), *flags]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stopped(proc):
    """Stops `proc` (SIGSTOP) and returns once the kernel says it is stopped: none of its threads writes until it goes on."""
    proc.send_signal(signal.SIGSTOP)
    while open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.01)


def paused_past_a_checkpoint(cwd, proc, min_iteration):
    """Waits (120 s at most) until the run has a checkpoint at `min_iteration` or later and TensorBoard's file on disk
    holds an update after it; returns the checkpoint's path with the run paused (SIGSTOP), so that neither changes
    before the test's signal. Each look is taken paused, and the run goes on (SIGCONT) where it is not there yet: a
    kill then loses updates that were logged, which the resume must hide, however fast or slowly the run goes."""
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        paths = glob.glob(str(cwd / "runs" / "*" / "agent.pt"))
        if paths:
            stopped(proc)
            iteration = torch.load(paths[0], weights_only=True)["iteration"]
            logged = [step for step, _ in read_scalars(os.path.dirname(paths[0]), "charts/SPS")]
            if iteration >= min_iteration and logged and logged[-1] > 256 * iteration:
                return paths[0]
            proc.send_signal(signal.SIGCONT)
        time.sleep(0.2)
    exited = f"; the run exited {proc.returncode}: {proc.stderr.read()[-2000:]}" if proc.poll() is not None else ""
    raise AssertionError(f"no checkpoint at update {min_iteration} or later with an update logged after it" + exited)


def check_logs_are_one_continuous_run(run_dir):
    sps_steps = [step for step, _ in read_scalars(run_dir, "charts/SPS")]
    assert sps_steps == [256 * k for k in range(1, UPDATES + 1)]  # every update once: nothing missing, nothing twice
    lrs = [value for _, value in read_scalars(run_dir, "charts/learning_rate")]
    np.testing.assert_allclose(lrs, [3e-4 * (1 - k / UPDATES) for k in range(UPDATES)], rtol=1e-5)  # G6 goes on where it was


@pytest.mark.long
@pytest.mark.parametrize(
    "name,flags,kill_signal",
    [("ppo_continuous_action", FLAGS, signal.SIGTERM), ("ppo_continuous_action", FLAGS, signal.SIGKILL),
     ("ppo_rnn_continuous_action", RNN_FLAGS, signal.SIGTERM)],
)  # fmt: skip
def test_interrupt_then_resume_continues_the_same_run(tmp_path, name, flags, kill_signal):
    """SIGTERM: the run finishes its step, saves the last finished update and exits 0 saying how to resume. SIGKILL
    (no chance to save): the periodic checkpoint is used, and what was logged after it is hidden on resume."""
    proc = start(flags, tmp_path, name)
    path = paused_past_a_checkpoint(tmp_path, proc, 10)
    proc.send_signal(kill_signal)
    proc.send_signal(signal.SIGCONT)  # (SIGKILL needs none; SIGTERM is handled once the run goes on)
    out, err = proc.communicate(timeout=60)
    if kill_signal == signal.SIGTERM:
        assert proc.returncode == 0, err
        assert f"--resume {os.path.relpath(path, tmp_path)}" in out
    interrupted = torch.load(path, weights_only=True)
    assert 10 <= interrupted["iteration"] < UPDATES
    assert interrupted["global_step"] == 256 * interrupted["iteration"]

    resumed = start(["--resume", path], tmp_path, name)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"resumed {interrupted['run_name']} after update {interrupted['iteration']}" in out
    assert len(glob.glob(str(tmp_path / "runs" / "*"))) == 1  # the same run folder
    check_logs_are_one_continuous_run(os.path.dirname(path))
    final = torch.load(path, weights_only=True)
    assert final["iteration"] == UPDATES and final["global_step"] == 256 * UPDATES


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_resumed_agent_equals_the_checkpoint(name, tmp_path, monkeypatch):
    """Resuming restores the model, optimizer, statistics and counters before training on, and writes on in the
    checkpoint's folder; a finished run has nothing left to resume and is refused."""
    module = load_script(name)
    monkeypatch.chdir(tmp_path)
    flags = {"ppo_continuous_action": dict(env_id="Pendulum-v1", num_steps=64, num_minibatches=2),
             "ppo_atari": dict(num_envs=2, num_steps=32, num_minibatches=2),
             "ppo_rnn": dict(env_id="CartPoleNoVelocity-v1", num_envs=2, num_steps=32, num_minibatches=2),
             "ppo_rnn_continuous_action": dict(env_id="Pendulum-v1", num_envs=2, num_steps=32, num_minibatches=2),
             "ppo": dict(env_id="CartPole-v1", num_envs=2, num_steps=32, num_minibatches=2),
             "ppo_masked": dict(env_id="Knapsack-v1", num_envs=2, num_steps=32, num_minibatches=2),
             }[name]  # fmt: skip
    steps = flags["num_steps"] * flags.get("num_envs", 1) * 2
    module.train(module.Args(total_timesteps=steps, update_epochs=1, save_model=True, **flags))
    (path,) = glob.glob(str(tmp_path / "runs" / "*" / "agent.pt"))
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["iteration"] == 2 and checkpoint["global_step"] == steps
    with pytest.raises(checkpoints.ArgError, match="drop --seed --total-timesteps"):  # flags are the checkpoint's
        module.train(module.Args(resume=path, seed=2, total_timesteps=12345))
    with pytest.raises(checkpoints.ArgError, match=f"finished all its 2 updates \\(step {steps}\\); .* --eval-checkpoint"):
        module.train(module.Args(resume=path))

    checkpoint["args"]["total_timesteps"] = steps * 3 // 2  # the same run with one update still to do
    longer = tmp_path / "longer" / checkpoint["run_name"]  # a copy of the run's folder, elsewhere
    longer.mkdir(parents=True)
    torch.save(checkpoint, longer / "agent.pt")
    restored = {}

    def restore_and_look(checkpoint, agent, optimizer, envs, rank, args):
        last_update = restore(checkpoint, agent, optimizer, envs, rank, args)
        model = {k: v.clone() for k, v in agent.state_dict().items()}
        restored.update(model=model, adam_steps=adam_steps(optimizer.state_dict()))
        return last_update

    restore = module.restore
    monkeypatch.setattr(module, "restore", restore_and_look)
    resumed = module.train(module.Args(resume=str(longer / "agent.pt")))
    assert resumed["run_name"] == longer.name and glob.glob(str(longer / "events*"))  # wrote on in the copy
    assert len(glob.glob(str(tmp_path / "runs" / "*"))) == 1
    for key, value in restored["model"].items():
        torch.testing.assert_close(value, checkpoint["model"][key], msg=key)
    assert restored["adam_steps"] == adam_steps(checkpoint["optimizer"]) and restored["adam_steps"][0] > 0
    assert torch.load(longer / "agent.pt", weights_only=True)["iteration"] == 3  # its last update, saved


def adam_steps(optimizer_state):
    """The step count of each parameter's Adam state, read now (training goes on updating the tensors in place)."""
    return [float(state["step"]) for state in optimizer_state["state"].values()]


@pytest.mark.long
@pytest.mark.parametrize("name", SCRIPTS)
def test_save_model_then_evaluate(tmp_path, name):
    flags, episodes = SAVE_THEN_EVALUATE[name]
    result = run_script(name, *flags, "--save-model", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (checkpoint_path,) = glob.glob(str(tmp_path / "runs" / "*" / "agent.pt"))
    obs_rms = torch.load(checkpoint_path, weights_only=True)["env_stats"]["obs_rms"]
    if continuous(name):
        assert obs_rms["count"] > 1000  # the normalization statistics travel with the agent
    else:
        assert obs_rms is None  # frames and CartPole's observations are not normalized
    evaluation = run_script(name, "--eval-checkpoint", checkpoint_path, "--eval-episodes", str(episodes), cwd=tmp_path)
    assert evaluation.returncode == 0, evaluation.stderr
    assert "mean return" in evaluation.stdout and f"over {episodes} episodes" in evaluation.stdout


def scalars(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"] if tag != "charts/SPS"}


@pytest.mark.slow
def test_same_seed_same_logs(tmp_path, monkeypatch):
    logs = []
    for attempt in ("a", "b"):
        (tmp_path / attempt).mkdir()
        monkeypatch.chdir(tmp_path / attempt)
        args = cont.Args(env_id="Pendulum-v1", num_steps=128, total_timesteps=512, num_minibatches=4, update_epochs=2)
        cont.train(args)
        (run_dir,) = glob.glob("runs/*")
        logs.append(scalars(run_dir))
    assert logs[0].keys() == logs[1].keys() and "losses/approx_kl" in logs[0]
    assert logs[0] == logs[1]  # every scalar but the wall-clock SPS, to the last bit


class NaNRewardAfter(gym.Wrapper):
    """A reward that turns NaN after 700 steps, as a diverging simulator's would."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, (np.nan if self.steps > 700 else reward), terminated, truncated, info


gym.register("NaNRewardPendulum-v1", entry_point=lambda **kw: NaNRewardAfter(gym.make("Pendulum-v1", **kw)))


@pytest.mark.slow
def test_nan_guard_stops_before_writing_a_bad_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = cont.Args(env_id="NaNRewardPendulum-v1", num_steps=128, total_timesteps=2048, num_minibatches=2,
                     update_epochs=1, checkpoint_interval=1)  # fmt: skip
    with pytest.raises(ppo_run.NonFiniteError) as error:
        cont.train(args)
    (path,) = glob.glob("runs/*/agent.pt")
    # steps 1-640 fill updates 1-5; update 6 sees the first NaN reward (step 701)
    assert "in update 6 (step 768)" in str(error.value) and path in str(error.value)
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["iteration"] == 5
    assert all(torch.isfinite(v).all() for v in checkpoint["model"].values())


@pytest.mark.slow
def test_foreign_checkpoint_is_refused(tmp_path):
    foreign = tmp_path / "foreign.pt"
    torch.save({"model": {}}, foreign)
    with pytest.raises(checkpoints.ArgError, match="--resume .* was not written by ppo_continuous_action.py"):
        cont.train(cont.Args(resume=str(foreign)))
    other_script = tmp_path / "other.pt"
    torch.save({key: None for key in checkpoints.CHECKPOINT_KEYS} | {"script": "ppo_atari.py"}, other_script)
    with pytest.raises(checkpoints.ArgError, match="--resume .* was written by ppo_atari.py; load it with that script"):
        cont.train(cont.Args(resume=str(other_script)))
    truncated = tmp_path / "truncated.pt"
    torch.save({"weights": torch.zeros(1000)}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:200])
    with pytest.raises(checkpoints.ArgError, match="not a readable checkpoint"):
        cont.train(cont.Args(resume=str(truncated)))


# ---------------------------------------------------------------------------------------------------------------------
# what a stop saves, how it is written, and what stops


@pytest.mark.slow
def test_stop_saves_the_last_finished_update_as_it_was(tmp_path, monkeypatch):
    """A stop in the middle of rollout 3 saves update 2 exactly as the uninterrupted run had it, and resuming either
    checkpoint is then the same run: long_run_helpers' harness, on the CPU (test_gpu.py runs it on CUDA)."""
    stopped, _ = stop_mid_rollout_then_resume(cont, tmp_path, monkeypatch, cuda=False)
    assert stopped["env_stats"]["obs_rms"]["count"] > 128  # the statistics compared are those of 128 steps at least


def test_checkpoints_reach_the_disk_before_and_after_the_rename(tmp_path, monkeypatch):
    """Durable: the new file is flushed to disk (fsync) before it replaces the old one, and the folder after, so a power
    cut leaves the old checkpoint or the new one."""
    calls = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))) or fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append(("replace", str(a), str(b))) or replace(a, b))
    path = str(tmp_path / "agent.pt")
    checkpoints.save_checkpoint(path, {"model": {"w": torch.ones(3)}})
    assert calls == [("fsync", path + ".tmp"), ("replace", path + ".tmp", path), ("fsync", str(tmp_path))]
    assert torch.equal(torch.load(path, weights_only=True)["model"]["w"], torch.ones(3))
    assert not os.path.exists(path + ".tmp")


@pytest.mark.slow
def test_checkpoint_of_another_version_is_refused_naming_the_flag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cont.train(cont.Args(env_id="Pendulum-v1", num_steps=64, total_timesteps=64, num_minibatches=2, save_model=True))
    (path,) = glob.glob("runs/*/agent.pt")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["args"]["reward_shaping"] = True  # a flag of a later version of the script
    torch.save(checkpoint, "later.pt")
    for flag in ("--resume", "--eval-checkpoint"):
        result = run_script("ppo_continuous_action", flag, "later.pt", cwd=tmp_path)
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert (
            result.stderr.startswith(f"error: {flag} later.pt was written by another version")
            and "--reward-shaping" in result.stderr
        )


def read_until(proc, text, timeout=60):
    """Reads proc's stdout until a line holds `text`; fails after `timeout` seconds."""
    import selectors

    selector, deadline = selectors.DefaultSelector(), time.time() + timeout
    selector.register(proc.stdout, selectors.EVENT_READ)
    while time.time() < deadline:
        if selector.select(timeout=deadline - time.time()):
            line = proc.stdout.readline()
            if text in line:
                return
            assert line, f"the process ended without printing {text!r}"
    raise AssertionError(f"no {text!r} within {timeout} s")


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal,returncode", [(signal.SIGINT, 130), (signal.SIGTERM, -signal.SIGTERM)])
def test_evaluation_stops_at_once_on_a_signal(tmp_path, monkeypatch, stop_signal, returncode):
    monkeypatch.chdir(tmp_path)
    cont.train(cont.Args(env_id="Pendulum-v1", num_steps=64, total_timesteps=64, num_minibatches=2, save_model=True))
    (path,) = glob.glob("runs/*/agent.pt")
    proc = start(["--eval-checkpoint", path, "--eval-episodes", "1000000"], tmp_path)  # hours of episodes
    try:
        read_until(proc, "evaluating")
        time.sleep(0.5)
        proc.send_signal(stop_signal)
        proc.wait(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == returncode


SECOND_CTRL_C = """
import os, signal, sys, time, types
from ppo_utils import command_line
# the handler's clock: the first SIGINT at 100 s, torchrun's copy of it 0.5 s later, the second Ctrl-C 2 s after the first
readings = iter([100.0, 100.5, 102.0])
command_line.time = types.SimpleNamespace(monotonic=lambda: next(readings))
stops = command_line.stop_on_signals()

def sigint(stops_then):
    os.kill(os.getpid(), signal.SIGINT)
    while len(stops) < stops_then:  # until its handler has run (in this thread, between two bytecodes)
        pass

sigint(1)
sigint(2)  # the copy: the same request
print(len(stops), flush=True)
os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C again
time.sleep(30)
print("still running")
"""


@pytest.mark.slow
def test_a_second_ctrl_c_exits_at_once():
    """While training, the first Ctrl-C asks for a checkpoint and a stop; a second one (not torchrun's forwarded copy
    of the first, which comes within a second) exits at once without saving. The handler's clock is stood in for, so
    that the gaps are the ones written here (0.5 s, then 2 s), however slowly the child runs."""
    result = subprocess.run([sys.executable, "-c", SECOND_CTRL_C], cwd=ROOT, capture_output=True, text=True, timeout=20)
    assert result.returncode == 130 and result.stdout == "2\n", result.stderr
    assert "Ctrl-C again to exit without saving" in result.stderr and "second Ctrl-C: exiting" in result.stderr


@pytest.mark.slow
def test_norm_per_env_statistics_are_saved_restored_and_evaluated(tmp_path, monkeypatch):
    """--norm-per-env: the checkpoint holds each env's own M1 and M3 statistics (CleanRL's placement), a resumed run
    gets each env's back, and --eval-checkpoint plays with them; torchrun's ranks are refused (they merge one set)."""
    monkeypatch.chdir(tmp_path)
    args = cont.Args(env_id="Hopper-v5", norm_per_env=True, num_envs=2, num_steps=64, num_minibatches=2, update_epochs=1,
                     total_timesteps=256, save_model=True)  # fmt: skip
    cont.train(args)
    (path,) = glob.glob(str(tmp_path / "runs" / "*" / "agent.pt"))
    checkpoint = torch.load(path, weights_only=True)
    obs_rms, return_rms = checkpoint["env_stats"]["obs_rms"], checkpoint["env_stats"]["return_rms"]
    assert len(obs_rms) == len(return_rms) == 2
    # RunningMeanStd starts at a count of 1e-4; each of an env's 128 steps adds one return, and one observation plus
    # one more (the reset's) at each episode end, and the first reset's
    assert [rms["count"] for rms in return_rms] == pytest.approx([128 + 1e-4] * 2)
    assert all(rms["count"] >= 129 + 1e-4 for rms in obs_rms)
    assert not torch.equal(obs_rms[0]["mean"], obs_rms[1]["mean"])  # each env its own

    checkpoint["args"]["total_timesteps"] = 384  # one update still to do
    copy = tmp_path / "copy" / checkpoint["run_name"]  # the run's folder, copied
    copy.mkdir(parents=True)
    torch.save(checkpoint, copy / "agent.pt")
    restored = restored_env_statistics(cont, monkeypatch)
    cont.train(cont.Args(resume=str(copy / "agent.pt")))
    for key in ("obs_rms", "return_rms"):
        for now, saved in zip(restored[0][key], checkpoint["env_stats"][key], strict=True):
            assert now["count"] == saved["count"] and torch.equal(now["mean"], saved["mean"])

    evaluation = run_script("ppo_continuous_action", "--eval-checkpoint", path, "--eval-episodes", "1", cwd=tmp_path)
    assert evaluation.returncode == 0 and "over 1 episodes" in evaluation.stdout, evaluation.stderr
    with pytest.raises(checkpoints.ArgError, match="--norm-per-env .* torchrun"):
        check_args(cont.Args(norm_per_env=True), world_size=2)


def test_a_run_of_one_step_minibatches_per_env_evaluates(tmp_path, monkeypatch):
    """Two envs of one step each, one minibatch: a legal run (G3 normalizes over its two samples). Evaluation plays one
    env, which would make the minibatch one sample; that check is training's, not evaluation's."""
    monkeypatch.chdir(tmp_path)
    cont.train(cont.Args(env_id="Pendulum-v1", num_envs=2, num_steps=1, num_minibatches=1, total_timesteps=2, compile=False))
    (path,) = glob.glob("runs/*/agent.pt")
    returns = evaluation.evaluate(cont.Args(eval_checkpoint=path, eval_episodes=1), cont.make_envs, cont.Agent, cont.act)
    assert len(returns) == 1 and -2000 < returns[0] < 0  # one whole Pendulum episode: 200 steps of cost in [-16.3, 0]


class TickingSignals(list):
    """stop_signals that move the progress line's clock (`now`, read as ppo_utils.logs's time.time) 1 s at each env
    step (train() reads them once a step, in Run.should_stop), and read as non-empty (a signal came) from step
    `stop_after` + 1 on, if given."""

    def __init__(self, now, stop_after=None):
        super().__init__()
        self.now, self.stop_after, self.steps = now, stop_after, 0

    def __bool__(self):
        self.steps += 1
        self.now[0] += 1.0
        return self.stop_after is not None and self.steps > self.stop_after


@pytest.mark.slow
def test_a_resumed_runs_progress_line_goes_on_from_the_time_its_checkpoint_trained(tmp_path, monkeypatch, capsys):
    """The checkpoint keeps the seconds the run has trained; a resumed session's progress line adds its own to them. The
    run's clock is stood in for: 1 s per env step. By hand: a session stopped in the first step after update 1 (of 64
    steps) keeps 64 s; set by hand to 2 hours, the resumed session's 64 steps end at 2:01:04 (7,264 s kept), not
    0:01:04. A checkpoint written before it kept them (no "elapsed") still resumes, from 0: 0:01:04, 64 s kept."""
    from ppo_utils import logs

    now = [1000.0]
    monkeypatch.setattr(logs, "time", SimpleNamespace(time=lambda: now[0]))
    monkeypatch.chdir(tmp_path)
    args = cont.Args(env_id="Pendulum-v1", num_steps=64, total_timesteps=128, num_minibatches=2, update_epochs=1,
                     checkpoint_interval=1, compile=False)  # fmt: skip
    cont.train(args, TickingSignals(now, stop_after=64))
    (path,) = glob.glob("runs/*/agent.pt")
    stopped = torch.load(path, weights_only=True)
    assert stopped["iteration"] == 1 and stopped["elapsed"] == 64.0
    for elapsed, clock in ((7200.0, "2:01:04"), (None, "0:01:04")):
        checkpoint = dict(stopped)
        if elapsed is None:
            del checkpoint["elapsed"]  # as written before the field was
        else:
            checkpoint["elapsed"] = elapsed
        torch.save(checkpoint, path)
        capsys.readouterr()
        cont.train(cont.Args(resume=path), TickingSignals(now))
        (last,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step 128/128")]
        assert last.split("  ")[2] == clock, last
        assert torch.load(path, weights_only=True)["elapsed"] == (elapsed or 0.0) + 64.0
