"""The run plumbing of ppo_continuous_action_seeds.py, which trains one agent per seed in one process and makes each an
ordinary run of ppo_continuous_action.py: each agent's flags, what its checkpoint keeps of the process's shared state
(its own random streams, its rows of the M1/M3 statistics), the agents' checkpoints written as one set, --resume of
several checkpoints at once, each agent's part of a vector env step's infos, what the runs say (each progress line its
seed, one command that continues them all), and --eval-checkpoint, which plays an agent as the run of
ppo_continuous_action.py that it is. It decides no PPO detail."""

import contextlib
import importlib.util
import io
import os
import random
import shlex
import sys
from dataclasses import fields, replace

import torch

from . import run as run_module
from .checkpoints import CheckpointError, Checkpoints, Update, check_restorable, finish_interrupted_set
from .checkpoints import numpy_state_loaded, numpy_state_saved, resume_command, resume_flags, save_checkpoints
from .checkpoints import script_as_started
from .env_statistics import env_statistics, set_env_statistics
from .flag_checks import FLAG_RULES, ArgError
from .run import STOPPED, NonFiniteError, Run


def main(args, train, make_envs, Agent, act=None):
    """ppo_utils.run.main for ppo_continuous_action_seeds.py: trains the agents (no act: a batched agent is played by no
    evaluation); --eval-checkpoint plays an agent's checkpoint with ppo_continuous_action.py's evaluation (its envs, its
    network, its act), for each agent is a run of that script (with --resume too, run.main refuses the pair in one line)."""
    if not args.eval_checkpoint or args.resume:
        return run_module.main(args, train, make_envs, Agent, act)
    if len(args.seeds) > 1:
        print("error: --eval-checkpoint plays one agent with one seed; pass one --seeds, or none (seed 1)", file=sys.stderr)
        sys.exit(1)
    single = single_script()
    one = single.Args(**common_flags(args, single.Args), seed=args.seeds[0])
    run_module.main(one, single.train, single.make_envs, single.Agent, single.act)


def single_script():
    """The module of ppo_continuous_action.py, the script beside ppo_utils/ whose run each agent is."""
    if "ppo_continuous_action" not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ppo_continuous_action.py")
        spec = importlib.util.spec_from_file_location("ppo_continuous_action", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["ppo_continuous_action"] = module  # its dataclasses look themselves up there
        spec.loader.exec_module(module)
    return sys.modules["ppo_continuous_action"]


def check_seeds(args, world_size):
    """The rules of the batched script's own flags, for `world_size` processes: distinct seeds in numpy's range, one
    process, wandb for one run; ArgError for the first broken one."""
    in_range, fix = FLAG_RULES["seed"]
    for seed in args.seeds:
        if not in_range(seed):
            raise ArgError(f"--seeds {seed}: {fix}")
    if not args.seeds or len(set(args.seeds)) < len(args.seeds):
        raise ArgError(f"--seeds {' '.join(map(str, args.seeds))}: pass one or more distinct seeds")
    if world_size > 1:
        raise ArgError(f"{args.script} trains its agents in one process; for torchrun (X2) use ppo_continuous_action.py")
    if args.track and len(args.seeds) > 1:
        raise ArgError("--track sends one run per process to wandb; pass one seed, or `wandb sync` the runs' folders later")


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
    completed = finish_interrupted_set(args.resume)  # a set whose writing was cut short between two renames
    if completed:
        print(f"the last checkpoints of these runs were cut short while written; completed them: {' '.join(completed)}")
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


class AgentCheckpoints(Checkpoints):
    """An agent's Checkpoints, which its Run never writes alone (due() is never true): the agents' checkpoints are
    written together, as one set (save_agents), every `interval` updates."""

    def due(self, iteration):
        return False


def agent_runs(args, run_args, checkpoints, stop_signals):
    """Each agent's Run (its folder, logs and checkpoints), made with its flags as `run_args` and the checkpoint it
    resumes (`checkpoints`: one per seed, None for a new run)."""
    paths = args.resume or [None] * len(args.seeds)
    runs = []
    for seed, checkpoint, path in zip(args.seeds, checkpoints, paths):
        runs.append(Run(agent_args(args, run_args, seed, path), resumed_from=checkpoint, rank=0, world_size=1,
                        stop_signals=stop_signals))  # fmt: skip
        runs[-1].checkpoints = AgentCheckpoints(runs[-1].args, runs[-1].folder, rank=0, world_size=1)
    return runs


def log_update(run, global_step, scalars):
    """run.log.write, its progress line headed by the agent's seed (the agents' lines come one after another)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run.log.write(global_step, scalars)
    for line in printed.getvalue().splitlines():
        print(f"seed {run.args.seed}: {line}")


def end_update(runs, iteration, failed, script):
    """After each update: every --checkpoint-interval updates, the agents' checkpoints as one set; where the NaN guard
    stopped agents (`failed`: {agent: what its guard says}), the others' checkpoints, and NonFiniteError."""
    if failed:
        stop_after_failure(runs, failed, script)
    interval = runs[0].checkpoints.interval
    if interval and iteration % interval == 0:
        save_agents(runs, script)


def save_agents(runs, script):
    """Writes the checkpoints of the last finished update of `runs` as one set (save_checkpoints): a crash leaves all of
    the last set or all of this one, which one command of `script` continues. Where the disk refuses, the runs are
    closed and CheckpointError names the last good set and that command."""
    paths = [run.checkpoints.path for run in runs]
    contents = [run.checkpoints.content(run.agent, run.optimizer, run.last_update, run.log.wandb_id) for run in runs]
    try:
        save_checkpoints(paths, contents)
    except CheckpointError as e:
        for run in runs:
            run.close_after_failure()  # the logs' last flush may meet the same full disk
        hint = "start the run again once there is room"
        if all(os.path.exists(path) for path in paths):
            hint = f"once there is room, continue with: {resume_command(script, paths, 1, 1)}"
        raise CheckpointError(f"{e}; {hint}") from None


def finish_agents(runs, script):
    """Run.finish for the agents together: their last finished update saved as one set (with --save-model, a checkpoint
    interval, after a stop signal, or over an earlier set), the runs closed, then where their files are and one command:
    the one that continues them all after a stop signal, or one that plays an agent."""
    first, paths = runs[0], [run.checkpoints.path for run in runs]
    saving = first.stopping or first.args.save_model or first.checkpoints.interval or any(map(os.path.exists, paths))
    if saving:
        save_agents(runs, script)
    for run in runs:
        run.close()
    if saving:
        last = first.last_update
        print(f"saved the agents after update {last.iteration} (step {last.global_step}) to {' '.join(paths)}")
    folders = " ".join(run.folder for run in runs)
    print(f"logs: {folders} (see them with: tensorboard --logdir {os.path.dirname(first.folder) or '.'})")
    if first.stopping:
        print(f"{STOPPED} {resume_command(script, paths, 1, 1)}")
    elif saving:
        print(f"evaluate one with: python {shlex.join([script_as_started(script), '--eval-checkpoint', paths[0]])}")
    else:
        print("no checkpoint written: --save-model or --checkpoint-interval N keeps the agents")


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


def stop_after_failure(runs, failed, script):
    """After the NaN guard stopped the agents `failed` ({agent: why}): the others, whose update just finished, save it
    as one set and close; NonFiniteError names each failed agent with its guard's words, and the command of `script`
    that continues the others without them (a failed agent's last good checkpoint is of an earlier update, and from it
    the same numbers would likely diverge again)."""
    why, others = "; ".join(failed.values()), [run for i, run in enumerate(runs) if i not in failed]
    if not others:
        raise NonFiniteError(why)
    try:
        save_agents(others, script)
    except CheckpointError as e:
        raise NonFiniteError(f"{why}; the other agents' checkpoints: {e}") from None
    for run in others:
        run.close()
    seeds = " ".join(str(runs[i].args.seed) for i in failed)
    command = resume_command(script, [run.checkpoints.path for run in others], 1, 1)
    raise NonFiniteError(f"{why}; the other agents saved this update; continue them without seed {seeds} with: {command}")
