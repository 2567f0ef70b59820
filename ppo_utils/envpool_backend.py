"""G10's envpool backend: envpool's C++ threads run the tasks (Atari games with A1-A7, set by the Atari scripts'
make_envs from their flags; MuJoCo's v5 tasks for the continuous scripts; the tasks with an action mask for
ppo_masked.py) behind the interface of gymnasium's vector envs, with the few semantics it needs to match them
(SAME_STEP autoreset, final observation, episode statistics, A6's fresh stack after a lost life, seeding). One base
class, EnvpoolPool, does all of that; each task family's class says how its pool is made and what differs."""

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode


class EnvpoolPool(gym.vector.VectorEnv):
    """What every backend shares. envpool's pool (self.pool, made by make_pool(seed)) resets an env on the step after
    its episode ends, ignoring that step's action; here a done env is reset at once by a step of the done envs alone,
    so that, as with gymnasium's SAME_STEP, every step the agent takes is a transition of a running episode, the step
    that ends one returns the next one's first observation, its last one is in infos["final_obs"], and the episode's
    return and length are in infos["final_info"]["episode"], as RecordEpisodeStatistics gives them. Each pool is in
    envpool's sync mode (batch_size = num_envs), which returns the envs in the order they were sent. envpool takes
    seeds when a pool is made, so reset(seed=...) makes the pool again (where makes_again says so); a reset after
    close() makes one as the constructor did, or with the seed it is given. A subclass sets the spaces (set_spaces) and
    may change the observations, the rewards and ends the statistics count, and a new episode's first observations."""

    def start(self, num_envs, seed):
        """seed: the pool's, which is made now; None: made at the first reset."""
        self.num_envs, self.first_seed, self.seed, self.pool = num_envs, seed, seed, None
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.episode_returns = np.zeros(num_envs)
        self.episode_lengths = np.zeros(num_envs, dtype=np.int64)
        if seed is not None:
            self.pool = self.make_pool(seed)

    def set_spaces(self, observation_space, action_space):
        self.single_observation_space, self.single_action_space = observation_space, action_space
        self.observation_space = gym.vector.utils.batch_space(observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(action_space, self.num_envs)

    def makes_again(self, seed):
        """Whether reset(seed=seed) makes the pool again: for a seed other than the pool's."""
        return seed is not None and seed != self.seed

    def observations(self, obs):
        """envpool's observations as this backend gives them (the same, unless a subclass says otherwise)."""
        return obs

    def episode_rewards(self, rewards, info):
        """The rewards the episode statistics add up: the env's, unless a subclass says otherwise."""
        return rewards

    def episode_ends(self, dones, truncations, info):
        """The envs whose episode the statistics report this step: each one whose episode ended, unless a subclass
        says otherwise."""
        return dones

    def new_episodes(self, obs, env_ids):
        """Changes in place the rows env_ids of envpool's observations, which start an episode (nothing, unless a
        subclass says otherwise)."""

    def reset(self, *, seed=None, options=None):
        if self.pool is None or self.makes_again(seed):
            self.close()
            self.seed = self.first_seed if seed is None else seed
            self.pool = self.make_pool(self.seed)
        obs, _ = self.pool.reset()
        self.episode_returns[:], self.episode_lengths[:] = 0, 0
        return self.observations(obs), {}

    def step(self, actions):
        actions = np.asarray(actions, dtype=self.single_action_space.dtype)
        obs, rewards, terminations, truncations, info = self.pool.step(actions)
        self.episode_returns += self.episode_rewards(rewards, info)
        self.episode_lengths += 1
        dones = terminations | truncations
        infos = {}
        if dones.any():
            ended = self.episode_ends(dones, truncations, info)
            infos["final_obs"], infos["_final_obs"] = np.empty(self.num_envs, dtype=object), dones
            infos["final_obs"][:] = env_rows(self.observations(obs), self.num_envs)
            episode = {"r": self.episode_returns.copy(), "l": self.episode_lengths.copy()}
            infos["final_info"] = {"episode": episode, "_episode": ended}
            self.episode_returns[ended], self.episode_lengths[ended] = 0, 0
            ids = np.flatnonzero(dones)
            reset_obs, _, _, _, reset_info = self.pool.step(np.zeros((len(ids),) + actions.shape[1:], actions.dtype), ids)
            obs = with_rows(obs, reset_info["env_id"], reset_obs)  # a copy: the final observations keep theirs
            self.new_episodes(obs, ids)
        return self.observations(obs), rewards, terminations, truncations, infos

    def close(self, **kwargs):
        if self.pool is not None:
            self.pool.close()
            self.pool = None


def env_rows(obs, num_envs):
    """Each env's observation: a row of an array, or a dict of the rows of a dict of arrays."""
    if isinstance(obs, dict):
        return [{key: value[i] for key, value in obs.items()} for i in range(num_envs)]
    return list(obs)


def with_rows(obs, env_ids, new):
    """A copy of obs (an array, or a dict of arrays) with its rows env_ids replaced by new's."""
    if isinstance(obs, dict):
        return {key: with_rows(value, env_ids, new[key]) for key, value in obs.items()}
    obs = obs.copy()
    obs[env_ids] = new
    return obs


class EnvpoolVectorEnv(EnvpoolPool):
    """G10's envpool backend for Atari games. envpool runs the game and A1-A7 in C++ (set by `options`: envpool.make's
    keywords, which the scripts' make_envs take from their flags); as EnvpoolPool emulates SAME_STEP, the frame stack
    (A6) of an env that lost a life starts afresh, as the gymnasium wrappers' does. Frames come as ([stack,] H, W, C),
    and the real game's return (raw rewards, all lives) and length in infos["final_info"]["episode"], as
    RecordEpisodeStatistics gives them. reset(seed=s) seeds env i with s + i."""

    def __init__(self, env_id, **options):
        self.env_id, self.pool_options = env_id, options
        self.stack_num = options["stack_num"]
        self.channels = 1 if options["gray_scale"] else 3
        self.start(options["num_envs"], options["seed"])
        shape = self.pool.observation_space.shape[1:]  # (stack * channels, H, W)
        shape = shape + (self.channels,) if self.stack_num == 1 else (self.stack_num,) + shape + (self.channels,)
        self.set_spaces(gym.spaces.Box(0, 255, shape, np.uint8), self.pool.action_space)

    def make_pool(self, seed):
        """envpool's pool of the game `env_id` names, with its sticky actions and its time limit in agent steps."""
        import envpool

        spec = gym.spec(self.env_id)
        task_id = "".join(word.capitalize() for word in spec.kwargs["game"].split("_")) + "-v5"
        return envpool.make(
            task_id,
            env_type="gymnasium",
            **(self.pool_options | {"seed": seed % 2**31}),  # a C++ int
            repeat_action_probability=spec.kwargs.get("repeat_action_probability", 0.0),
            max_episode_steps=spec.kwargs.get("max_num_frames_per_episode", 108_000) // self.pool_options["frame_skip"],
        )

    def observations(self, obs):
        """(N, stack * C, H, W) -> (N, [stack,] H, W, C), the layout of the gymnasium backends."""
        obs = obs.reshape((len(obs), self.stack_num, self.channels) + obs.shape[-2:]).transpose(0, 1, 3, 4, 2)
        return obs[:, 0] if self.stack_num == 1 else obs

    def episode_rewards(self, rewards, info):
        return info["reward"]  # the raw reward, before A7

    def episode_ends(self, dones, truncations, info):
        return dones & (info["terminated"].astype(bool) | truncations)  # with A3 a lost life is not the end

    def new_episodes(self, obs, env_ids):
        """A6: a new episode's stack holds its first frame only; envpool keeps the lost life's frames in it."""
        stacks = obs.reshape((len(obs), self.stack_num, -1) + obs.shape[-2:])  # a view of obs
        stacks[env_ids] = stacks[env_ids, -1:]


class EnvpoolTasks(EnvpoolPool):
    """G10's envpool backend for ppo_masked.py: one of envpool's tasks with dict observations and an action mask (its
    Jumanji tasks: Knapsack-v1, TSP-v1, JobShop-v0, ...). envpool's step after an episode end returns that episode's
    last observation, whose mask may allow nothing; as EnvpoolPool emulates SAME_STEP the agent never sees it. An int32
    Box action space (a choice per component, from 0) is the MultiDiscrete it means. reset(seed=s) seeds env i with
    s + i."""

    def __init__(self, task_id, num_envs, seed):
        self.task_id = task_id
        self.start(num_envs, seed)
        space = self.pool.action_space
        if isinstance(space, gym.spaces.Box):  # one choice per component, 0 .. high
            space = gym.spaces.MultiDiscrete(space.high.astype(np.int64) + 1)
        self.set_spaces(self.pool.observation_space, space)

    def make_pool(self, seed):
        import envpool

        return envpool.make_gymnasium(self.task_id, num_envs=self.num_envs, seed=seed % 2**31)  # a C++ int


class EnvpoolMujoco(EnvpoolPool):
    """G10's envpool backend for the continuous scripts: one of envpool's MuJoCo tasks (its C++ ports of gymnasium's v5
    tasks, with their defaults: healthy ranges, control cost, reset noise, frame skip, time limit), whose raw
    observations, rewards and episode ends the scripts' vector wrappers (M1-M4, M8) then take as they take gymnasium's.
    `keep`: the observation entries kept (--mask-velocity's positions), None: all. The pool is made at the first reset:
    reset(seed=s) seeds env i with s + i, as gymnasium's vector envs do (no seed: with i), and reset(seed=[s_0, s_1,
    ...]) env i with s_i (the batched script: each agent's envs as its single run seeds them); any seed makes the pool
    again."""

    def __init__(self, env_id, num_envs, keep=None):
        import envpool

        self.env_id, self.keep = env_id, keep
        self.start(num_envs, None)
        spec = envpool.make_spec(env_id)
        space = spec.observation_space
        if keep is not None:
            space = gym.spaces.Box(space.low[keep], space.high[keep], dtype=space.dtype)
        self.set_spaces(space, spec.action_space)

    def make_pool(self, seed):
        import envpool

        seeds = np.arange(self.num_envs) + (seed or 0) if seed is None or np.isscalar(seed) else np.asarray(seed)
        return envpool.make_gymnasium(self.env_id, num_envs=self.num_envs, env_seed=[int(s) % 2**31 for s in seeds])

    def makes_again(self, seed):
        return seed is not None  # the same seed too, or a list of them

    def observations(self, obs):
        return obs if self.keep is None else obs[:, self.keep]
