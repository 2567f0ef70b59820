"""ppo_atari.py's three vector-env backends (G10) give the same observation layout and dtype, the same SAME_STEP
semantics and the same episode statistics: whole games (all lives) of raw rewards."""

import numpy as np
import pytest
from conftest import load_script, needs
from ppo_utils.distributed import rank_seed

atari = load_script("ppo_atari")
BACKENDS = ["sync", "async", pytest.param("envpool", marks=needs("envpool"))]
LAYOUTS = [
    ({}, (4, 84, 84, 1)),
    ({"frame_stack": 1}, (84, 84, 1)),
    ({"warp_frame": False, "frame_stack": 2}, (2, 210, 160, 3)),
]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("flags,shape", LAYOUTS)
def test_observation_layout_and_dtype(backend, flags, shape):
    envs = atari.make_envs(atari.Args(num_envs=2, vector_env=backend, **flags), "test")
    assert envs.single_observation_space.shape == shape and envs.single_observation_space.dtype == np.uint8
    obs, _ = envs.reset(seed=1)
    assert obs.shape == (2,) + shape and obs.dtype == np.uint8
    obs, *_ = envs.step(np.array([1, 2]))
    assert obs.shape == (2,) + shape and obs.dtype == np.uint8
    envs.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_episode_statistics_are_whole_games_of_raw_rewards(backend):
    """With A3 a lost life ends the agent's episode: Breakout's 5 lives give 5 terminations per reported game, and the
    reported return is the sum of the game's raw rewards. The final observation of each ended episode is reported."""
    envs = atari.make_envs(atari.Args(num_envs=2, vector_env=backend, clip_reward_sign=False), "test")
    envs.reset(seed=1)
    rng = np.random.default_rng(0)
    game_rewards, lives_lost, games = np.zeros(2), np.zeros(2, dtype=int), []
    for _ in range(3000):
        _, reward, terminations, truncations, infos = envs.step(rng.integers(0, 4, size=2))
        game_rewards += reward
        lives_lost += terminations
        dones = terminations | truncations
        if dones.any():
            assert np.array_equal(infos["_final_obs"], dones)
            assert all(infos["final_obs"][i].shape == (4, 84, 84, 1) for i in np.flatnonzero(dones))
        final_info = infos.get("final_info", {})
        for i in np.flatnonzero(final_info.get("_episode", [])):
            games.append(i)
            assert lives_lost[i] == 5
            assert final_info["episode"]["r"][i] == pytest.approx(game_rewards[i])
            assert final_info["episode"]["l"][i] > 5
            game_rewards[i], lives_lost[i] = 0, 0
        if len(games) >= 3:
            break
    assert len(games) >= 3
    envs.close()


def test_async_matches_sync_frame_for_frame():
    runs = []
    for backend in ("sync", "async"):
        envs = atari.make_envs(atari.Args(num_envs=2, vector_env=backend), "test")
        obs, _ = envs.reset(seed=3)
        frames, rng = [obs], np.random.default_rng(0)
        for _ in range(100):
            obs, reward, terminations, truncations, _ = envs.step(rng.integers(0, 4, size=2))
            frames.append(obs)
        runs.append(np.stack(frames))
        envs.close()
    np.testing.assert_array_equal(runs[0], runs[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_life_starts_a_fresh_frame_stack(backend):
    """A6 after A3: the observation that starts a new life (or game) stacks its first frame only, nothing of the life
    before, in every backend (envpool's own stack keeps the lost life's frames; the adapter starts it afresh)."""
    envs = atari.make_envs(atari.Args(num_envs=2, vector_env=backend), "test")
    obs, _ = envs.reset(seed=1)
    assert all(np.array_equal(o[k], o[-1]) for o in obs for k in range(4))
    rng, starts = np.random.default_rng(0), 0
    for _ in range(400):
        obs, _, terminations, truncations, _ = envs.step(rng.integers(0, 4, size=2))
        for i in np.flatnonzero(terminations | truncations):
            assert all(np.array_equal(obs[i][k], obs[i][-1]) for k in range(3)), f"env {i}: frames of the life before"
            starts += 1
        if starts >= 4:
            break
    assert starts >= 4
    envs.close()


def first_frames(backend, seed, steps=60):
    envs = atari.make_envs(atari.Args(num_envs=2, vector_env=backend), "test")
    obs, _ = envs.reset(seed=seed)
    frames = [obs]
    for t in range(steps):
        frames.append(envs.step(np.array([t % 4, (t + 1) % 4]))[0])
    envs.close()
    return np.stack(frames)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_seed_decides_the_episodes(backend):
    """reset(seed=s) gives the same frames for the same s and other frames for another: under torchrun each rank's
    envs, seeded with the rank's seed, play their own episodes (envpool, seeded when made, is made again)."""
    same, other = first_frames(backend, 1), first_frames(backend, rank_seed(1, 1))
    np.testing.assert_array_equal(same, first_frames(backend, 1))
    assert not np.array_equal(same, other)
