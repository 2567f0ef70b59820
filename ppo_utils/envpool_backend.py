"""G10's envpool backend: envpool's C++ threads run the tasks (Atari games with A1-A7, set by the Atari scripts'
make_envs from their flags; MuJoCo's v5 tasks for the continuous scripts; the tasks with an action mask for
ppo_masked.py) behind the interface of gymnasium's vector envs, with the few semantics it needs to match them
(SAME_STEP autoreset, final observation, episode statistics, A6's fresh stack after a lost life, seeding)."""

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode


class EnvpoolPool(gym.vector.VectorEnv):
    """What both backends share: envpool's pool (self.envs, made by make_pool(seed), made again when reset asks for
    another seed), SAME_STEP autoreset as they emulate it, the episode statistics they keep, close()."""

    def start(self, num_envs, seed):
        self.num_envs, self.seed = num_envs, seed
        self.envs = self.make_pool(seed)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.episode_returns = np.zeros(num_envs)
        self.episode_lengths = np.zeros(num_envs, dtype=np.int64)

    def observations(self, obs):
        """envpool's observations as this backend gives them (the same, unless a subclass says otherwise)."""
        return obs

    def reset(self, *, seed=None, options=None):
        if seed is not None and seed != self.seed:
            self.envs.close()
            self.envs, self.seed = self.make_pool(seed), seed
        obs, _ = self.envs.reset()
        self.episode_returns[:], self.episode_lengths[:] = 0, 0
        return self.observations(obs), {}

    def close(self, **kwargs):
        self.envs.close()


class EnvpoolVectorEnv(EnvpoolPool):
    """G10's envpool backend for Atari games behind the interface of the gymnasium ones. envpool runs the game and
    A1-A7 in C++ (set by `options`: envpool.make's keywords, which the scripts' make_envs take from their flags) but
    autoresets on the step after an episode ends; here a done env is reset at once by a step of that env alone, so that,
    as with SAME_STEP, every step is a transition and the last observation is in infos["final_obs"], and the frame stack
    (A6) of an env that lost a life starts afresh, as the gymnasium wrappers' does. Frames come as ([stack,] H, W, C),
    and the real game's return (raw rewards, all lives) and length in infos["final_info"]["episode"], as
    RecordEpisodeStatistics gives them. reset(seed=s) seeds env i with s + i (envpool takes seeds when it is made, so a
    new seed makes the pool again)."""

    def __init__(self, env_id, **options):
        self.env_id, self.pool_options = env_id, options
        self.start(options["num_envs"], options["seed"])
        self.stack_num = options["stack_num"]
        self.channels = 1 if options["gray_scale"] else 3
        shape = self.envs.observation_space.shape[1:]  # (stack * channels, H, W)
        shape = shape + (self.channels,) if self.stack_num == 1 else (self.stack_num,) + shape + (self.channels,)
        self.single_observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = self.envs.action_space
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)

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

    def step(self, actions):
        obs, rewards, terminations, truncations, info = self.envs.step(actions)
        self.episode_returns += info["reward"]  # the raw reward, before A7
        self.episode_lengths += 1
        dones = terminations | truncations
        infos = {}
        if dones.any():
            game_over = dones & (info["terminated"].astype(bool) | truncations)  # with A3 a lost life is not the end
            infos["final_obs"], infos["_final_obs"] = np.empty(self.num_envs, dtype=object), dones
            infos["final_obs"][:] = list(self.observations(obs))
            episode = {"r": self.episode_returns.copy(), "l": self.episode_lengths.copy()}
            infos["final_info"] = {"episode": episode, "_episode": game_over}
            self.episode_returns[game_over], self.episode_lengths[game_over] = 0, 0
            ids = np.flatnonzero(dones)
            reset_obs, _, _, _, reset_info = self.envs.step(np.zeros(len(ids), dtype=np.int32), ids)
            obs = obs.copy()
            obs[reset_info["env_id"]] = reset_obs
            # A6: a new episode's stack holds its first frame only; envpool keeps the lost life's frames in it
            stacks = obs.reshape((len(obs), self.stack_num, -1) + obs.shape[-2:])  # a view of obs
            stacks[ids] = stacks[ids, -1:]
        return self.observations(obs), rewards, terminations, truncations, infos


class EnvpoolTasks(EnvpoolPool):
    """G10's envpool backend for ppo_masked.py: one of envpool's tasks with dict observations and an action mask (its
    Jumanji tasks: Knapsack-v1, TSP-v1, JobShop-v0, ...) behind the interface of a gymnasium vector env with SAME_STEP
    autoreset. envpool resets an env on the step after its episode ends, returning first that episode's last
    observation (whose mask may allow nothing) and ignoring the action it is given; here a done env is reset at once by
    a step of that env alone, so that every step the agent takes is a transition of a running episode, the last
    observation is in infos["final_obs"] and the episode's return and length in infos["final_info"]["episode"], as
    RecordEpisodeStatistics gives them. An int32 Box action space (a choice per component, from 0) is the MultiDiscrete
    it means. reset(seed=s) seeds env i with s + i (envpool takes seeds when it is made, so a new seed makes the pool
    again)."""

    def __init__(self, task_id, num_envs, seed):
        self.task_id = task_id
        self.start(num_envs, seed)
        self.single_observation_space = self.envs.observation_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        space = self.envs.action_space
        if isinstance(space, gym.spaces.Box):  # one choice per component, 0 .. high
            space = gym.spaces.MultiDiscrete(space.high.astype(np.int64) + 1)
        self.single_action_space = space
        self.action_space = gym.vector.utils.batch_space(space, num_envs)

    def make_pool(self, seed):
        import envpool

        return envpool.make_gymnasium(self.task_id, num_envs=self.num_envs, seed=seed % 2**31)  # a C++ int

    def step(self, actions):
        actions = np.asarray(actions, dtype=np.int32)
        obs, rewards, terminations, truncations, _ = self.envs.step(actions)
        self.episode_returns += rewards
        self.episode_lengths += 1
        dones = terminations | truncations
        infos = {}
        if dones.any():
            infos["final_obs"], infos["_final_obs"] = np.empty(self.num_envs, dtype=object), dones
            infos["final_obs"][:] = [{key: value[i] for key, value in obs.items()} for i in range(self.num_envs)]
            episode = {"r": self.episode_returns.copy(), "l": self.episode_lengths.copy()}
            infos["final_info"] = {"episode": episode, "_episode": dones}
            self.episode_returns[dones], self.episode_lengths[dones] = 0, 0
            ids = np.flatnonzero(dones)
            reset_obs, _, _, _, reset_info = self.envs.step(np.zeros((len(ids),) + actions.shape[1:], np.int32), ids)
            obs = {key: value.copy() for key, value in obs.items()}
            for key, value in reset_obs.items():
                obs[key][reset_info["env_id"]] = value
        return obs, rewards, terminations, truncations, infos


class EnvpoolMujoco(gym.vector.VectorEnv):
    """G10's envpool backend for the continuous scripts: one of envpool's MuJoCo tasks (its C++ ports of gymnasium's v5
    tasks, with their defaults: healthy ranges, control cost, reset noise, frame skip, time limit) behind the interface
    of a gymnasium vector env with SAME_STEP autoreset, whose raw observations, rewards and episode ends the scripts'
    vector wrappers (M1-M4, M8) then take as they take gymnasium's. envpool resets an env on the step after its episode
    ends (returning the reset observation and ignoring that step's action); here a done env is reset at once by a step
    of those envs alone, so that every step the agent takes is a transition of a running episode, the last observation
    is in infos["final_obs"] and the episode's return and length in infos["final_info"]["episode"], as
    RecordEpisodeStatistics gives them. `keep`: the observation entries kept (--mask-velocity's positions), None: all.
    reset(seed=s) seeds env i with s + i, as gymnasium's vector envs do, and reset(seed=[s_0, s_1, ...]) env i with s_i
    (the batched script: each agent's envs as its single run seeds them); envpool takes seeds when a pool is made, so a
    seed makes the pool again."""

    def __init__(self, env_id, num_envs, keep=None):
        import envpool

        self.env_id, self.num_envs, self.keep, self.pool = env_id, num_envs, keep, None
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        spec = envpool.make_spec(env_id)
        space = spec.observation_space
        if keep is not None:
            space = gym.spaces.Box(space.low[keep], space.high[keep], dtype=space.dtype)
        self.single_observation_space = space
        self.observation_space = gym.vector.utils.batch_space(space, num_envs)
        self.single_action_space = spec.action_space
        self.action_space = gym.vector.utils.batch_space(spec.action_space, num_envs)
        self.episode_returns = np.zeros(num_envs)
        self.episode_lengths = np.zeros(num_envs, dtype=np.int64)

    def observations(self, obs):
        return obs if self.keep is None else obs[:, self.keep]

    def reset(self, *, seed=None, options=None):
        if seed is not None or self.pool is None:
            import envpool

            seeds = np.arange(self.num_envs) + (seed or 0) if seed is None or np.isscalar(seed) else np.asarray(seed)
            self.close()
            self.pool = envpool.make_gymnasium(
                self.env_id, num_envs=self.num_envs, env_seed=[int(s) % 2**31 for s in seeds]  # C++ ints
            )
        obs, _ = self.pool.reset()
        self.episode_returns[:], self.episode_lengths[:] = 0, 0
        return self.observations(obs), {}

    def step_envs(self, actions, env_ids):
        """Steps the envs env_ids (all, in order, when None) with `actions`; their observations, rewards, terminations
        and truncations in the order of env_ids (a pool returns its envs in the order they finished)."""
        self.pool.send(actions, env_ids)
        obs, rewards, terminations, truncations, info = self.pool.recv()
        order = np.argsort(info["env_id"])
        return obs[order], rewards[order], terminations[order], truncations[order]

    def step(self, actions):
        actions = np.asarray(actions, dtype=self.single_action_space.dtype)
        obs, rewards, terminations, truncations = self.step_envs(actions, None)
        self.episode_returns += rewards
        self.episode_lengths += 1
        dones = terminations | truncations
        obs = self.observations(obs)
        infos = {}
        if dones.any():
            infos["final_obs"], infos["_final_obs"] = np.empty(self.num_envs, dtype=object), dones
            infos["final_obs"][:] = list(obs)
            episode = {"r": self.episode_returns.copy(), "l": self.episode_lengths.copy()}
            infos["final_info"] = {"episode": episode, "_episode": dones}
            self.episode_returns[dones], self.episode_lengths[dones] = 0, 0
            ids = np.flatnonzero(dones)
            reset_obs = self.step_envs(np.zeros((len(ids),) + actions.shape[1:], actions.dtype), ids.astype(np.int32))[0]
            obs = obs.copy()
            obs[ids] = self.observations(reset_obs)  # the action of a reset step is ignored
        return obs, rewards, terminations, truncations, infos

    def close(self, **kwargs):
        if self.pool is not None:
            self.pool.close()
            self.pool = None
