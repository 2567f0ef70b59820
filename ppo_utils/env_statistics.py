"""The running statistics of M1's and M3's normalization wrappers (obs_rms, return_rms), read from the envs and written
back: what a checkpoint keeps (checkpoints.py, seeds.py), and what torchrun's ranks average (distributed.py). They are
kept either by one vector wrapper for all envs, or, where each env normalizes by itself, by each env's gymnasium
wrapper. It decides no PPO detail."""

import gymnasium as gym
import torch


def statistics_holders(envs, key):
    """(holders, per_env): the wrappers holding the running statistics `key` (M1: "obs_rms", M3: "return_rms"), either
    the one vector wrapper that has them, or, where each env normalizes by itself (per_env True), each env's gymnasium
    wrapper in env order (the envs of a SyncVectorEnv, as make_env wrapped them)."""
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
    normalized observation means nothing without them. None where the env has no such wrapper; where each env
    normalizes by itself, a list of them, one per env."""
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
    """Restores env_statistics(); frozen: they stop updating (for evaluation). Where each env normalizes by itself, env
    i takes the statistics of env i (an evaluation's single env those of env 0)."""
    for key in ("obs_rms", "return_rms"):
        if stats.get(key) is None:
            continue
        saved = stats[key] if isinstance(stats[key], list) else [stats[key]]
        for holder, entry in zip(statistics_holders(envs, key)[0], saved):
            rms = getattr(holder, key)
            rms.mean, rms.var, rms.count = entry["mean"].numpy(), entry["var"].numpy(), entry["count"]
            holder.update_running_mean = not frozen
