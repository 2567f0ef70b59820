"""What the long-run tests share (tests/test_long_runs.py on the CPU, test_gpu.py on CUDA): the short runs that save
and evaluate a model, and the run stopped in the middle of a rollout and resumed, compared with the uninterrupted one.
A helper module, not a test module: no test module imports another."""

import glob
import shutil
import signal

import gymnasium as gym
import numpy as np
import torch

from ppo_utils import run as ppo_run

# a short run that saves its model, then --eval-checkpoint: (training flags, episodes to evaluate); Atari games are long
SAVE_THEN_EVALUATE = {
    "ppo_continuous_action": (["--env-id", "InvertedPendulum-v5", "--num-steps", "512", "--total-timesteps", "1024"], 3),
    "ppo_atari": (["--num-envs", "2", "--total-timesteps", "512"], 1),
    "ppo_rnn": (
        ["--env-id", "CartPoleNoVelocity-v1", "--num-envs", "2", "--num-minibatches", "2", "--total-timesteps", "512"],
        3,
    ),
    "ppo_rnn_continuous_action": (
        ["--env-id", "InvertedPendulum-v5", "--num-envs", "4", "--num-minibatches", "2", "--total-timesteps", "1024"],
        3,
    ),
    "ppo": (["--env-id", "CartPole-v1", "--num-envs", "2", "--num-steps", "128", "--total-timesteps", "512"], 3),
    "ppo_masked": (["--env-id", "Knapsack-v1", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "256"], 3),
}

STOP_REQUESTS = []  # the stop_signals list of the run that the env below interrupts


class StopsMidRollout(gym.Wrapper):
    """Pendulum that asks the run to stop (as a SIGTERM would) at its 150th step: in the third 64-step rollout."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == 150:
            STOP_REQUESTS.append(signal.SIGTERM)
        return self.env.step(action)


gym.register("StopsMidRolloutPendulum-v1", entry_point=lambda **kw: StopsMidRollout(gym.make("Pendulum-v1", **kw)))


class NaNObservationInEnv1(gym.Wrapper):
    """An env whose observation turns NaN once, at its 80th step, in env 1 of a run of --seed 1 (the env reset with
    seed 2: env i gets seed + i), as a diverging simulator's would; every other env, and every other step, as the env it
    wraps. With 2 envs of 32 steps, that step ends at global step 160, in the rollout of update 3."""

    def __init__(self, env):
        super().__init__(env)
        self.steps, self.seed = 0, None

    def reset(self, *, seed=None, options=None):
        self.seed = seed if self.seed is None else self.seed  # the first reset's, by the vector env
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.seed == 2 and self.steps == 80:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info


NAN_OBSERVATION_ENVS = {"continuous": "NaNObservationPendulum-v1", "discrete": "NaNObservationCartPole-v1"}
NAN_OBSERVATION_STEP, NAN_OBSERVATION_UPDATE = 160, 3  # where NaNObservationInEnv1 is met with 2 envs of 32 steps
for wrapped, env_id in zip(("Pendulum-v1", "CartPole-v1"), NAN_OBSERVATION_ENVS.values()):
    gym.register(env_id, entry_point=lambda wrapped=wrapped, **kw: NaNObservationInEnv1(gym.make(wrapped, **kw)))


def assert_same(a, b, where):
    """a and b are equal to the last bit, through nested dicts, lists and tuples of tensors, arrays and numbers."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def stop_mid_rollout_then_resume(cont, tmp_path, monkeypatch, **flags):
    """Four updates of 64 Pendulum steps, run twice in tmp_path: once uninterrupted, once asked to stop in the middle of
    rollout 3. The stopped run must save update 2 exactly as the uninterrupted run had it when update 2 finished
    (parameters, optimizer, counters, and the normalization statistics and RNG states, which the dropped rollout had
    moved on), and resuming either update-2 checkpoint must give the same final model, to the last bit. Returns the
    stopped run's checkpoint and the two resumed runs' results, for the caller's own checks."""
    save = ppo_run.save_checkpoints

    def keep_each(paths, contents):  # agent.pt is replaced at each update; the uninterrupted run's update 2 is needed
        save(paths, contents)
        for path, checkpoint in zip(paths, contents):
            shutil.copy(path, f"{path}.{checkpoint['iteration']}")

    monkeypatch.setattr(ppo_run, "save_checkpoints", keep_each)  # what Run.save writes with
    args = cont.Args(env_id="StopsMidRolloutPendulum-v1", num_steps=64, total_timesteps=64 * 4, num_minibatches=2,
                     update_epochs=1, checkpoint_interval=1, **flags)  # fmt: skip
    for run, stop_signals in (("uninterrupted", []), ("stopped", STOP_REQUESTS)):
        (tmp_path / run).mkdir()
        monkeypatch.chdir(tmp_path / run)
        STOP_REQUESTS.clear()
        cont.train(args, stop_signals)
    assert STOP_REQUESTS  # the stop was asked for
    (stopped_dir,) = glob.glob(str(tmp_path / "stopped" / "runs" / "*"))
    (uninterrupted_dir,) = glob.glob(str(tmp_path / "uninterrupted" / "runs" / "*"))
    assert sorted(glob.glob(f"{stopped_dir}/agent.pt.*")) == [f"{stopped_dir}/agent.pt.{k}" for k in (1, 2)]
    assert sorted(glob.glob(f"{uninterrupted_dir}/agent.pt.*")) == [f"{uninterrupted_dir}/agent.pt.{k}" for k in range(1, 5)]
    paths = {"stopped": f"{stopped_dir}/agent.pt", "uninterrupted": f"{uninterrupted_dir}/agent.pt.2"}
    stopped, uninterrupted = (torch.load(paths[run], weights_only=True) for run in ("stopped", "uninterrupted"))
    assert stopped["iteration"] == 2
    for key in ("model", "optimizer", "env_stats", "rng", "iteration", "global_step", "kl_beta"):
        assert_same(stopped[key], uninterrupted[key], key)

    resumed = []
    for run in ("stopped", "uninterrupted"):
        (tmp_path / f"{run}-resumed").mkdir()
        monkeypatch.chdir(tmp_path / f"{run}-resumed")
        resumed.append(cont.train(cont.Args(resume=paths[run])))  # with the checkpoint's flags
    assert_same(resumed[0]["agent"].state_dict(), resumed[1]["agent"].state_dict(), "model after update 4")
    return stopped, resumed
