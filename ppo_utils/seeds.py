"""The run plumbing of ppo_continuous_action_seeds.py, which trains one agent per seed and setting (--setting
NAME=FLAGS) in one process and makes each an ordinary run of ppo_continuous_action.py: each agent's flags (which a
setting may set), each run's Agent and Adam as views of its rows of the stacked parameters and of AgentsAdam's moments
(agents_adam.py; what its checkpoint keeps, in the single script's form, with its own random streams and rows of the
M1/M3 statistics; written as one set, and the runs' last lines, by run.py's save_runs and finish_runs), --resume of
several checkpoints at once (checkpoints.restore_runs), each agent's part of a vector env step's infos, what the runs
log and say (each progress line its agent), and --eval-checkpoint, which plays an agent as the run of
ppo_continuous_action.py that it is. It decides no PPO detail."""

import contextlib
import importlib.util
import io
import os
import random
import shlex
import sys
import typing
from dataclasses import fields
from functools import partial
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import torch

from . import command_line
from .checkpoints import CheckpointError, Checkpoints, Update, finish_interrupted_set, numpy_state_loaded
from .checkpoints import numpy_state_saved, refuse_other_flags, restore_runs, resume_command, resume_flags
from .env_statistics import env_statistics, set_env_statistics
from .flag_checks import FLAG_RULES, ArgError, check_flags, check_not_empty
from .run import NonFiniteError, ObservationError, Run, nonfinite_envs, save_runs


def main(args, train, make_envs, Agent, act=None):
    """ppo_utils.command_line.main for ppo_continuous_action_seeds.py: trains the agents (no act: a batched agent is
    played by no evaluation); --eval-checkpoint plays an agent's checkpoint with ppo_continuous_action.py's evaluation
    (its envs, its network, its act), for each agent is a run of that script (with --resume too, command_line.main
    refuses the pair in one line)."""
    if not args.eval_checkpoint or args.resume:
        return command_line.main(args, train, make_envs, Agent, act)
    if len(args.seeds) > 1:
        print("error: --eval-checkpoint plays one agent with one seed; pass one --seeds, or none (seed 1)", file=sys.stderr)
        sys.exit(1)
    single = single_script()
    one = single.Args(**common_flags(args, single.Args), seed=args.seeds[0])
    command_line.main(one, single.train, single.make_envs, single.Agent, single.act)


def single_script():
    """The module of ppo_continuous_action.py, the script beside ppo_utils/ whose run each agent is."""
    if "ppo_continuous_action" not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ppo_continuous_action.py")
        spec = importlib.util.spec_from_file_location("ppo_continuous_action", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["ppo_continuous_action"] = module  # its dataclasses look themselves up there
        spec.loader.exec_module(module)
    return sys.modules["ppo_continuous_action"]


def check_seeds(args, world_size, run_args):
    """The rules of the batched script's own flags, for `world_size` processes: distinct seeds in numpy's range, each
    --setting well formed and per agent (agent_flags), one process, wandb for one run, no flag of `run_args` it does not
    batch set (unbatched_flags); ArgError for the first broken one."""
    in_range, fix = FLAG_RULES["seed"]
    for seed in args.seeds:
        if not in_range(seed):
            raise ArgError(f"--seeds {seed}: {fix}")
    if not args.seeds or len(set(args.seeds)) < len(args.seeds):
        raise ArgError(f"--seeds {' '.join(map(str, args.seeds))}: pass one or more distinct seeds")
    if args.setting and args.resume:
        raise ArgError("--resume continues each run with its own flags; drop --setting")
    agents = len(args.resume) if args.resume else len(agent_flags(args, run_args))
    if world_size > 1:
        raise ArgError(f"{args.script} trains its agents in one process; for torchrun (X2) use ppo_continuous_action.py")
    if args.track and agents > 1:
        raise ArgError("--track sends one run per process to wandb; train one agent, or `wandb sync` the runs' folders later")
    default = run_args()
    for name in unbatched_flags(args, run_args):  # a flag added to ppo_continuous_action.py since this script batched its own
        if getattr(args, name) != getattr(default, name):
            flag = f"--{name.replace('_', '-')}"
            if args.resume:  # the checkpoints' flags: the runs go on with them, by themselves
                command = resume_command(run_args.script, args.resume[0], 1, 1)
                raise ArgError(f"--resume {args.resume[0]} was trained with {flag} {getattr(args, name)!r}, a flag of "
                               f"{run_args.script} that {not_batched(args)}; continue each run by itself with "
                               f"{run_args.script} --resume, e.g. {command}")  # fmt: skip
            raise ArgError(f"{flag} is a flag of {run_args.script} that {not_batched(args)}; leave it at its default "
                           f"({getattr(default, name)!r}), or train each seed with {run_args.script} and these flags (--seed "
                           f"N for each of --seeds); {to_batch(args)}")  # fmt: skip


def unbatched_flags(args, run_args):
    """The flags of `run_args` (ppo_continuous_action.py's Args) that the batched script (whose flags `args` are) was not
    written for: neither its per_agent nor its shared ones (its PER_AGENT and SHARED). At its default such a flag is taken
    to do what the script did before it (so its agents train batched, and their checkpoints hold it); set, it is
    refused."""
    batched = {*args.per_agent, *(name for names in args.shared.values() for name in names)}
    return [field.name for field in fields(run_args) if field.name not in batched]


def not_batched(args):
    """What a refusal of an unbatched flag says of the batched script (whose flags `args` are)."""
    return f"{args.script} does not batch yet (neither its PER_AGENT nor its SHARED names it)"


def to_batch(args):
    """What a refusal of an unbatched flag says would let the batched script (whose flags `args` are) train it."""
    return f"to batch it, make {args.script} compute what the flag changes and add it to PER_AGENT or SHARED there"


def settings(args, run_args):
    """--setting NAME=FLAGS ...: [(name, {field: value})], in order; no --setting: one setting, [(None, {})]. ArgError,
    before anything is written, for a malformed setting (an unclosed quote in its flags too), a name given twice, a flag
    ppo_continuous_action.py lacks, a bad value, a flag no agent may set for itself (args.shared's, the process's) and
    one the script does not batch (unbatched_flags)."""
    found, kinds = [], {field.name: field.type for field in fields(run_args)}
    for spec in args.setting:
        name, sep, words = spec.partition("=")
        if not sep or not name or not all(c.isalnum() or c in "-_." for c in name) or "__" in name:
            raise ArgError(f"--setting {spec}: write NAME=FLAGS (NAME of letters, digits, -, _ and .), e.g. "
                           "--setting 'clip-0.1=--clip-coef 0.1'")  # fmt: skip
        if name in [other for other, _ in found]:
            raise ArgError(f"--setting {name}: the name is given twice; name each setting once")
        try:
            words = shlex.split(words)  # as a shell splits them
        except ValueError as e:  # "No closing quotation", "No escaped character"
            raise ArgError(f"--setting {spec}: its flags do not split as a shell's words ({e}); close the quote or drop "
                           "it, e.g. --setting 'kl=--surrogate kl-adaptive'") from None  # fmt: skip
        found.append((name, setting_values(name, words, kinds, args)))
    return found or [(None, {})]


def setting_values(name, words, kinds, args):
    """{field: value} of one setting's flags (`words`), typed as `kinds` ({field: its type in run_args}) says; the flags
    a setting may set are the batched script's per_agent ones (of `args`, its flags)."""
    values = {}
    while words:
        word, value = words.pop(0).partition("=")[::2]
        field = word[2:].replace("-", "_")
        negated = field.startswith("no_") and kinds.get(field[3:]) is bool
        field = field[3:] if negated else field
        if not word.startswith("--") or field not in kinds:
            raise ArgError(f"--setting {name}: {word} is not a flag of ppo_continuous_action.py; see its --help")
        if field not in args.per_agent:
            why = next((why for why, names in args.shared.items() if field in names), None)
            if why is None:  # a flag of the parent this script was not written for: in a setting or out of one
                raise ArgError(f"--setting {name}: {word} is a flag of ppo_continuous_action.py that {not_batched(args)}; "
                               "train each seed of this setting with ppo_continuous_action.py and its flags (--seed N for "
                               f"each of --seeds); {to_batch(args)}")  # fmt: skip
            fix = "--seeds sets each agent's" if field == "seed" else "pass it outside --setting"
            raise ArgError(f"--setting {name}: {word} {why}; {fix}")
        if kinds[field] is bool:
            if value:
                flag = field.replace("_", "-")
                raise ArgError(f"--setting {name}: {word}={value}: a switch takes no value; write --{flag} or --no-{flag}")
            values[field] = not negated
            continue
        if not value and (not words or words[0].startswith("--")):
            raise ArgError(f"--setting {name}: {word} takes a value; write {word} VALUE")
        value = value or words.pop(0)
        choices = typing.get_args(kinds[field]) if typing.get_origin(kinds[field]) is typing.Literal else None
        try:
            if choices:
                assert value in choices
                values[field] = value
            else:
                values[field] = None if value == "None" and type(None) in typing.get_args(kinds[field]) else float(value)
        except (AssertionError, ValueError):
            wanted = f"one of {', '.join(choices)}" if choices else "a number"
            raise ArgError(f"--setting {name}: {word} {value}: pass {wanted}") from None
    return values


def agent_flags(args, run_args):
    """Each agent's flags as `run_args` (what its checkpoint saves), setting after setting, seed after seed in each: the
    common flags of `args`, its setting's over them, its seed, and with a setting its name after --exp-name (the run's
    folder runs/{env_id}__{exp_name}-{setting}__{seed}__{time}). ArgError for a value out of its flag's range."""
    agents = []
    for name, values in settings(args, run_args):
        exp_name = args.exp_name if name is None else f"{args.exp_name}-{name}"
        for seed in args.seeds:
            agents.append(run_args(**common_flags(args, run_args) | values | {"seed": seed, "exp_name": exp_name}))
            try:
                check_flags(agents[-1])
            except ArgError as e:
                raise ArgError(f"--setting {name}: {e}") from None
    return agents


def common_flags(args, run_args):
    """The flags of `args` that every agent shares: those of `run_args` (the Args of ppo_continuous_action.py) but the
    seed and --resume."""
    return {field.name: getattr(args, field.name) for field in fields(run_args) if field.name not in ("seed", "resume")}


def resume_agents(args, run_args):
    """--resume A B ...: (args with the common flags of the checkpoints and their seeds, [(each agent's flags, its
    checkpoint)]); without --resume, (args, None). Each run continues with its own flags, as ppo_continuous_action.py
    --resume does; the runs must share the flags no agent sets for itself (args.per_agent's apart: their settings may differ)
    and have ended the same update, so that they go on in step."""
    check_not_empty(args)  # `--resume a.pt ''`, or a --resume given no paths: an error, never a new run
    if not args.resume:
        return args, None
    if args.seeds != type(args)().seeds:
        raise ArgError("--resume continues each run with its own seed; drop --seeds")
    completed = finish_interrupted_set(args.resume)  # a set whose writing was cut short between two renames
    if completed:
        print(f"the last checkpoints of these runs were cut short while written; completed them: {' '.join(completed)}")
    refuse_other_flags(args)  # each run continues with its checkpoint's flags, as its own --resume does
    loaded = [resume_flags(run_args(resume=path)) for path in args.resume]
    (first, checkpoint), agents = loaded[0], [(flags.exp_name, flags.seed) for flags, _ in loaded]
    shared = [field.name for field in fields(run_args) if field.name not in (*args.per_agent, "seed", "exp_name", "resume")]
    for path, (flags, other) in zip(args.resume[1:], loaded[1:]):
        differ = [name for name in shared if getattr(flags, name) != getattr(first, name)]
        if differ:
            raise ArgError(f"--resume {path} was trained with another --{differ[0].replace('_', '-')} than {args.resume[0]}; "
                           "resume it by itself")  # fmt: skip
        if other["iteration"] != checkpoint["iteration"]:
            raise ArgError(
                f"--resume {path} ended update {other['iteration']} and {args.resume[0]} update {checkpoint['iteration']}; "
                "resume each by itself with ppo_continuous_action.py --resume"
            )
    if len(set(agents)) < len(agents):
        exp_name, seed = max(agents, key=agents.count)
        raise ArgError(f"--resume: two of these runs are {exp_name} with seed {seed}; resume each once")
    seeds = tuple(dict.fromkeys(seed for _, seed in agents))
    return type(args)(**common_flags(first, run_args), seeds=seeds, resume=args.resume), loaded


class AgentCheckpoints(Checkpoints):
    """An agent's Checkpoints, which its Run never writes alone (due() is never true): the agents' checkpoints are
    written together, as one set (run.save_runs), every `interval` updates."""

    def due(self, iteration):
        return False

    def content(self, *args, **kwargs):
        """Checkpoints.content with copies of its tensors, which view the agents' stacked ones (torch.save would write
        the whole stack)."""
        content = super().content(*args, **kwargs)
        content["model"] = {name: tensor.clone() for name, tensor in content["model"].items()}
        state = content["optimizer"]["state"]
        content["optimizer"]["state"] = {k: {key: value.clone() for key, value in entry.items()} for k, entry in state.items()}
        return content


def agent_runs(args, run_args, resumed, stop_signals):
    """Each agent's Run (its folder, logs and checkpoints), made with its flags as `run_args` (agent_flags; --resume:
    `resumed`, its checkpoint's) and the checkpoint it resumes."""
    runs, agents = [], resumed or [(flags, None) for flags in agent_flags(args, run_args)]
    several = len({flags.exp_name for flags, _ in agents}) > 1  # settings: the lines name each agent's
    for flags, checkpoint in agents:
        runs.append(Run(flags, resumed_from=checkpoint, rank=0, world_size=1, stop_signals=stop_signals))
        runs[-1].checkpoints = AgentCheckpoints(runs[-1].args, runs[-1].folder, rank=0, world_size=1)
        runs[-1].label = f"{flags.exp_name} seed {flags.seed}" if several else f"seed {flags.seed}"  # what lines call it
    return runs


def check_batched_agents(envs, agents, agent, single_loss, batched_loss, flags, agent_args, script):
    """ArgError, before the first step, where the batched network or loss computes for an agent something other than
    what ppo_continuous_action.py's Agent (`agents`, each with its own flags, `flags`) and ppo_loss (`single_loss`)
    compute: a change to the parent that the batched twins (`agent`, `batched_loss`) do not follow. One probe minibatch
    per agent, drawn from a generator of its own: the agents' random streams stay as they were."""
    device, num_agents, probe = next(agent.parameters()).device, len(agents), torch.Generator().manual_seed(0)
    draw = lambda *shape: torch.randn((num_agents, 64, *shape), generator=probe).to(device)  # noqa: E731
    mb = {"obs": draw(*envs.single_observation_space.shape), "actions": draw(*envs.single_action_space.shape)}
    mb |= {key: draw() for key in ("advantages", "returns", "values")}
    clip_coef = torch.tensor([f.clip_coef for f in flags], device=device)[:, None]
    kl_beta = torch.tensor([f.kl_beta for f in flags], device=device)
    try:
        with torch.no_grad():
            _, logprob, entropy, value = agent.get_action_and_value(mb["obs"], mb["actions"])
            mb["logprobs"] = logprob + 0.1 * draw()  # ratios away from 1: the clipped branches count too
            batched = {"log_prob": logprob, "entropy": entropy, "value": value.squeeze(-1),
                       "get_value": agent.get_value(mb["obs"]).squeeze(-1)}  # fmt: skip
            loss, stats = batched_loss(agent, mb, agent_args, clip_coef, kl_beta)
            batched |= {f"ppo_loss's {key}": value for key, value in stats.items()} | {"ppo_loss": loss}
            singles = []
            for i, one in enumerate(agents):
                _, logprob, entropy, value = one.get_action_and_value(mb["obs"][i], mb["actions"][i])
                row = {key: value[i] for key, value in mb.items()}
                single, stats = single_loss(one, row, flags[i], flags[i].clip_coef, flags[i].kl_beta)
                singles.append({"log_prob": logprob, "entropy": entropy, "value": value.squeeze(-1),
                                "get_value": one.get_value(mb["obs"][i]).squeeze(-1), "ppo_loss": single}
                               | {f"ppo_loss's {key}": value for key, value in stats.items()})  # fmt: skip
    except Exception as e:  # the batched twin cannot run what the parent's Agent now holds
        raise ArgError(f"{script} cannot batch ppo_continuous_action.py's Agent or ppo_loss as they are now "
                       f"({type(e).__name__}: {e}); batch the change in {script}, or train each seed with "
                       "ppo_continuous_action.py") from None  # fmt: skip
    for key, rows in batched.items():
        single = sum(one[key] for one in singles) if key == "ppo_loss" else torch.stack([one[key] for one in singles])
        if not torch.allclose(rows, single, rtol=1e-4, atol=1e-5):
            where = "ppo_loss" if key.startswith("ppo_loss") else "Agent"
            raise ArgError(f"{script} computes another {key} than ppo_continuous_action.py's {where} (largest difference "
                           f"{(rows - single).abs().max().item():.3g}): the parent changed where its batched twin did not; "
                           f"batch the change in {script}, or train each seed with ppo_continuous_action.py")  # fmt: skip


def start_agents(runs, agents, agent, optimizer, envs, resumed, shufflers, generators):
    """Each run's start (Run.start) with its `Agent` (of `agents`) made a view of its row of `agent`'s stacked parameters
    and a torch.optim.Adam of the same views over its rows of `optimizer`'s moments: what its checkpoints save and load,
    in ppo_continuous_action.py's form. --resume (`resumed`): their parameters, moments, random streams and statistics
    loaded first. Returns each agent's Update."""
    stacked = [p.detach() for p in agent.parameters()]
    for i, one in enumerate(agents):
        slots = [name.rpartition(".") for name, _ in one.named_parameters()]
        for (module, _, name), rows in zip(slots, stacked):
            setattr(one.get_submodule(module), name, torch.nn.Parameter(rows[i], requires_grad=False))
    optimizers = [optimizer.agent_optimizer(i, one.parameters()) for i, one in enumerate(agents)]
    last_updates = [Update(iteration=0, global_step=0, kl_beta=run.args.kl_beta) for run in runs]  # none yet
    if resumed:
        last_updates = restore_agents([run.args.resume for run in runs], [c for _, c in resumed], agents, optimizers, envs,
                                      shufflers, generators)  # fmt: skip
    share = SimpleNamespace(num_envs=envs.num_envs // len(runs), close=envs.close)  # what a run reads of its envs
    for i, run in enumerate(runs):  # each run's checkpoints keep its agent's own state
        state = partial(agent_state, envs, i, shufflers, generators, share.num_envs)
        run.start(agents[i], optimizers[i], share, last_updates[i], state)
    return last_updates


class AgentsArgs(NamedTuple):
    """What ppo_loss and update_policy read of Args, for every agent: the flags a --setting may set, as tensors with the
    agent axis first (what the loss reads shaped (num_agents, 1) to meet a minibatch), the batch's sizes as numbers."""

    surrogate: torch.Tensor  # (G1) each agent's objective: its index in the Literal of Args.surrogate
    norm_adv: torch.Tensor  # (G3)
    clip_vloss: torch.Tensor  # (G4)
    ent_coef: torch.Tensor  # (G5)
    vf_coef: torch.Tensor  # (G5)
    max_grad_norm: torch.Tensor  # (G8) 0: off
    target_kl: torch.Tensor  # (X3) inf: off
    update_epochs: int
    batch_size: int
    minibatch_size: int

    @classmethod
    def of(cls, flags, args, device):
        """From each agent's flags (`flags`, Args each) and the common ones (`args`)."""
        per_agent = lambda values: torch.tensor(values, device=device)  # noqa: E731
        return cls(
            surrogate=per_agent([typing.get_args(type(f).__annotations__["surrogate"]).index(f.surrogate) for f in flags]),
            norm_adv=per_agent([f.norm_adv for f in flags])[:, None],
            clip_vloss=per_agent([f.clip_vloss for f in flags]),
            ent_coef=per_agent([f.ent_coef for f in flags]),
            vf_coef=per_agent([f.vf_coef for f in flags]),
            max_grad_norm=per_agent([f.max_grad_norm for f in flags]),
            target_kl=per_agent([np.inf if f.target_kl is None else f.target_kl for f in flags]),
            update_epochs=args.update_epochs,
            batch_size=args.batch_size,
            minibatch_size=args.minibatch_size,
        )


def log_update(run, global_step, scalars):
    """run.log.write, its progress line headed by the agent's label (its seed; its setting's too where settings differ:
    the agents' lines come one after another)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run.log.write(global_step, scalars)
    for line in printed.getvalue().splitlines():
        print(f"{run.label}: {line}")


def end_update(runs, iteration, failed, script):
    """After each update: every --checkpoint-interval updates, the agents' checkpoints as one set; where the NaN guard
    stopped agents (`failed`: {agent: what its guard says}), the others' checkpoints, and NonFiniteError."""
    if failed:
        stop_after_failure(runs, failed, script)
    interval = runs[0].checkpoints.interval
    if interval and iteration % interval == 0:
        save_runs(runs, script)


def agent_infos(infos, agent, envs_per_agent):
    """The part of a vector env step's episode statistics (infos["final_info"], all that Log.record_episodes reads) that
    belongs to agent `agent`'s envs, each array sliced and dicts recursed; {} at a step where no episode ended (most
    steps: slicing every key of every agent's infos at every step cost more than the agents' bookkeeping needs)."""
    part = slice(agent * envs_per_agent, (agent + 1) * envs_per_agent)
    return {"final_info": value_part(infos["final_info"], part)} if "final_info" in infos else {}


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
    """--resume of the agents (checkpoints.restore_runs): each checkpoint checked against its agent, then its parameters
    and Adam state loaded into its agent's rows, its random streams into its agent's, and the M1/M3 statistics of all of
    them into the envs' rows. Returns each agent's Update."""
    per_agent = envs.num_envs // len(agents)
    own_stats = [agent_state(envs, i, shufflers, generators, per_agent)["env_stats"] for i in range(len(agents))]

    def set_streams(checkpoints):
        for checkpoint, shuffler, generator in zip(checkpoints, shufflers, generators):
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

    return restore_runs(paths, checkpoints, agents, optimizers, own_stats, set_streams)


def finish_updates(runs, iteration, global_step, stats, batch, clip_coef, kl_beta, optimizer, failed, script):
    """After each update, for each agent the NaN guard did not stop (`failed`: {agent: why}): the scalars
    ppo_continuous_action.py logs for its flags (charts/kl_beta for a KL surrogate, charts/update_epochs with X3), from
    the update's statistics (`stats`: name -> one value per agent), its batch's explained variance, its clip range and
    beta (one per agent), its progress line headed by its label, the update its checkpoint is to save; then end_update."""
    y_pred, y_true = batch["values"].cpu().numpy(), batch["returns"].cpu().numpy()
    var_y = np.var(y_true, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        explained_var = np.where(var_y == 0, np.nan, 1 - np.var(y_true - y_pred, axis=-1) / var_y)
    losses = {f"losses/{key}": value.tolist() for key, value in stats.items() if key != "epochs"}  # device sync
    for i, run in enumerate(runs):
        if i in failed:
            continue
        scalars = {"charts/learning_rate": optimizer.param_groups[i]["lr"], "charts/clip_coef": clip_coef[i]}
        if run.args.surrogate in ("kl-fixed", "kl-adaptive"):
            scalars["charts/kl_beta"] = kl_beta[i]
        if run.args.target_kl is not None:
            scalars["charts/update_epochs"] = stats["epochs"][i]  # X3: the epochs run before the KL stopped the update
        scalars |= {key: values[i] for key, values in losses.items()}
        scalars["losses/explained_variance"] = explained_var[i]
        log_update(run, global_step, scalars)  # with the episodes that ended and the SPS
        run.optimizer.param_groups[0]["lr"] = optimizer.param_groups[i]["lr"]  # G6, as its checkpoint saves it
        run.finish_update(iteration, global_step, kl_beta[i])  # notes the update its checkpoint is to save
    end_update(runs, iteration, failed, script)  # the agents' checkpoints, as one set; after a NaN, the others'


def check_finite(runs, stats, iteration, global_step):
    """The NaN guard (Run.check_finite) of each agent, on its statistics (`stats`: name -> one value per agent) and its
    parameters: {agent: what its guard says} for the agents whose numbers are not finite (their runs are closed)."""
    failed = {}
    for i, run in enumerate(runs):
        try:
            run.check_finite({key: value[i] for key, value in stats.items() if key != "epochs"}, iteration, global_step)
        except NonFiniteError as e:
            failed[i] = f"{run.label}: {e}"
    return failed


def check_observations(runs, envs, obs, global_step, script):
    """The NaN guard of what the envs return (Run.check_observations) for every agent: where an env's observation in
    `obs` (the vector env's, agent a's envs at a * num_envs ...) is NaN or infinite, its agent's run is closed and named
    with the env (its own index) and the step; the other agents save their last finished update as one set and close,
    and ObservationError says how to continue them (stop_after_failure)."""
    bad, kind = nonfinite_envs(obs, envs)
    if not bad:
        return
    per_agent, failed = envs.num_envs // len(runs), {}
    for i, run in enumerate(runs):
        own = [j - i * per_agent for j in bad if j // per_agent == i]
        if own:
            failed[i] = f"{run.label}: {run.observation_fault(own, kind, global_step)}"
            run.log.close()
            run.let_go()
    envs.close()
    stop_after_failure(runs, failed, script, ObservationError, "their last finished update")


def stop_after_failure(runs, failed, script, error=NonFiniteError, saved="this update"):
    """After the NaN guard stopped the agents `failed` ({agent: why}): the others, whose update just finished (`saved`;
    after a NaN observation, mid-rollout: their last finished update), save it as one set and close; `error`
    (NonFiniteError, or ObservationError) names each failed agent with its guard's words, and the command of `script`
    that continues the others without them (a failed agent's last good checkpoint is of an earlier update, and from it
    the same numbers would likely diverge again)."""
    why, others = "; ".join(failed.values()), [run for i, run in enumerate(runs) if i not in failed]
    if not others:
        raise error(why)
    try:
        save_runs(others, script)
    except CheckpointError as e:
        raise error(f"{why}; the other agents' checkpoints: {e}") from None
    for run in others:
        run.close()
    labels = ", ".join(runs[i].label for i in failed)
    command = resume_command(script, [run.checkpoints.path for run in others], 1, 1)
    raise error(f"{why}; the other agents saved {saved}; continue them without {labels} with: {command}")
