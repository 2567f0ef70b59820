"""The run plumbing of ppo_continuous_action_seeds.py, which trains one agent per seed in one process and makes each an
ordinary run of ppo_continuous_action.py: each agent's flags, what its checkpoint keeps of the process's shared state
(its own random streams, its rows of the M1/M3 statistics), --resume of several checkpoints at once, and each agent's
part of a vector env step's infos. It decides no PPO detail."""

import random
from dataclasses import fields, replace

import torch

from .checkpoints import Update, check_restorable, numpy_state_loaded, numpy_state_saved, resume_flags
from .env_statistics import env_statistics, set_env_statistics
from .flag_checks import ArgError
from .run import NonFiniteError


def common_flags(args, run_args):
    """The flags of `args` that every agent shares: those of `run_args` (the Args of ppo_continuous_action.py) but the
    seed and --resume."""
    return {field.name: getattr(args, field.name) for field in fields(run_args) if field.name not in ("seed", "resume")}


def agent_args(args, run_args, seed, resume=None):
    """One agent's flags as `run_args`, which its checkpoint saves: those of `args`, with its seed and the checkpoint it
    resumes."""
    return run_args(**common_flags(args, run_args), seed=seed, resume=resume)


def resume_agents(args, run_args):
    """--resume A B ...: (args with the flags and seeds of the checkpoints, the checkpoints); without --resume, (args, a
    None per seed). Each run continues with its own flags, as ppo_continuous_action.py --resume does; the runs must have
    the same flags (their seeds apart) and have ended the same update, so that they go on in step."""
    if not args.resume:
        return args, [None] * len(args.seeds)
    if args.seeds != type(args)().seeds:
        raise ArgError("--resume continues each run with its own seed; drop --seeds")
    loaded = [resume_flags(agent_args(args, run_args, run_args().seed, path)) for path in args.resume]
    (first, checkpoint), seeds = loaded[0], [flags.seed for flags, _ in loaded]
    for path, (flags, other) in zip(args.resume[1:], loaded[1:]):
        if replace(flags, seed=first.seed, resume=None) != replace(first, resume=None):
            raise ArgError(f"--resume {path} was trained with other flags than {args.resume[0]}; resume it by itself")
        if other["iteration"] != checkpoint["iteration"]:
            raise ArgError(
                f"--resume {path} ended update {other['iteration']} and {args.resume[0]} update {checkpoint['iteration']}; "
                "resume each by itself with ppo_continuous_action.py --resume"
            )
    if len(set(seeds)) < len(seeds):
        raise ArgError(f"--resume: two of these runs have seed {max(seeds, key=seeds.count)}; resume each once")
    checkpoints = [checkpoint for _, checkpoint in loaded]
    return type(args)(**common_flags(first, run_args), seeds=tuple(seeds), resume=args.resume), checkpoints


def agent_infos(infos, agent, envs_per_agent):
    """The part of a vector env step's infos that belongs to agent `agent`'s envs (each array sliced, dicts recursed)."""
    part = slice(agent * envs_per_agent, (agent + 1) * envs_per_agent)
    return {key: value_part(value, part) for key, value in infos.items()}


def value_part(value, part):
    return {key: value_part(v, part) for key, v in value.items()} if isinstance(value, dict) else value[part]


def agent_state(envs, agent, shufflers, generators, envs_per_agent):
    """What agent `agent`'s checkpoint keeps besides its model and optimizer, in the form of ppo_continuous_action.py's
    (which restores it as the process's RNG states and env statistics): its random streams (numpy's, its shuffles;
    torch's, its action noise) and its M1/M3 statistics (its row of each; where each env normalizes by itself, its envs'
    entries)."""
    rng = {"python": random.getstate(), "numpy": numpy_state_saved(shufflers[agent].get_state())}
    generator = generators[agent]
    if generator.device.type == "cpu":
        rng |= {"torch": generator.get_state(), "cuda": []}
    else:  # on a GPU the agent draws its noise from a CUDA generator, where ppo_continuous_action.py would
        rng |= {"torch": torch.get_rng_state(), "cuda": [generator.get_state()]}
    stats = {}
    for key, value in env_statistics(envs).items():
        if isinstance(value, list):  # each env normalizes by itself: one entry per env
            stats[key] = value[agent * envs_per_agent : (agent + 1) * envs_per_agent]
        elif value is not None:
            stats[key] = {"mean": value["mean"][agent].clone(), "var": value["var"][agent].clone(), "count": value["count"]}
        else:
            stats[key] = None
    return {"rng": rng, "env_stats": stats}


def restore_agents(paths, checkpoints, agents, optimizers, envs, shufflers, generators):
    """--resume: loads each checkpoint's parameters, optimizer and random streams into its agent, and the M1/M3
    statistics of all of them into the envs' rows, once every checkpoint is checked against its agent. Returns each
    agent's Update."""
    for i, (path, checkpoint, agent, optimizer) in enumerate(zip(paths, checkpoints, agents, optimizers)):
        own_stats = agent_state(envs, i, shufflers, generators, envs.num_envs // len(agents))["env_stats"]
        check_restorable(checkpoint, "--resume", path, agent, optimizer, own_stats)
    for checkpoint, agent, optimizer, shuffler, generator in zip(checkpoints, agents, optimizers, shufflers, generators):
        agent.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        shuffler.set_state(numpy_state_loaded(checkpoint["rng"]["numpy"]))
        if generator.device.type == "cpu":
            generator.set_state(checkpoint["rng"]["torch"])
        elif checkpoint["rng"]["cuda"]:  # a run saved on a CPU and resumed on a GPU keeps the seeded CUDA stream
            generator.set_state(checkpoint["rng"]["cuda"][0])
    stats = {}
    for key in ("obs_rms", "return_rms"):
        saved = [checkpoint["env_stats"][key] for checkpoint in checkpoints]
        if saved[0] is None or isinstance(saved[0], list):  # none, or each env's own entries, env after env
            stats[key] = None if saved[0] is None else [entry for entries in saved for entry in entries]
        else:
            stacked = {part: torch.stack([entry[part] for entry in saved]) for part in ("mean", "var")}
            stats[key] = stacked | {"count": saved[0]["count"]}
    set_env_statistics(envs, stats)
    return [Update(c["iteration"], c["global_step"], c["kl_beta"]) for c in checkpoints]


def check_finite(runs, stats, iteration, global_step):
    """The NaN guard (Run.check_finite) of each agent, on its statistics (`stats`: name -> one value per agent) and its
    parameters: {agent: what its guard says} for the agents whose numbers are not finite (their runs are closed)."""
    failed = {}
    for i, run in enumerate(runs):
        try:
            run.check_finite({key: value[i] for key, value in stats.items() if key != "epochs"}, iteration, global_step)
        except NonFiniteError as e:
            failed[i] = f"seed {run.args.seed}: {e}"
    return failed


def stop_after_failure(runs, failed):
    """After the NaN guard stopped the agents `failed` ({agent: why}): the others, whose update just finished, save it
    and close; NonFiniteError names each failed agent with its guard's words."""
    for i, run in enumerate(runs):
        if i not in failed:
            run.save()
            run.close()
    others = "; the other agents saved this update" if len(failed) < len(runs) else ""
    raise NonFiniteError("; ".join(failed.values()) + others)
