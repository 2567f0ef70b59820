"""What a script must define for ppo_utils, in one place; command_line.main checks it (check_script) before anything
starts, and a script that breaks it ends in one line naming what is missing or wrong (ContractError).

`Args`, a dataclass of the flags, whose `Args()` are the script's defaults. The package reads these fields by name, and
no other (RUN_FLAGS): exp_name, seed, env_id, total_timesteps, track, wandb_project_name, wandb_entity, capture_video,
save_model, checkpoint_interval, resume, eval_checkpoint, eval_episodes (the run flags of docs/flags.md that it acts
on), and num_envs, num_steps, num_minibatches, norm_adv (G3, G7, G10: how the batch splits, check_batch). Every other
flag is the script's: the package reaches it only through what the script declares below, or as an argument of a
function the script calls with it (check_envpool, check_action_mask). Each field's type is one a checkpoint can hold
and check: bool, int, float, str, X | None, or a Literal of strings (a script's own tuple flags are not checkpointed).
Its class variables (ClassVar):
- `script: str`, the file name its checkpoints carry (ppo.py); a checkpoint of another script is refused.
- `env_kinds: tuple`, the kinds of flag_checks.ENV_KINDS whose env ids it trains on (check_args refuses the others).
- `eval_flags: dict`, {field: value} that --eval-checkpoint sets over the checkpoint's flags to play one env.
- `flag_rules: dict`, {field: (test, what the message asks for)}, the ranges of its own numeric flags, in the form of
  flag_checks.FLAG_RULES (the run flags' and the PPO flags' ranges).
- optional (DECLARED, each with its default): `observation_flags: dict`, {field: what a value other than the default
  means, or None}, the flags whose wrappers change what the agent observes, which --eval-checkpoint names with the env
  it plays ({}); `warm_up: dict`, {field: note}, the flags that make the first update slow when set, said in the run's
  first line ({}; "compile": "--compile builds its graph if the run has 4,000+ minibatch steps").
- ppo_continuous_action_seeds.py's SeedsArgs alone: `per_agent: tuple` and `shared: dict` (its PER_AGENT and SHARED),
  the flags of its parent that it batches, which ppo_utils/seeds.py reads (a flag in neither is refused when set).
Its method `check(self, world_size: int, kind: str) -> None`: how its flags fit together for `world_size` processes
(X2) on an env of `kind` (a key of ENV_KINDS); ArgError in one line for the first misfit (check_args calls it after
each flag's range, the env id and the step budget, before the batch's split). Its int properties `batch_size`
(num_envs x num_steps), `minibatch_size` (batch_size // num_minibatches) and `num_iterations` (the updates of the run:
total_timesteps // (batch_size x the torchrun processes)).

`train(args, stop_signals=())`: the whole run; `stop_signals` a list that SIGINT and SIGTERM append to, which it checks
each env step (Run.should_stop) to stop with a checkpoint. It returns a dict: "agent" (the trained nn.Module),
"run_name" (its run folder's name), "episodic_returns" (each finished episode's return, in order), "rollout" (the last
rollout's tensors: obs, actions, logprobs, rewards, dones, values) and "sps"; the batched script gives lists, one entry
per agent, and "agents". main() does not read it (tests, notebooks and benchmark/speed.py do).

`make_envs(args, video_folder=None)`: the gymnasium VectorEnv of args.num_envs envs that train() and --eval-checkpoint
play (SAME_STEP autoreset, RecordEpisodeStatistics under the scaling wrappers: infos["final_info"]["episode"]), env 0
recording videos into video_folder where args.capture_video; M1/M3's statistics, where kept, under the names
env_statistics.py reads (obs_rms, return_rms).

`Agent(envs, args)`: the torch.nn.Module that train() trains and a checkpoint's "model" loads into (state_dict).

`act(agent, envs, args, obs, done, state) -> (action, state)`: --eval-checkpoint's step: the action train() would
sample for the observations `obs` of `envs` (numpy, as the env returned them; `done` a float tensor per env), as the
env's step() takes it, and the recurrent state it carries (None at the start; a script without one returns None).
ppo_continuous_action_seeds.py passes None: its checkpoints are its parent's, whose act plays them.

What train() calls of the package, in order: checkpoints.resume_flags, flag_checks.check_args, distributed_setup,
run.Run(args, resumed_from=, rank=, world_size=, stop_signals=), checkpoints.restore (with --resume), Run.start,
then each env step Run.check_observations, Run.log.record_episodes and Run.should_stop, each update Run.check_finite,
Run.log.write and Run.finish_update, and at the end Run.finish."""

import inspect
from dataclasses import fields, is_dataclass

import torch

from .flag_checks import ENV_KINDS, ArgError

RUN_FLAGS = ("exp_name", "seed", "env_id", "total_timesteps", "track", "wandb_project_name", "wandb_entity", "capture_video",
             "save_model", "checkpoint_interval", "resume", "eval_checkpoint", "eval_episodes")  # fmt: skip
BATCH_FLAGS = ("num_envs", "num_steps", "num_minibatches", "norm_adv")
CLASS_VARIABLES = {"script": str, "env_kinds": tuple, "eval_flags": dict, "flag_rules": dict}
DECLARED = {"observation_flags": {}, "warm_up": {}}  # the optional class variables and their defaults
PROPERTIES = ("batch_size", "minibatch_size", "num_iterations")
SIGNATURES = {"Args.check": "self, world_size, kind", "train": "args, stop_signals", "make_envs": "args, video_folder",
              "Agent": "envs, args", "act": "agent, envs, args, obs, done, state"}  # fmt: skip


class ContractError(ArgError):
    """A script that does not define what ppo_utils reads of it: the message names what is missing or wrong."""


def declared(Args, name):
    """An optional class variable of the script's Args (a key of DECLARED), or its default where the script has none."""
    return getattr(Args, name, DECLARED[name])


def check_script(args, train, make_envs, Agent, act):
    """ContractError naming the first thing the script (its parsed `args` and its functions, as main() is given them)
    defines otherwise than this module's docstring says."""
    Args = type(args)
    where = f"{getattr(Args, 'script', Args.__module__)}:"
    if not is_dataclass(Args):
        raise ContractError(f"{where} Args is not a dataclass; see ppo_utils/contract.py")
    names = {field.name for field in fields(Args)}
    missing = [name for name in RUN_FLAGS + BATCH_FLAGS if name not in names]
    if missing:
        raise ContractError(f"{where} Args lacks the flag {missing[0]}, which ppo_utils reads; see ppo_utils/contract.py")
    for name, kind in CLASS_VARIABLES.items():
        if not isinstance(getattr(Args, name, None), kind):
            raise ContractError(f"{where} Args lacks the class variable {name} ({kind.__name__}); see ppo_utils/contract.py")
    if not args.script.endswith(".py"):
        raise ContractError(f"{where} Args.script {args.script!r} is not a script's file name")
    unknown = [kind for kind in args.env_kinds if kind not in ENV_KINDS]
    if not args.env_kinds or unknown:
        raise ContractError(f"{where} Args.env_kinds {args.env_kinds!r}: name one or more of {', '.join(ENV_KINDS)}")
    flag_sets = {"eval_flags": Args.eval_flags, "flag_rules": Args.flag_rules}
    flag_sets |= {name: declared(Args, name) for name in DECLARED}
    for name, flags in flag_sets.items():
        if not isinstance(flags, dict) or not set(flags) <= names:
            other = sorted(set(flags) - names) if isinstance(flags, dict) else [type(flags).__name__]
            raise ContractError(f"{where} Args.{name} names {other[0]}, which is not one of its flags")
    for name, rule in Args.flag_rules.items():
        if not (isinstance(rule, tuple) and len(rule) == 2 and callable(rule[0]) and isinstance(rule[1], str)):
            raise ContractError(f"{where} Args.flag_rules[{name!r}] is not (test, what the message asks for)")
    for name in PROPERTIES:
        if not isinstance(inspect.getattr_static(Args, name, None), property):  # not read here: flags not yet checked
            raise ContractError(f"{where} Args lacks the property {name} (an int); see ppo_utils/contract.py")
    if not (isinstance(Agent, type) and issubclass(Agent, torch.nn.Module)):
        raise ContractError(f"{where} Agent is not a torch.nn.Module class; see ppo_utils/contract.py")
    calls = {"Args.check": (getattr(Args, "check", None), (args, 1, "continuous")), "train": (train, (args, [])),
             "make_envs": (make_envs, (args, None)), "Agent": (Agent, (None, args)),
             "act": (act, (None, None, args, None, None, None))}  # fmt: skip
    for name, (function, arguments) in calls.items():
        if name == "act" and function is None:
            continue
        try:
            inspect.signature(function).bind(*arguments)
        except (TypeError, ValueError):
            raise ContractError(f"{where} {name} does not take ({SIGNATURES[name]}); see ppo_utils/contract.py") from None
