"""The env-side details that the scripts' flags select but that no maintained library implements as the scripts need
them, kept here so that each script stays one readable algorithm:

- `NormalizeObservation`: M1 and M2 (ppo_continuous_action.py), as the reference's VecNormalize does them under
  SAME_STEP autoreset, final observation included.
- `env_statistics`, `set_env_statistics`: the M1/M3 running statistics that checkpoints save and restore (kept by the
  vector wrappers, or with --norm-per-env by each env's).
- `EnvpoolVectorEnv`: G10's envpool backend for the Atari scripts, with A1-A7 set from the same flags and the few
  semantics it needs to match the gymnasium backends (autoreset, final observation, episode statistics, A6's fresh
  stack after a lost life, seeding).
- `finished_episodes`: the episodes that ended in a step, from the statistics of RecordEpisodeStatistics.
- `cartpole_no_velocity`: CartPoleNoVelocity-v1, the small task that needs memory, which ppo_rnn.py registers.
Importing this module registers nothing and starts nothing.
"""

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.utils import RunningMeanStd


class NormalizeObservation(gym.vector.VectorWrapper):
    """M1 and M2 as the reference's VecNormalize does them: one running mean/variance shared by all envs, updated with
    each batch of observations the agent sees, then clipping. gymnasium's own vector NormalizeObservation refuses the
    SAME_STEP autoreset used here, and would leave infos["final_obs"] unnormalized: this one normalizes it with the
    same statistics (without counting it, as the reference never sees it), so that B1 bootstraps from what the value
    network was trained on."""

    def __init__(self, env: gym.vector.VectorEnv, clip: float, epsilon: float = 1e-8):
        super().__init__(env)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, env.single_observation_space.shape, np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, env.num_envs)
        self.obs_rms = RunningMeanStd(shape=env.single_observation_space.shape)
        self.clip, self.epsilon, self.update_running_mean = clip, epsilon, True

    def normalize(self, obs):
        obs = (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)
        return (np.clip(obs, -self.clip, self.clip) if self.clip > 0 else obs).astype(np.float32)  # M2

    def reset(self, **kwargs):
        obs, infos = self.env.reset(**kwargs)
        if self.update_running_mean:
            self.obs_rms.update(obs)
        return self.normalize(obs), infos

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        if self.update_running_mean:
            self.obs_rms.update(obs)
        if "final_obs" in infos:
            final_obs = infos["final_obs"].copy()
            for i in np.flatnonzero(infos["_final_obs"]):
                final_obs[i] = self.normalize(final_obs[i])
            infos["final_obs"] = final_obs
        return self.normalize(obs), rewards, terminations, truncations, infos


def statistics_holders(envs, key):
    """(holders, per_env): the wrappers holding the running statistics `key` (M1: "obs_rms", M3: "return_rms"), either
    the one vector wrapper that has them, or, with --norm-per-env (per_env True), each env's gymnasium wrapper in env
    order (the envs of a SyncVectorEnv, as make_env wrapped them)."""
    while isinstance(envs, gym.vector.VectorWrapper):
        if hasattr(envs, key):
            return [envs], False
        envs = envs.env
    holders = []
    for env in envs.envs if isinstance(envs, gym.vector.SyncVectorEnv) else []:
        while isinstance(env, gym.Wrapper) and key not in vars(env):
            env = env.env
        holders += [env] if key in vars(env) else []
    return holders, True


def env_statistics(envs):
    """The running statistics of the normalization wrappers (M1: obs_rms, M3: return_rms), saved with the agent: a
    normalized observation means nothing without them. None where the env has no such wrapper; with --norm-per-env a
    list of them, one per env."""
    stats = {}
    for key in ("obs_rms", "return_rms"):
        holders, per_env = statistics_holders(envs, key)
        copies = [  # copied: the wrappers go on updating their own
            {"mean": torch.tensor(rms.mean), "var": torch.tensor(rms.var), "count": float(rms.count)}
            for rms in (getattr(holder, key) for holder in holders)
        ]
        stats[key] = (copies if per_env else copies[0]) if copies else None
    return stats


def set_env_statistics(envs, stats, frozen=False):
    """Restores env_statistics(); frozen: they stop updating (for evaluation). With --norm-per-env env i takes the
    statistics of env i (an evaluation's single env those of env 0)."""
    for key in ("obs_rms", "return_rms"):
        if stats.get(key) is None:
            continue
        saved = stats[key] if isinstance(stats[key], list) else [stats[key]]
        for holder, entry in zip(statistics_holders(envs, key)[0], saved):
            rms = getattr(holder, key)
            rms.mean, rms.var, rms.count = entry["mean"].numpy(), entry["var"].numpy(), entry["count"]
            holder.update_running_mean = not frozen


def finished_episodes(infos):
    """(env index, return) of each episode that ended in this step: with SAME_STEP autoreset its statistics are in
    infos["final_info"]."""
    final_info = infos.get("final_info", {})
    if "episode" not in final_info:
        return []
    ended = np.flatnonzero(final_info["_episode"])
    return list(zip(ended.tolist(), final_info["episode"]["r"][ended].tolist()))


def cartpole_no_velocity(**kwargs):
    """CartPole-v1 that observes only the cart position and the pole angle, each divided by the bound at which the
    episode terminates (so both lie in [-1, 1] while it runs): the velocities must be inferred from memory."""
    env = gym.make("CartPole-v1", **kwargs)
    bounds = env.observation_space.high[[0, 2]] / 2  # 2.4 and 12 degrees
    space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    return gym.wrappers.TransformObservation(env, lambda obs: (obs[[0, 2]] / bounds).astype(np.float32), space)


class EnvpoolVectorEnv(gym.vector.VectorEnv):
    """G10's envpool backend for Atari games behind the interface of the gymnasium ones. envpool runs the game and
    A1-A7 in C++ (set from the same flags) but autoresets on the step after an episode ends; here a done env is reset
    at once by a step of that env alone, so that, as with SAME_STEP, every step is a transition and the last observation
    is in infos["final_obs"], and the frame stack (A6) of an env that lost a life starts afresh, as the gymnasium
    wrappers' does. Frames come as ([stack,] H, W, C), and the real game's return (raw rewards, all lives) and length in
    infos["final_info"]["episode"], as RecordEpisodeStatistics gives them. reset(seed=s) seeds env i with s + i (envpool
    takes seeds when it is made, so a new seed makes the pool again)."""

    def __init__(self, args):
        self.args, self.seed = args, args.seed
        self.envs = self.make_pool(args.seed)
        self.num_envs, self.frame_stack = args.num_envs, args.frame_stack
        self.channels = 1 if args.warp_frame else 3
        shape = self.envs.observation_space.shape[1:]  # (stack * channels, H, W)
        shape = shape + (self.channels,) if args.frame_stack == 1 else (args.frame_stack,) + shape + (self.channels,)
        self.single_observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = self.envs.action_space
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.episode_returns = np.zeros(self.num_envs)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int64)

    def make_pool(self, seed):
        import envpool

        args, spec = self.args, gym.spec(self.args.env_id)
        task_id = "".join(word.capitalize() for word in spec.kwargs["game"].split("_")) + "-v5"
        return envpool.make(
            task_id,
            env_type="gymnasium",
            num_envs=args.num_envs,
            seed=seed % 2**31,  # a C++ int
            noop_max=args.noop_max,  # A1
            use_fire_reset=args.fire_reset,  # A2
            episodic_life=args.episodic_life,  # A3
            frame_skip=args.frame_skip,  # A4
            img_height=84 if args.warp_frame else 210,  # A5
            img_width=84 if args.warp_frame else 160,
            gray_scale=args.warp_frame,
            stack_num=args.frame_stack,  # A6
            reward_clip=args.clip_reward_sign,  # A7
            repeat_action_probability=spec.kwargs.get("repeat_action_probability", 0.0),
            max_episode_steps=spec.kwargs.get("max_num_frames_per_episode", 108_000) // args.frame_skip,
        )

    def frames(self, obs):
        """(N, stack * C, H, W) -> (N, [stack,] H, W, C), the layout of the gymnasium backends."""
        obs = obs.reshape((len(obs), self.frame_stack, self.channels) + obs.shape[-2:]).transpose(0, 1, 3, 4, 2)
        return obs[:, 0] if self.frame_stack == 1 else obs

    def reset(self, *, seed=None, options=None):
        if seed is not None and seed != self.seed:
            self.envs.close()
            self.envs, self.seed = self.make_pool(seed), seed
        obs, _ = self.envs.reset()
        self.episode_returns[:], self.episode_lengths[:] = 0, 0
        return self.frames(obs), {}

    def step(self, actions):
        obs, rewards, terminations, truncations, info = self.envs.step(actions)
        self.episode_returns += info["reward"]  # the raw reward, before A7
        self.episode_lengths += 1
        dones = terminations | truncations
        infos = {}
        if dones.any():
            game_over = dones & (info["terminated"].astype(bool) | truncations)  # with A3 a lost life is not the end
            infos["final_obs"], infos["_final_obs"] = np.empty(self.num_envs, dtype=object), dones
            infos["final_obs"][:] = list(self.frames(obs))
            episode = {"r": self.episode_returns.copy(), "l": self.episode_lengths.copy()}
            infos["final_info"] = {"episode": episode, "_episode": game_over}
            self.episode_returns[game_over], self.episode_lengths[game_over] = 0, 0
            ids = np.flatnonzero(dones)
            reset_obs, _, _, _, reset_info = self.envs.step(np.zeros(len(ids), dtype=np.int32), ids)
            obs = obs.copy()
            obs[reset_info["env_id"]] = reset_obs
            # A6: a new episode's stack holds its first frame only; envpool keeps the lost life's frames in it
            stacks = obs.reshape((len(obs), self.frame_stack, -1) + obs.shape[-2:])  # a view of obs
            stacks[ids] = stacks[ids, -1:]
        return self.frames(obs), rewards, terminations, truncations, infos

    def close(self, **kwargs):
        self.envs.close()
