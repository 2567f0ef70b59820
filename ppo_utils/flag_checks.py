"""The flag checks every script runs before anything starts (before a run folder exists): each flag's range, the env
id (one of the kinds the script trains on), and how the flags fit together. The rules of a script's own flags are its
Args' (`flag_rules`, `check`); those here are of the flags every script has, and the env ids'. A bad command line ends
in ArgError, whose one-line message names the flag and the fix (ppo_utils.run.main prints it). No PPO detail is decided
here: a rule only refuses values."""

import importlib
import os
import sys
import sysconfig
import traceback
import warnings
from dataclasses import fields
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from .mujoco_log import say_settotalmass_once


class ArgError(ValueError):
    """A bad command line: the message names the flag and the fix."""


# what each numeric flag that every script has takes: flag -> (the test its value must pass, what the message asks for;
# a value that turns a detail off says which). The message is "--flag value: what it asks for". A script's Args adds the
# rules of its own flags (`flag_rules`, in the same form); an unset optional flag (None) is not tested; a float must
# first be finite (tyro reads "nan" and "inf").
FLAG_RULES = {
    "seed": (lambda v: 0 <= v < 2**32, "pass a seed in 0 .. 2**32 - 1 (numpy's range)"),
    "torch_threads": (lambda v: v >= 0, "pass a positive count, or 0 for torch's default"),
    "checkpoint_interval": (lambda v: v >= 0, "pass a count of updates, or 0 for none (unset: every 100 with --save-model)"),
    "eval_episodes": (lambda v: v >= 1, "pass 1 or more"),
    "total_timesteps": (lambda v: v >= 1, "pass a positive count"),
    "num_envs": (lambda v: v >= 1, "pass a positive count"),
    "num_steps": (lambda v: v >= 1, "pass a positive count"),
    "clip_coef": (  # 0 is no "off": with it neither the policy (G1) nor the value (G4) may move from the rollout's
        lambda v: v > 0,
        "pass a clip range > 0; to turn clipping off use --surrogate unclipped (G1) and --no-clip-vloss (G4)",
    ),
    "kl_beta": (  # 0 is --surrogate unclipped, and kl-adaptive would never move it (it doubles or halves beta)
        lambda v: v > 0,
        "pass a KL penalty coefficient > 0; for no penalty use --surrogate unclipped",
    ),
    "kl_dtarg": (lambda v: v > 0, "pass a target KL > 0"),
    "gamma": (lambda v: 0 <= v <= 1, "pass a discount in [0, 1]"),
    "gae_lambda": (lambda v: 0 <= v <= 1, "pass a lambda in [0, 1] (--no-gae turns GAE off)"),
    "ent_coef": (lambda v: v >= 0, "pass a coefficient >= 0 (0: no entropy bonus)"),
    "vf_coef": (lambda v: v >= 0, "pass a coefficient >= 0"),
    "learning_rate": (lambda v: v >= 0, "pass a learning rate > 0, or 0 to leave the agent as initialized"),
    "num_minibatches": (lambda v: v >= 1, "pass a positive count (1: the full batch)"),
    "update_epochs": (lambda v: v >= 1, "pass a positive count"),
    "max_grad_norm": (lambda v: v >= 0, "pass a norm > 0, or 0 to turn G8 off"),
    "adam_eps": (lambda v: v > 0, "pass an epsilon > 0 (Adam divides by it where a gradient is 0)"),
    "target_kl": (lambda v: v >= 0, "pass a KL >= 0 (0: one epoch per update), or leave it unset (None) to turn X3 off"),
}


class EnvKind(NamedTuple):
    """A kind of env that check_args tells apart."""

    description: str
    example: str  # an env id of the kind
    script: str  # the script(s) that train on it


ENV_KINDS = {
    "continuous": EnvKind(
        "an env with vector observations and continuous (Box) actions", "Hopper-v5",
        "ppo_continuous_action.py or ppo_rnn_continuous_action.py",
    ),
    "atari": EnvKind("an Atari game", "BreakoutNoFrameskip-v4", "ppo_atari.py or ppo_rnn.py"),
    "discrete-vector": EnvKind("an env with vector observations and discrete actions", "CartPole-v1", "ppo.py or ppo_rnn.py"),
    "masked": EnvKind(
        "an env with discrete actions whose dict observations hold an action_mask (envpool's Jumanji tasks)", "Knapsack-v1",
        "ppo_masked.py",
    ),
}


def find_spec(env_id):
    """The EnvSpec gym.make finds for `env_id`. gymnasium's "module:EnvId" form (one's own env) imports the module first,
    as gym.make does, for it registers EnvId (gymnasium.register); ArgError in one line where the id is malformed, the
    module cannot be imported (a missing dependency, or a bug in it: its error's last line and where it was raised), exits
    while imported, or registers no EnvId. A plain id not registered raises gym.error.Error (check_args says what the
    script takes)."""
    if ":" not in env_id:
        return gym.spec(env_id)
    module, _, name = env_id.partition(":")
    if not module or module.startswith(".") or not name or ":" in name:  # gym.make splits at every ':'
        raise ArgError(f"--env-id {env_id}: pass one module:EnvId, e.g. mypackage.envs:MyEnv-v0")
    try:
        importlib.import_module(module)
    except (ImportError, gym.error.Error) as e:  # gym.error.DependencyNotInstalled: what gymnasium's extras lack
        fix = "fix the import it names"
        if isinstance(e, ModuleNotFoundError) and e.name:
            fix = f"it needs {e.name}: install that"
            if f"{module}.".startswith(f"{e.name}."):  # the module itself, or a package above it, is not there
                fix = "install it or put the folder that holds it on PYTHONPATH"
        if isinstance(e, gym.error.DependencyNotInstalled):
            fix = "install what it names"
        reason = (str(e).splitlines() or [""])[0]
        raise ArgError(f"--env-id {env_id}: cannot import {module} ({type(e).__name__}: {reason}); {fix}") from None
    except SystemExit as e:  # sys.exit() in the module's body: without this the script would end silently, with its code
        raise ArgError(
            f"--env-id {env_id}: importing {module} called sys.exit({e.code!r}) ({where_raised(e)}); a module that "
            'registers envs must not exit when imported: put that code under if __name__ == "__main__":'
        ) from None
    except Exception as e:  # a bug in the module: the user needs its last line and its place, not ppo_utils' frames
        raise ArgError(
            f"--env-id {env_id}: importing {module} failed ({last_line(e)}, {where_raised(e)}); fix the module, or pass "
            "another --env-id"
        ) from None
    try:
        return gym.spec(name)
    except gym.error.Error as e:
        reason = (str(e).splitlines() or [""])[0]
        raise ArgError(
            f"--env-id {env_id}: {module} registers no env {name} ({reason}); register it there with "
            f'gymnasium.register(id="{name}", entry_point=...)'
        ) from None


def env_kind(env_id):
    """Which of ENV_KINDS the registered `env_id` is, and the type of its action space; ArgError if it is none of them
    or cannot be made."""
    entry_point = find_spec(env_id).entry_point
    if entry_point == "ale_py.env:AtariEnv":
        return "atari", "Discrete"
    try:
        if isinstance(entry_point, str) and entry_point.startswith("gymnasium.envs.mujoco"):
            importlib.import_module("mujoco")  # loaded before gym.make compiles the model, so that its warnings are ours
            say_settotalmass_once()
        env = gym.make(env_id)
    except gym.error.Error as e:
        raise ArgError(f"--env-id {env_id} cannot be created: {e}") from None
    except (Exception, SystemExit) as e:
        if "MUJOCO_GL" in os.environ and from_opengl(e):  # importing MuJoCo dies inside PyOpenGL: MUJOCO_GL's library
            raise ArgError(f"--env-id {env_id}: {gl_trouble('load', e)}; or unset MUJOCO_GL, which nothing needs") from None
        # the env's own code (its constructor, or the module its entry point names) failed: its last line and its place
        what = f"called sys.exit({e.code!r})" if isinstance(e, SystemExit) else f"raised {last_line(e)}"
        raise ArgError(
            f"--env-id {env_id} cannot be created: making it {what} ({where_raised(e)}); fix the env, or pass another --env-id"
        ) from None
    observation_space, action_space = env.observation_space, env.action_space
    env.close()
    vector = isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1
    if isinstance(action_space, gym.spaces.Box) and vector:  # the continuous agent's first layer takes a vector
        return "continuous", "Box"
    if isinstance(action_space, gym.spaces.Discrete) and vector:
        return "discrete-vector", "Discrete"
    masked = isinstance(observation_space, gym.spaces.Dict) and "action_mask" in observation_space.spaces
    if isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) and masked:
        check_flat(env_id, observation_space)
        return "masked", type(action_space).__name__
    if isinstance(observation_space, gym.spaces.Dict):  # an action mask under another key: say the one ppo_masked.py reads
        named = [key for key in observation_space if any(word in key.lower() for word in ("mask", "legal", "valid", "avail"))]
        if named:
            raise ArgError(
                f"--env-id {env_id} gives its dict observations a {named[0]!r} entry; ppo_masked.py reads the action mask "
                "under 'action_mask': rename the key"
            )
    observations = type(observation_space).__name__ + str(getattr(observation_space, "shape", None) or "")
    raise ArgError(
        f"--env-id {env_id} has {observations} observations and a {type(action_space).__name__} action space, which "
        "none of the scripts trains on"
    )


def last_line(error):
    """The last line of `error`'s message, after its type (what Python's traceback ends with): "ValueError: bad size"."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1]}" if lines else type(error).__name__


# Python's own library and the installed packages: the frames of a traceback a user's module is not in
LIBRARY_FOLDERS = tuple({os.path.join(sysconfig.get_paths()[key], "") for key in ("stdlib", "purelib", "platlib")})


def where_raised(error):
    """Where `error` was raised, for a one-line message: "at myenvs.py:12 in __init__". The innermost frame outside
    Python's library and the installed packages (the user's code, not importlib's or gymnasium's frames around it, nor
    numpy's under it); the innermost frame where every frame is a library's. A file under the working folder is named
    relative to it."""
    if isinstance(error, SyntaxError) and error.filename:  # the module that does not parse has no frame of its own
        frames = [traceback.FrameSummary(error.filename, error.lineno, "<module>")]
    else:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("<")]
    if not frames:
        return "at an unknown place"
    own = [f for f in frames if not os.path.abspath(f.filename).startswith(LIBRARY_FOLDERS)]
    frame = (own or frames)[-1]
    path = os.path.abspath(frame.filename)
    if path.startswith(os.path.join(os.getcwd(), "")):
        path = os.path.relpath(path)
    function = f" in {frame.name}" if frame.name != "<module>" else ""
    return f"at {path}:{frame.lineno}{function}"


def from_opengl(error):
    """Whether `error` was raised inside PyOpenGL (MuJoCo loading the MUJOCO_GL backend without its library)."""
    return any(f"{os.sep}OpenGL{os.sep}" in frame.filename for frame in traceback.extract_tb(error.__traceback__))


NAME_BYTES = 100  # --exp-name's longest: the run folder's name adds the env id, the seed and the time to it (255 at most)


def is_folder_name(name, most_bytes=255):
    """Whether `name` can be one folder's name inside runs/: no path separator, not "." or "..", printable, at most
    `most_bytes` bytes."""
    unsafe = not name or name in (".", "..") or "/" in name or "\\" in name or not name.isprintable()
    return not unsafe and len(name.encode()) <= most_bytes


def check_name(flag, name):
    """ArgError unless `name` can be part of a run folder's name (within NAME_BYTES, so that the folder's stays within
    the file system's 255)."""
    if not is_folder_name(name, NAME_BYTES):
        raise ArgError(
            f"{flag} {name!r}: pass one folder name (no / or \\, not . or .., printable, at most {NAME_BYTES} bytes), "
            "e.g. --exp-name hopper-baseline"
        )


def run_name_part(env_id):
    """The env id as part of a run folder's name: a namespaced id's / (ns/Env-v0) would make a folder inside runs/, and
    the : of module:EnvId (one's own env) is awkward in a path (TensorBoard's --logdir_spec, scp, Windows); both become
    -, so that pkg.sub:ns/MyEnv-v0 is pkg.sub-ns-MyEnv-v0."""
    return env_id.replace("/", "-").replace(":", "-")


# what a string or path flag given an empty value asks for (an empty value is an error, never the flag's default: `--resume
# ''`, or a --resume whose glob matched nothing, would otherwise start a new run); a flag not named here gets the generic
# fix, its default
EMPTY_FIXES = {
    "resume": "pass the agent.pt to continue (runs/<run>/agent.pt), or leave --resume out to start a new run",
    "eval_checkpoint": "pass the agent.pt to play (runs/<run>/agent.pt), or leave --eval-checkpoint out to train",
    "env_id": "pass an env id, e.g. {example}",
    "wandb_entity": "pass a wandb entity (team), or leave --wandb-entity out for your default entity",
}


def check_not_empty(args) -> None:
    """ArgError for the first string or path flag of `args` given an empty value: '' (`--resume ''`, a variable that was
    not set), or no value at all where the flag takes several (`--resume runs/*/agent.pt` whose glob matched nothing,
    in a shell that then passes none); one of them empty too. A flag whose default is empty (--setting) may be."""
    for field in fields(args):
        value, flag = getattr(args, field.name), "--" + field.name.replace("_", "-")
        many = isinstance(value, tuple)
        if not (value == "" or (many and "" in value) or (many and not value and field.default != ())):
            continue
        example = ENV_KINDS[args.env_kinds[0]].example
        default = " ".join(map(str, field.default)) if isinstance(field.default, tuple) else repr(field.default)
        fix = EMPTY_FIXES.get(field.name, f"pass a value, or leave {flag} out for its default ({default})")
        if many and field.name == "resume":
            fix = "pass the agent.pt of each run to continue, or leave --resume out to start new runs"
        given = "was given no value (a glob that matched nothing?)" if many and not value else "was given an empty value"
        raise ArgError(f"{flag} {given}: {fix.format(example=example)}")


def check_flags(args) -> None:
    """Checks each numeric flag of `args` against its rule (FLAG_RULES and its Args' flag_rules), the finiteness
    of every float flag first, and --exp-name, which names a folder; ArgError names the first flag out of its range.
    A string or path flag given an empty value is refused first (check_not_empty)."""
    check_not_empty(args)
    rules = FLAG_RULES | args.flag_rules
    for field in fields(args):
        value = getattr(args, field.name)
        rule, fix = rules.get(field.name, (lambda v: True, "pass a finite number"))
        if (isinstance(value, float) and not np.isfinite(value)) or (value is not None and not rule(value)):
            raise ArgError(f"--{field.name.replace('_', '-')} {value}: {fix}")
    check_name("--exp-name", args.exp_name)
    if args.resume and args.eval_checkpoint:
        raise ArgError("--resume and --eval-checkpoint: pass one (--resume trains on, --eval-checkpoint only plays)")


def check_args(args, world_size=None) -> None:
    """Validates the flags and the env id before anything starts, before any run folder too; raises ArgError with a
    one-line message. In order: each flag's range (check_flags), the env id (one of the kinds of ENV_KINDS in its Args'
    `env_kinds`), the step budget, how the script's flags fit together (its Args' `check(world_size, kind)`, where the
    Atari scripts check envpool's limits, check_envpool), how the batch splits (check_batch), and whether
    --capture-video can record here. world_size: the processes
    under torchrun (X2), each collecting a batch of its own."""
    from .distributed import launched_processes  # here, not above: distributed.py imports ArgError from this module

    world_size = world_size or launched_processes()  # X2: torchrun's processes
    check_flags(args)
    kind = check_env_id(args.env_id, args.env_kinds)
    if args.total_timesteps < args.batch_size * world_size:
        batch = f"one batch ({args.batch_size})"
        if world_size > 1:
            batch = f"one update of {world_size} processes ({world_size} x {args.batch_size} = {args.batch_size * world_size})"
        raise ArgError(f"--total-timesteps {args.total_timesteps} is less than {batch}; raise it")
    args.check(world_size, kind)
    check_batch(args)
    if kind != "atari" and args.capture_video:
        check_rendering(args.env_id, kind)
    if args.capture_video:
        check_video_writer()


def check_batch(args):
    """What every script's batch must fit: G7's minibatches split it evenly, and G3 has two samples or more to
    normalize in each."""
    if args.batch_size % args.num_minibatches:
        raise ArgError(
            f"--num-minibatches {args.num_minibatches} does not divide the batch of --num-envs {args.num_envs} x "
            f"--num-steps {args.num_steps} = {args.batch_size}; choose a divisor of {args.batch_size}"
        )
    if args.norm_adv and args.minibatch_size == 1:
        raise ArgError(
            f"--num-minibatches {args.num_minibatches} makes minibatches of one sample, whose advantage G3 cannot "
            "normalize (one value has no spread); choose fewer minibatches, or add --no-norm-adv"
        )


def check_envpool(env_id, kind, capture_video, noop_max=None, gray_after_resize=False):
    """--vector-env envpool (the Atari and continuous scripts' Args.check call it with their flags' values): envpool
    makes the task, and what its own wrappers cannot do as the flags ask."""
    if kind not in ("atari", "continuous"):
        raise ArgError("--vector-env envpool runs Atari games and MuJoCo tasks only; add --vector-env sync")
    try:
        import envpool  # noqa: F401  (Linux only)
    except ImportError:
        raise ArgError("--vector-env envpool: envpool is not installed here; pip install envpool (Linux), or add "
                       "--vector-env sync") from None  # fmt: skip
    if capture_video:
        raise ArgError("--capture-video needs frames that envpool does not render; add --vector-env sync")
    if ":" in env_id:  # envpool looks the task up by its registered id
        raise ArgError(f"--vector-env envpool takes the task's registered id: pass --env-id {env_id.split(':', 1)[1]}")
    if kind == "continuous":
        if env_id not in MUJOCO_TASKS:
            raise ArgError(f"--vector-env envpool has no {env_id}; it makes {', '.join(MUJOCO_TASKS)}; add --vector-env sync")
        return
    if noop_max == 0:
        raise ArgError("envpool cannot turn A1 off (--noop-max 0); add --vector-env sync")
    if gray_after_resize:
        raise ArgError("envpool grays its frames its own way, not with --gray-after-resize; add --vector-env sync")


# the MuJoCo tasks envpool makes (its ports of gymnasium's v5), named by check_envpool's refusal
MUJOCO_TASKS = (
    "Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5", "InvertedDoublePendulum-v5",
    "InvertedPendulum-v5", "Pusher-v5", "Reacher-v5", "Swimmer-v5", "Walker2d-v5",
)  # fmt: skip


def check_env_id(env_id, env_kinds):
    """The kind (a key of ENV_KINDS) of `env_id`; ArgError unless it is registered and one of `env_kinds`, the kinds the
    script trains on (an Atari game as its NoFrameskip id)."""
    accepted = " or ".join(ENV_KINDS[kind].description for kind in env_kinds)
    if envpool_task(env_id):
        if "masked" not in env_kinds:
            raise ArgError(f"--env-id {env_id} is envpool's task with an action mask; use {ENV_KINDS['masked'].script}")
        import envpool

        check_flat(env_id, envpool.make_spec(env_id).observation_space)
        return "masked"
    try:
        spec = find_spec(env_id)
    except gym.error.Error:
        hint = f"this script takes {accepted}, e.g. {ENV_KINDS[env_kinds[0]].example}"
        if "atari" not in env_kinds and ("NoFrameskip" in env_id or env_id.startswith("ALE/")):
            hint = "it is an Atari game: use ppo_atari.py"
        raise ArgError(f"--env-id {env_id} is not a registered gymnasium environment; {hint}") from None
    kind, action_space = env_kind(env_id)
    if kind not in env_kinds:
        what = "it is an Atari game" if kind == "atari" else f"it has a {action_space} action space"
        raise ArgError(f"--env-id {env_id} is not {accepted}: {what}; use {ENV_KINDS[kind].script}")
    if kind == "atari" and spec.kwargs.get("frameskip", 1) != 1:
        raise ArgError(
            f"--env-id {env_id} skips frames itself; use the NoFrameskip-v4 id of the game so that A4 does the skipping"
        )
    return kind


def envpool_task(env_id):
    """Whether `env_id` is one of envpool's tasks whose dict observations hold an action mask (its Jumanji tasks), which
    it makes itself (--vector-env envpool), not gymnasium; False where envpool is not installed. An id gymnasium knows
    (or one of one's own module) is gymnasium's: envpool is not even imported for it (with envpool imported, a run whose
    video met a full disk printed gymnasium's "Unable to save last video" at its exit, despite the filter for it)."""
    if ":" in env_id or env_id in gym.registry:
        return False
    try:
        import envpool

        with warnings.catch_warnings():  # gymnasium's notes on the float32 bounds of envpool's classic-control specs
            warnings.simplefilter("ignore")
            space = envpool.make_spec(env_id).observation_space
    except Exception:  # not installed, or not one of envpool's ids (its registry raises its own errors)
        return False
    return isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces


def check_flat(env_id, observation_space):
    """ppo_masked.py's D3 flattens every entry of a dict observation but its action mask with gymnasium's flatten: an
    entry it cannot flatten (a Graph or Sequence space, of no fixed size) is ArgError, naming it."""
    for key, space in observation_space.items():
        try:
            gym.spaces.flatdim(space)
        except (NotImplementedError, ValueError) as e:
            reason = (str(e).splitlines() or [""])[0]
            raise ArgError(
                f"--env-id {env_id}: its observation's {key!r} is a {type(space).__name__}, which cannot be flattened into "
                f"the agent's input ({reason}); give the env a Box, MultiBinary, Discrete or Dict of them"
            ) from None


def check_video_writer():
    """--capture-video: gymnasium's RecordVideo writes its mp4s with moviepy, which gymnasium leaves out unless asked for
    (without it, the run would stop with a traceback from gymnasium once its folder is made)."""
    try:
        import moviepy  # noqa: F401
    except ImportError:
        raise ArgError(
            "--capture-video: moviepy is not installed here; `pip install moviepy` (in requirements.txt), or drop "
            "--capture-video"
        ) from None


def check_rendering(env_id, kind):
    """--capture-video on an env that is not an Atari game: one frame must render here, or ArgError says what is
    missing. A MuJoCo env renders without a display through MUJOCO_GL (egl unless set, as make_env sets it); the
    classic-control envs (CartPole, Acrobot) render with pygame, which gymnasium leaves out unless asked for."""
    if kind == "continuous":
        os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        env = gym.make(env_id, render_mode="rgb_array")
        env.reset(seed=0)
        env.render()
        env.close()
    except gym.error.DependencyNotInstalled as e:
        reason = (str(e).splitlines() or [""])[0]
        raise ArgError(f"--capture-video: {env_id} cannot render here ({reason}); or drop --capture-video") from None
    except Exception as e:
        if kind != "continuous":
            reason = f"{type(e).__name__}: {e}"
            raise ArgError(f"--capture-video: {env_id} cannot render here ({reason}); drop --capture-video") from None
        raise ArgError(f"--capture-video: {gl_trouble('render', e)}; or drop --capture-video") from None


def gl_trouble(what, error):
    """What to say when MuJoCo cannot load or render with the MUJOCO_GL backend: a missing libEGL or libOSMesa shows
    as an AttributeError deep inside PyOpenGL."""
    reason = (str(error).splitlines() or [""])[0]
    return (
        f"MuJoCo cannot {what} with MUJOCO_GL={os.environ['MUJOCO_GL']} here ({type(error).__name__}: {reason}); "
        "set MUJOCO_GL=osmesa (apt install libosmesa6) or MUJOCO_GL=egl (apt install libegl1)"
    )


def check_action_mask(env_id, seed, kind, envpool):
    """ppo_masked.py's D1 and D2 contract (docs/flags.md#your-own-environment), checked on one env made for it: the mask is
    a dict observation's "action_mask" or, as sb3-contrib's MaskablePPO reads it, the env's action_masks() method (the
    script's make_envs puts it into the observation); booleans or 0/1 integers, one per choice of each action component
    (Discrete(n): n), or for a MultiDiscrete's dict entry one joint grid of all their combinations; the choices count
    from 0. ArgError in one line naming what the env gave; a joint grid is taken, with a note that it is enforced per
    component. `kind`: env_kind's ("masked": the mask is a dict entry); `envpool`: made by envpool (its tasks)."""
    from_method = kind != "masked"  # no "action_mask" entry: sb3-contrib's action_masks() method, or no mask at all
    if envpool:  # --vector-env envpool: envpool's tasks keep the contract: only a joint mask (Tetris') to note
        from .envpool_backend import EnvpoolTasks

        envs = EnvpoolTasks(env_id, num_envs=1, seed=seed)
        action_space, space = envs.single_action_space, envs.single_observation_space["action_mask"]
        mask = np.zeros(space.shape, space.dtype)  # its size and type: the values are of no matter here
        envs.close()
    else:
        env = gym.make(env_id, disable_env_checker=True)  # gymnasium's checker would warn of the faults named here
        if from_method and not env.has_wrapper_attr("action_masks"):
            env.close()
            raise ArgError(
                f"--env-id {env_id} gives no action mask; give its dict observations an 'action_mask' entry or "
                "the env an action_masks() method (sb3-contrib's), or add --no-mask-actions, or use ppo.py"
            )
        obs, _ = env.reset(seed=seed)
        action_space = env.action_space
        mask = np.asarray(env.get_wrapper_attr("action_masks")() if from_method else obs["action_mask"])
        declared = None if from_method else env.observation_space["action_mask"]
        env.close()
        if declared is not None and declared.shape != mask.shape:  # the vector env would fail to batch it
            raise ArgError(
                f"--env-id {env_id} gives an action mask of shape {mask.shape} where its observation space says "
                f"{declared}; make them agree"
            )
    nvec = np.array([action_space.n]) if isinstance(action_space, gym.spaces.Discrete) else action_space.nvec
    if nvec.ndim != 1:  # D2's components are one row
        raise ArgError(
            f"--env-id {env_id} has {nvec.ndim}-D MultiDiscrete({nvec.tolist()}) actions; ppo_masked.py takes one "
            f"row of components: give the env MultiDiscrete({nvec.ravel().tolist()}) and reshape the action in it"
        )
    if np.any(action_space.start != 0):  # D1: the mask's entry j is choice j, and the agent sends j
        raise ArgError(
            f"--env-id {env_id} has {action_space} actions; ppo_masked.py counts each component's choices from 0, "
            "as the mask's entries: give the space start 0 and add the start to the action in the env"
        )
    sizes, wanted = [nvec.sum()], f"{nvec.sum()} flags, one per action"
    if len(nvec) > 1 and not from_method:  # action_masks() is flat, as sb3-contrib's MaskablePPO reads it
        sizes.append(nvec.prod())
        wanted = f"{' + '.join(map(str, nvec))} = {nvec.sum()} flags (each component's choices in turn) or a joint "
        wanted += f"{' x '.join(map(str, nvec))} grid of {nvec.prod()}"
    if mask.size not in sizes:
        raise ArgError(
            f"--env-id {env_id} gives an action mask of {mask.size} entries for {action_space} actions; give {wanted}"
        )
    if mask.dtype.kind not in "biu" or not np.isin(mask, (0, 1)).all():  # 0.3 and NaN would read as valid
        raise ArgError(
            f"--env-id {env_id} gives a {mask.dtype} action mask (values {np.unique(mask)[:4]}); give booleans "
            "(True: valid) or 0/1 integers, as gymnasium's MultiBinary"
        )
    if mask.size != nvec.sum():
        print(
            f"note: --env-id {env_id} gives one joint {' x '.join(map(str, nvec))} action mask; D2 draws each "
            "component on its own, so the mask is enforced per component (each keeps the choices some allowed joint "
            "action has) and a joint action it forbids can still be sent",
            file=sys.stderr,
        )
