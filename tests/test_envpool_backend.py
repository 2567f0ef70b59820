"""G10's envpool backend for the Atari games and the masked tasks, frame for frame against envpool stepped by hand (the
MuJoCo tasks' pool has the same check in test_envpool_mujoco.py): env i of the backend's pool against a pool of one
envpool env seeded seed + i, whose step after an episode end is envpool's reset step (the action ignored), which must
never reach the agent. Observations, rewards, terminations, truncations, the ended episodes' last observations, the
episode statistics (the whole game's raw rewards for Atari, counted from the hand-stepped env's own lives and raw
rewards), and seeding on reset. Marked long: a few seconds of envpool's C++ (the default tier's budget is spent)."""

import gymnasium as gym
import numpy as np
import pytest
from conftest import needs

pytestmark = [needs("envpool"), pytest.mark.long]
ATARI = dict(noop_max=30, use_fire_reset=True, episodic_life=True, frame_skip=4, img_height=84, img_width=84,
             gray_scale=True, stack_num=4, reward_clip=True)  # fmt: skip  (ppo_atari.py's defaults)


class HandEnv:
    """One envpool env (a pool of one) stepped by hand: `kind` "atari" (Asterix, whose 50 points a hit A7 clips to 1;
    ppo_atari.py's default flags) or a
    masked task's id. At an episode end the next step is envpool's reset step, whose observation is the new episode's
    first: for Atari, its frame stack (A6) holds that first frame only, as the gymnasium wrappers' does."""

    def __init__(self, kind, seed):
        import envpool

        self.kind = kind
        if kind == "atari":
            self.env = envpool.make("Asterix-v5", env_type="gymnasium", num_envs=1, seed=seed, max_episode_steps=27_000,
                                    repeat_action_probability=0.0, **ATARI)  # AsterixNoFrameskip-v4's
        else:
            self.env = envpool.make_gymnasium(kind, num_envs=1, seed=seed)
        self.first = self.row(self.env.reset()[0])
        self.game_return, self.game_length, self.game_clipped = 0.0, 0, 0.0

    def row(self, obs):
        """The env's observation as the backend gives it: Atari's (stack, H, W) gray frames as (stack, H, W, 1)."""
        return obs[0][..., None] if self.kind == "atari" else {key: value[0] for key, value in obs.items()}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(np.asarray([action], dtype=np.int32))
        obs, reward, terminated, truncated = self.row(obs), reward[0], bool(terminated[0]), bool(truncated[0])
        raw = info["reward"][0] if self.kind == "atari" else reward  # Atari: before A7's sign
        self.game_return, self.game_length = self.game_return + raw, self.game_length + 1
        self.game_clipped += reward
        final, episode = None, None
        if terminated or truncated:
            final = obs
            if self.kind != "atari" or info["lives"][0] == 0 or truncated:  # Atari: the game, not a life (A3)
                episode = (self.game_return, self.game_length, self.game_clipped)
                self.game_return, self.game_length, self.game_clipped = 0.0, 0, 0.0
            obs, reset_reward, *ends, _ = self.env.step(np.zeros((1,) + np.shape(action), np.int32))
            assert reset_reward[0] == 0 and not any(end[0] for end in ends)  # envpool's reset step
            obs = self.row(obs)
            if self.kind == "atari":
                obs = np.broadcast_to(obs[-1:], obs.shape)
        return obs, reward, terminated, truncated, final, episode


def same(got, expected):
    if isinstance(expected, dict):
        assert sorted(got) == sorted(expected)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
    else:
        np.testing.assert_array_equal(got, expected)


def backend(kind, num_envs, seed):
    from ppo_utils.envpool_backend import EnvpoolTasks, EnvpoolVectorEnv

    if kind == "atari":
        import ale_py

        gym.register_envs(ale_py)  # the backend reads the game from gymnasium's spec of the id
        return EnvpoolVectorEnv("AsterixNoFrameskip-v4", num_envs=num_envs, seed=seed, **ATARI)
    return EnvpoolTasks(kind, num_envs=num_envs, seed=seed)


def env_row(obs, i):
    return {key: value[i] for key, value in obs.items()} if isinstance(obs, dict) else obs[i]


@pytest.mark.parametrize("kind,steps,games", [("atari", 250, 1), ("Knapsack-v1", 100, 10), ("JobShop-v0", 100, 10)])
def test_each_env_is_the_one_stepped_by_hand(kind, steps, games):
    """SAME_STEP as gymnasium's vector envs give it, env by env, with uniformly random actions of the action space
    (invalid ones end a masked task's episode): env i is seeded seed + i; each step returns the hand-stepped env's
    observation (a new episode's first where one ended), reward and ends; an ended episode's last observation is in
    infos["final_obs"] and, at the end of a game (all of Atari's lives), its return and length in
    infos["final_info"]["episode"]. Then reset(seed=9), another seed: envs seeded 9 + i, from their first step."""
    ours, rng, reported, ends, raw_differs = backend(kind, 2, 5), np.random.default_rng(0), 0, 0, 0
    space = ours.single_action_space
    nvec = np.broadcast_to(np.asarray(getattr(space, "nvec", getattr(space, "n", None))), (2,) + space.shape)
    try:
        for seed in (5, 9):
            hand = [HandEnv(kind, seed + i) for i in range(2)]
            obs, _ = ours.reset(seed=seed)
            for i in range(2):
                same(env_row(obs, i), hand[i].first)
            for _ in range(steps):
                actions = rng.integers(0, nvec)
                obs, rewards, terminations, truncations, infos = ours.step(actions)
                reported_now = infos.get("final_info", {}).get("_episode", np.zeros(2, bool))
                for i, env in enumerate(hand):
                    expected_obs, reward, terminated, truncated, final, episode = env.step(actions[i])
                    same(env_row(obs, i), expected_obs)
                    assert (rewards[i], terminations[i], truncations[i]) == (reward, terminated, truncated)
                    assert ("final_obs" in infos and infos["_final_obs"][i]) == (final is not None)
                    if final is not None:
                        same(infos["final_obs"][i], final)
                        ends += 1
                    assert bool(reported_now[i]) == (episode is not None)
                    if episode is not None:
                        assert infos["final_info"]["episode"]["r"][i] == pytest.approx(episode[0], rel=1e-6)
                        assert infos["final_info"]["episode"]["l"][i] == episode[1]
                        reported, raw_differs = reported + 1, raw_differs + (episode[0] != episode[2])
    finally:
        ours.close()
    assert reported >= games and ends > reported * (kind == "atari")  # Atari: lives end before the game does
    assert raw_differs >= (kind == "atari")  # a game whose raw return is not A7's, so that the check tells them apart
