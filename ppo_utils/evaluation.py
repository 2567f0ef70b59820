"""--eval-checkpoint: the saved agent plays its env, as the flags that trained it made it, through the script's own
make_envs, Agent and act. It decides no PPO detail."""

import os
import time
from dataclasses import replace

import numpy as np
import torch

from .checkpoints import check_restorable, checked_saved_flags, load_checkpoint, new_run_folder
from .contract import declared
from .env_statistics import env_statistics, set_env_statistics
from .flag_checks import ArgError, check_flags, run_name_part
from .logs import finished_episodes
from .mujoco_log import keep_mujoco_log
from .run import ObservationError, nonfinite_envs


def evaluate(args, make_envs, Agent, act):
    """--eval-checkpoint: the saved agent plays --eval-episodes episodes in one env made with the flags that trained it,
    each step the script's act() (its actions sampled as in training, a recurrent agent's state carried), the env
    statistics frozen at their saved values; videos and the seed come from `args`. Prints and returns the episodic
    returns. The env is the checkpoint's: an --env-id that differs from it is refused, unless it is the
    script's default, which cannot be told from no --env-id at all (tyro fills it in) and is therefore let through."""
    check_flags(args)  # --eval-episodes, --seed; the training flags are the checkpoint's, checked below
    checkpoint = load_checkpoint(args.eval_checkpoint, "--eval-checkpoint", args)
    env_id = checkpoint["args"]["env_id"]
    if args.env_id not in (env_id, type(args)().env_id):
        raise ArgError(
            f"--env-id {args.env_id} is not the env of --eval-checkpoint {args.eval_checkpoint}, which was trained on "
            f"{env_id}; drop --env-id (the checkpoint's env is played) or pass --env-id {env_id}"
        )
    env_id = env_as_trained(type(args), checkpoint["args"])  # what the agent sees of it: velocities hidden, say
    print(f"evaluating {args.eval_checkpoint} on {env_id} over {args.eval_episodes} episodes", flush=True)
    one_env = type(args).eval_flags  # the script's flags for one env
    train_args = replace(type(args)(**checkpoint["args"]), **one_env, capture_video=args.capture_video, seed=args.seed)
    checked_saved_flags(train_args, "--eval-checkpoint", args.eval_checkpoint)
    torch.manual_seed(args.seed)
    name = f"{run_name_part(train_args.env_id)}__{args.exp_name}-eval__{args.seed}__{int(time.time())}"
    video_folder = os.path.join(new_run_folder(name), "videos") if args.capture_video else None  # runs/<name>/videos
    envs = make_envs(train_args, video_folder)
    keep_mujoco_log(os.path.dirname(video_folder) if video_folder else None)  # an evaluation's folder is its videos'
    agent = Agent(envs, train_args)
    check_restorable(checkpoint, "--eval-checkpoint", args.eval_checkpoint, agent, None, env_statistics(envs), False)
    agent.load_state_dict(checkpoint["model"])
    set_env_statistics(envs, checkpoint["env_stats"], frozen=True)

    episodic_returns, steps = [], 0
    next_obs, _ = envs.reset(seed=args.seed)
    next_done, state = torch.zeros(1), None  # no state yet: a recurrent script's act() starts it (B3)
    while len(episodic_returns) < args.eval_episodes:
        bad, kind = nonfinite_envs(next_obs, envs)  # a NaN the agent would be given: its actions would be NaN, or raise
        if bad:
            envs.close()
            raise ObservationError(f"{env_id} returned a {kind} observation at step {steps} of the evaluation, which stopped "
                                   "there; fix the env, or evaluate on another --seed")  # fmt: skip
        action, state = act(agent, envs, train_args, next_obs, next_done, state)
        next_obs, _, terminations, truncations, infos = envs.step(action)
        steps += 1
        next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32)
        episodic_returns += [episodic_return for _, episodic_return in finished_episodes(infos)]
    envs.close()
    keep_mujoco_log(None)
    mean, std = np.mean(episodic_returns), np.std(episodic_returns)
    episodes = len(episodic_returns)
    print(f"eval {args.eval_checkpoint} on {env_id}: mean return {mean:.1f} +- {std:.1f} over {episodes} episodes")
    return episodic_returns


def env_as_trained(Args, saved):
    """The env a checkpoint's agent was trained on, as its flags (`saved`, of the script's `Args`) made it: its id, and
    those of its Args' `observation_flags` that are not the script's default (their wrappers change what the agent
    observes of its env, not how it is scaled: its return is one on that env, not on the plain one), as they are typed
    ("Pendulum-v1 with --mask-velocity (velocities hidden)")."""
    defaults, named = Args(), []
    for name, meaning in declared(Args, "observation_flags").items():
        if name not in saved or saved[name] == getattr(defaults, name):
            continue
        flag, value = "--" + name.replace("_", "-"), saved[name]
        flag = (flag if value else "--no-" + flag[2:]) if isinstance(value, bool) else f"{flag} {value}"
        named.append(f"{flag} ({meaning})" if meaning else flag)
    return " with ".join([saved["env_id"], ", ".join(named)] if named else [saved["env_id"]])
