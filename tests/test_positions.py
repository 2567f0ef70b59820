"""--mask-velocity (every continuous script): the entries POSITIONS keeps are the task's positions, found here from the
simulator itself: set the same joint positions with two different joint velocities, and a position entry of the
observation stays while a velocity entry moves."""

import gymnasium as gym
import numpy as np
import pytest
from conftest import SCRIPTS, load_script

cont = load_script("ppo_continuous_action")
# each continuous script writes its own table (each file stands alone); ppo_continuous_action_seeds.py takes its
# parent's make_env, and with it the parent's table
CONTINUOUS = [name for name in SCRIPTS if hasattr(load_script(name), "POSITIONS")]
MUJOCO_TASKS = sorted({env_id for name in CONTINUOUS for env_id in load_script(name).POSITIONS} - {"Pendulum-v1"})
# observation entries that no velocity moves and that are no positions either, placed from gymnasium's v5 docs (after
# the positions and the velocities): Ant's external contact forces (13 bodies x 6); Humanoid's body inertias (13 x 10),
# then, after the body velocities (13 x 6), its actuator forces (17) and contact forces (13 x 6); InvertedDoublePendulum's
# constraint force (1)
HUMANOID = [*range(45, 45 + 130), *range(45 + 130 + 78, 348)]
NOT_POSITIONS = {"Ant-v5": range(27, 105), "Humanoid-v5": HUMANOID, "HumanoidStandup-v5": HUMANOID,
                 "InvertedDoublePendulum-v5": [8]}  # fmt: skip


def observations_at_two_velocities(env_id):
    """The task's observations of one set of joint positions with two different sets of joint velocities."""
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    qpos = env.init_qpos + rng.uniform(-0.1, 0.1, env.model.nq)
    observations = []
    for _ in range(2):
        env.set_state(qpos, rng.normal(size=env.model.nv))
        observations.append(env._get_obs())
    return observations


@pytest.mark.parametrize("env_id", MUJOCO_TASKS)
def test_each_scripts_kept_entries_are_those_no_velocity_moves(env_id):
    first, second = observations_at_two_velocities(env_id)
    moved = set(np.flatnonzero(first != second).tolist())
    still = set(range(len(first))) - moved
    for name in CONTINUOUS:
        positions = load_script(name).POSITIONS
        assert env_id in positions, f"{name} has no positions for {env_id}"
        kept = set(positions[env_id])
        assert not kept & moved, f"{name}, {env_id}: kept entries that a velocity moves: {sorted(kept & moved)}"
        assert still - kept == set(NOT_POSITIONS.get(env_id, [])), f"{name}, {env_id}: left out are not just the forces"


@pytest.mark.parametrize("name", CONTINUOUS)
def test_pendulum_keeps_the_angle_and_drops_the_angular_velocity(name):
    script = load_script(name)
    env = script.make_env(script.Args(env_id="Pendulum-v1", mask_velocity=True), 0, None)()
    obs, _ = env.reset(seed=3)
    theta = env.unwrapped.state[0]
    np.testing.assert_allclose(obs, [np.cos(theta), np.sin(theta)], rtol=1e-6)
    assert env.observation_space.shape == (2,)


def test_masked_env_sees_the_full_envs_positions_step_by_step():
    """The same task, seed and actions with and without the mask: the masked observations are the full ones' kept
    entries, and the rewards and episode ends are the same."""
    full, masked = (cont.make_env(cont.Args(env_id="Hopper-v5", mask_velocity=m), 0, None)() for m in (False, True))
    obs_full, _ = full.reset(seed=5)
    obs_masked, _ = masked.reset(seed=5)
    assert masked.observation_space.shape == (5,) and full.observation_space.shape == (11,)
    rng = np.random.default_rng(5)
    for _ in range(50):
        np.testing.assert_array_equal(obs_masked, obs_full[:5])
        action = rng.uniform(-1, 1, 3).astype(np.float32)
        obs_full, reward_full, term_full, trunc_full, _ = full.step(action)
        obs_masked, reward_masked, term_masked, trunc_masked, _ = masked.step(action)
        assert (reward_full, term_full, trunc_full) == (reward_masked, term_masked, trunc_masked)
