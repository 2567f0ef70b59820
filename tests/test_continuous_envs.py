"""ppo_continuous_action.py's environments: the M1-M4/M8 wrappers against stable-baselines3's VecNormalize (a port of
the reference's), clipping bounds, the stored vs executed actions (M8), the autoreset semantics and truncation
bootstrapping (B1) on tiny envs whose every number is known."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.mujoco.inverted_pendulum_v5 import InvertedPendulumEnv
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize


def wrapper_types(envs):
    types = []
    while isinstance(envs, gym.vector.VectorWrapper):
        types.append(type(envs).__name__)
        envs = envs.env
    return types


DEFAULT_STACK = ["ClipReward", "NormalizeReward", "NormalizeObservation", "ClipAction"]


@pytest.mark.parametrize(
    "flags,removed",
    [
        ({}, None),
        ({"norm_obs": False}, "NormalizeObservation"),
        ({"norm_reward": False}, ("NormalizeReward", "ClipReward")),  # M4 clips only what M3 scaled, as the reference
        ({"clip_reward": 0.0}, "ClipReward"),
        ({"clip_action": False}, "ClipAction"),
    ],
)
def test_each_flag_removes_exactly_its_wrapper(cont, flags, removed):
    envs = cont.make_envs(cont.Args(env_id="Pendulum-v1", num_envs=2, **flags), "test")
    expected = [name for name in DEFAULT_STACK if name not in (removed or ())]
    assert wrapper_types(envs) == expected
    envs.close()


def compare_with_vecnormalize(cont, env_id, steps, check_reward=True, norm_reward=True):
    """Steps our wrapped envs and SB3's VecNormalize over the same 2 seeded envs with the same random actions; returns
    the number of episode ends seen and the lowest reward."""
    ours = cont.make_envs(cont.Args(env_id=env_id, num_envs=2, gamma=0.99, norm_reward=norm_reward), "test")
    ref = VecNormalize(
        DummyVecEnv([lambda: gym.make(env_id)] * 2),
        norm_reward=norm_reward,
        gamma=0.99,
        clip_obs=10.0,
        clip_reward=10.0,
        epsilon=1e-8,
    )
    ref.seed(5)
    obs, _ = ours.reset(seed=5)
    np.testing.assert_allclose(obs, ref.reset(), rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(0)
    act_dim = ours.single_action_space.shape[0]
    episode_ends, lowest_reward = 0, np.inf
    for _ in range(steps):
        action = rng.uniform(-1, 1, size=(2, act_dim)).astype(np.float32)
        obs, reward, terminations, truncations, infos = ours.step(action)
        ref_obs, ref_reward, ref_dones, ref_infos = ref.step(action)
        np.testing.assert_allclose(obs, ref_obs, rtol=1e-4, atol=1e-5)
        if check_reward:
            np.testing.assert_allclose(reward, ref_reward, rtol=1e-4, atol=1e-6)
        lowest_reward = min(lowest_reward, reward.min())
        np.testing.assert_array_equal(terminations | truncations, ref_dones)
        for i in np.flatnonzero(ref_dones):
            np.testing.assert_allclose(infos["final_obs"][i], ref_infos[i]["terminal_observation"], rtol=1e-4, atol=1e-5)
            episode_ends += 1
    ours.close()
    return episode_ends, lowest_reward


def test_observation_normalization_matches_stable_baselines3(cont):
    """M1, M2: one set of statistics shared by 2 envs equals SB3's VecNormalize (a port of the reference's) step by
    step through episode ends (Hopper falls quickly under random actions), the normalized final observations included."""
    assert compare_with_vecnormalize(cont, "Hopper-v5", 300, check_reward=False)[0] >= 4


def test_reward_scaling_matches_stable_baselines3(cont, monkeypatch):
    """M3, M4 equal VecNormalize's across time-limit ends. (At a termination gymnasium's NormalizeReward restarts the
    discounted return before counting the step, the reference after: the statistics differ there; see docs/flags.md.)"""
    monkeypatch.setattr(gym.envs.registration.registry["HalfCheetah-v5"], "max_episode_steps", 40)  # it never terminates
    assert compare_with_vecnormalize(cont, "HalfCheetah-v5", 200)[0] >= 8


def test_without_reward_scaling_nothing_is_clipped(cont):
    """M3 off (the M3 ablation): the rewards are the env's own, as VecNormalize(norm_reward=False) gives them, with
    nothing clipped: Pendulum's rewards reach -16, below M4's bound of 10."""
    episode_ends, lowest_reward = compare_with_vecnormalize(cont, "Pendulum-v1", 250, norm_reward=False)
    assert episode_ends == 2 and lowest_reward < -10


def test_clipping_bounds_hold(cont):
    args = cont.Args(env_id="Hopper-v5", num_envs=2, clip_obs=0.5, clip_reward=0.05)
    envs = cont.make_envs(args, "test")
    envs.reset(seed=0)
    seen_final = 0
    for _ in range(200):
        obs, reward, _, _, infos = envs.step(np.random.uniform(-3, 3, size=(2, 3)))
        assert np.abs(obs).max() <= 0.5 and np.abs(reward).max() <= 0.05
        for i in np.flatnonzero(infos.get("_final_obs", [])):
            assert np.abs(infos["final_obs"][i]).max() <= 0.5
            seen_final += 1
    assert seen_final > 0
    envs.close()


class CounterEnv(gym.Env):
    """obs = [t]; reward 0; records the actions it receives. Terminates at t = 5 if `terminate`, else a TimeLimit of 5
    truncates it there."""

    received = []

    def __init__(self, terminate=False):
        self.observation_space = gym.spaces.Box(-100.0, 100.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.terminate = terminate

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        CounterEnv.received.append(np.array(action, dtype=np.float32).copy())
        self.t += 1
        return np.array([self.t], np.float32), 0.0, self.terminate and self.t == 5, False, {}


gym.register("TestCounterTruncated-v0", entry_point=CounterEnv, max_episode_steps=5, disable_env_checker=True)
gym.register(
    "TestCounterTerminated-v0",
    entry_point=CounterEnv,
    kwargs={"terminate": True},
    max_episode_steps=50,
    disable_env_checker=True,
)


def run_tiny(cont, tmp_path, monkeypatch, env_id, **flags):
    monkeypatch.chdir(tmp_path)
    CounterEnv.received = []
    args = cont.Args(
        env_id=env_id,
        num_envs=1,
        num_steps=12,
        total_timesteps=12,
        num_minibatches=1,
        update_epochs=1,
        learning_rate=0.0,  # the agent after the run is the agent of the rollout
        norm_obs=False,
        norm_reward=False,
        cuda=False,
        **flags,
    )
    return cont.train(args)


@pytest.mark.slow
@pytest.mark.parametrize("bootstrap", [True, False])
def test_truncation_bootstrap_and_autoreset(cont, tmp_path, monkeypatch, bootstrap):
    result = run_tiny(cont, tmp_path, monkeypatch, "TestCounterTruncated-v0", bootstrap_truncated=bootstrap, gamma=0.9)
    rollout, agent = result["rollout"], result["agent"]
    # SAME_STEP autoreset: every stored step is a transition; the reset observation follows the truncating step at once
    np.testing.assert_array_equal(rollout["obs"][:, 0, 0].numpy(), [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1])
    np.testing.assert_array_equal(rollout["dones"][:, 0].numpy(), [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0])
    with torch.no_grad():
        v_final = agent.get_value(torch.tensor([[5.0]])).item()  # the final observation of each episode is [5]
    assert abs(v_final) > 1e-3
    expected = np.zeros(12, np.float32)
    if bootstrap:
        expected[[4, 9]] = 0.9 * v_final
    np.testing.assert_allclose(rollout["rewards"][:, 0].numpy(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_termination_is_never_bootstrapped(cont, tmp_path, monkeypatch):
    result = run_tiny(cont, tmp_path, monkeypatch, "TestCounterTerminated-v0", bootstrap_truncated=True)
    np.testing.assert_array_equal(result["rollout"]["dones"][:, 0].numpy(), [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0])
    assert torch.all(result["rollout"]["rewards"] == 0)


@pytest.mark.parametrize("clip_action", [True, False])
def test_env_gets_clipped_actions_storage_keeps_samples(cont, tmp_path, monkeypatch, clip_action):
    """M8: with log std 1 most samples leave [-1, 1]; the env sees them clipped, the rollout keeps the samples."""
    result = run_tiny(cont, tmp_path, monkeypatch, "TestCounterTruncated-v0", log_std_init=1.0, clip_action=clip_action,
                      compile=False)  # M8 is the env's side: the update's compiled graph is not what this checks
    stored = result["rollout"]["actions"][:, 0, 0].numpy()
    received = np.concatenate(CounterEnv.received)
    assert np.abs(stored).max() > 1.0
    expected = np.clip(stored, -1.0, 1.0) if clip_action else stored
    np.testing.assert_allclose(received, expected, rtol=1e-6)


class UnstablePendulum(InvertedPendulumEnv):
    """InvertedPendulum-v5 whose third step starts from a huge joint velocity: MuJoCo warns ("Nan, Inf or huge value in
    QVEL") and resets its simulation, as it does where a simulation becomes unstable in training."""

    def step(self, action):
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == 3:
            self.data.qvel[:] = 1e20
        return super().step(action)


gym.register("TestUnstablePendulum-v0", entry_point=UnstablePendulum, max_episode_steps=1000)


@pytest.mark.parametrize("vector_env", ["sync", "async"])
def test_mujocos_log_goes_into_the_run_folder(cont, tmp_path, monkeypatch, vector_env):
    """MuJoCo's warnings, which it writes to MUJOCO_LOG.TXT in the working folder, go to the run folder's: nothing is
    written outside it, with the envs in this process or in subprocesses (async)."""
    run_tiny(cont, tmp_path, monkeypatch, "TestUnstablePendulum-v0", vector_env=vector_env, compile=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["runs"]
    (log,) = tmp_path.glob("runs/*/MUJOCO_LOG.TXT")
    assert "Nan, Inf or huge value in QVEL at DOF 0" in log.read_text()


@pytest.mark.slow
def test_async_envs_give_the_same_rollout_as_sync(cont, tmp_path, monkeypatch):
    """G10: AsyncVectorEnv (subprocesses) and SyncVectorEnv collect identical rollouts from the same seed."""
    monkeypatch.chdir(tmp_path)
    rollouts = []
    for vector_env in ("sync", "async"):
        args = cont.Args(
            env_id="Pendulum-v1",
            num_envs=2,
            num_steps=128,
            total_timesteps=256,
            num_minibatches=2,
            update_epochs=1,
            vector_env=vector_env,
            cuda=False,
        )
        rollouts.append(cont.train(args)["rollout"])
    for key in ("obs", "actions", "rewards", "dones"):
        torch.testing.assert_close(rollouts[0][key], rollouts[1][key], msg=key)
