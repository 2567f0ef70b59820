"""The flag checks every script runs before anything starts (before a run folder exists): each numeric flag's range,
how the flags fit together, and whether the env id is one the script trains on. A bad command line ends in ArgError,
whose one-line message names the flag and the fix (ppo_utils.run.main prints it). No PPO detail is decided here."""

import importlib
import os
from dataclasses import fields
from typing import NamedTuple

import gymnasium as gym
import numpy as np


class ArgError(ValueError):
    """A bad command line: the message names the flag and the fix."""


# what each numeric flag of the scripts takes, where a script has it: flag -> (the test its value must pass, what the
# message asks for). The message is "--flag value: what it asks for"; a flag that a value turns off says which. An unset
# optional flag (None) is not tested; a float must first be finite (tyro reads "nan" and "inf").
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
    "clip_obs": (lambda v: v >= 0, "pass a bound > 0, or 0 to turn M2 off"),
    "clip_reward": (lambda v: v >= 0, "pass a bound > 0, or 0 to turn M4 off"),
    "noop_max": (lambda v: v >= 0, "pass a count of no-ops, or 0 to turn A1 off"),
    "frame_skip": (lambda v: v >= 1, "pass a count of frames, or 1 to turn A4 off"),
    "frame_stack": (lambda v: v >= 1, "pass a count of frames, or 1 to turn A6 off"),
    "target_kl": (lambda v: v >= 0, "pass a KL >= 0 (0: one epoch per update), or leave it unset (None) to turn X3 off"),
    "rnn_hidden_size": (lambda v: v >= 1, "pass a positive size"),
}


class EnvKind(NamedTuple):
    """A kind of env that check_args tells apart."""

    description: str
    example: str  # an env id of the kind
    script: str  # the script(s) that train on it


ENV_KINDS = {
    "continuous": EnvKind(
        "an env with vector observations and continuous (Box) actions", "Hopper-v5", "ppo_continuous_action.py"
    ),
    "atari": EnvKind("an Atari game", "BreakoutNoFrameskip-v4", "ppo_atari.py or ppo_rnn.py"),
    "discrete-vector": EnvKind("an env with vector observations and discrete actions", "CartPole-v1", "ppo_rnn.py"),
}


def find_spec(env_id):
    """The EnvSpec gym.make finds for `env_id`. gymnasium's "module:EnvId" form (one's own env) imports the module first,
    as gym.make does, for it registers EnvId (gymnasium.register); ArgError in one line where the id is malformed, the
    module cannot be imported, or it registers no EnvId. A plain id not registered raises gym.error.Error (check_args
    says what the script takes). A module that fails otherwise (a bug in it) raises its own error, with its traceback."""
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
    if find_spec(env_id).entry_point == "ale_py.env:AtariEnv":
        return "atari", "Discrete"
    try:
        env = gym.make(env_id)
    except gym.error.Error as e:
        raise ArgError(f"--env-id {env_id} cannot be created: {e}") from None
    except Exception as e:  # importing MuJoCo dies inside PyOpenGL where MUJOCO_GL names a backend with no library
        if "MUJOCO_GL" not in os.environ:
            raise
        raise ArgError(f"--env-id {env_id}: {gl_trouble('load', e)}; or unset MUJOCO_GL, which nothing needs") from None
    observation_space, action_space = env.observation_space, env.action_space
    env.close()
    vector = isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1
    if isinstance(action_space, gym.spaces.Box) and vector:  # the continuous agent's first layer takes a vector
        return "continuous", "Box"
    if isinstance(action_space, gym.spaces.Discrete) and vector:
        return "discrete-vector", "Discrete"
    observations = type(observation_space).__name__ + str(getattr(observation_space, "shape", None) or "")
    raise ArgError(
        f"--env-id {env_id} has {observations} observations and a {type(action_space).__name__} action space, which "
        "none of the scripts trains on"
    )


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


def check_flags(args) -> None:
    """Checks each numeric flag of `args` against FLAG_RULES, the finiteness of every float flag first, and
    --exp-name, which names a folder; ArgError names the first flag out of its range."""
    for field in fields(args):
        value = getattr(args, field.name)
        rule, fix = FLAG_RULES.get(field.name, (lambda v: True, "pass a finite number"))
        if (isinstance(value, float) and not np.isfinite(value)) or (value is not None and not rule(value)):
            raise ArgError(f"--{field.name.replace('_', '-')} {value}: {fix}")
    check_name("--exp-name", args.exp_name)
    if args.resume and args.eval_checkpoint:
        raise ArgError("--resume and --eval-checkpoint: pass one (--resume trains on, --eval-checkpoint only plays)")


def check_args(args, world_size=None) -> None:
    """Validates the flags (FLAG_RULES, then how they fit together) and the env id before anything starts, before any
    run folder too; raises ArgError with a one-line message. What a
    script accepts comes from its Args: `env_kinds` (keys of ENV_KINDS) and `minibatch_unit` ("batch_size": any split
    of the batch; "num_envs": minibatches of whole env sequences). world_size: the processes under torchrun (X2), each
    collecting a batch of its own."""
    world_size = world_size or int(os.environ.get("WORLD_SIZE", 1))  # X2: torchrun's processes
    check_flags(args)
    if getattr(args, args.minibatch_unit) % args.num_minibatches:
        whole = getattr(args, args.minibatch_unit)
        of = f"--num-envs {whole} (minibatches are made of whole env sequences)"
        if args.minibatch_unit == "batch_size":
            of = f"the batch of --num-envs {args.num_envs} x --num-steps {args.num_steps} = {whole}"
        raise ArgError(f"--num-minibatches {args.num_minibatches} does not divide {of}; choose a divisor of {whole}")
    if args.norm_adv and args.minibatch_size == 1:
        raise ArgError(
            f"--num-minibatches {args.num_minibatches} makes minibatches of one sample, whose advantage G3 cannot "
            "normalize (one value has no spread); choose fewer minibatches, or add --no-norm-adv"
        )
    if args.total_timesteps < args.batch_size * world_size:
        batch = f"one batch ({args.batch_size})"
        if world_size > 1:
            batch = f"one update of {world_size} processes ({world_size} x {args.batch_size} = {args.batch_size * world_size})"
        raise ArgError(f"--total-timesteps {args.total_timesteps} is less than {batch}; raise it")
    if getattr(args, "norm_per_env", False) and args.vector_env != "sync":
        raise ArgError("--norm-per-env keeps the statistics in each env, where checkpoints reach them with --vector-env sync "
                       "only; add --vector-env sync")
    if getattr(args, "norm_per_env", False) and world_size > 1:
        raise ArgError("--norm-per-env keeps statistics per env, which torchrun's ranks (X2) do not merge; drop one of them")
    if args.vector_env == "envpool" and args.capture_video:
        raise ArgError("--capture-video needs frames that envpool does not render; add --vector-env sync")
    if args.vector_env == "envpool" and getattr(args, "noop_max", 1) == 0:
        raise ArgError("envpool cannot turn A1 off (--noop-max 0); add --vector-env sync")
    if getattr(args, "gray_after_resize", False) and not args.warp_frame:
        raise ArgError("--gray-after-resize changes A5's warp, which --no-warp-frame turns off; drop one of the two")
    if args.vector_env == "envpool" and getattr(args, "gray_after_resize", False):
        raise ArgError("envpool grays its frames its own way, not with --gray-after-resize; add --vector-env sync")

    accepted = " or ".join(ENV_KINDS[kind].description for kind in args.env_kinds)
    try:
        spec = find_spec(args.env_id)
    except gym.error.Error:
        hint = f"this script takes {accepted}, e.g. {ENV_KINDS[args.env_kinds[0]].example}"
        if "atari" not in args.env_kinds and ("NoFrameskip" in args.env_id or args.env_id.startswith("ALE/")):
            hint = "it is an Atari game: use ppo_atari.py"
        raise ArgError(f"--env-id {args.env_id} is not a registered gymnasium environment; {hint}") from None
    kind, action_space = env_kind(args.env_id)
    if kind not in args.env_kinds:
        what = "it is an Atari game" if kind == "atari" else f"it has a {action_space} action space"
        raise ArgError(f"--env-id {args.env_id} is not {accepted}: {what}; use {ENV_KINDS[kind].script}")
    if kind == "atari" and spec.kwargs.get("frameskip", 1) != 1:
        raise ArgError(
            f"--env-id {args.env_id} skips frames itself; use the NoFrameskip-v4 id of the game so that A4 "
            "(--frame-skip) does the skipping"
        )
    if kind != "atari" and args.vector_env == "envpool":
        raise ArgError("--vector-env envpool runs Atari games only; add --vector-env sync")
    if args.vector_env == "envpool" and ":" in args.env_id:  # envpool looks the game up by its registered id
        raise ArgError(f"--vector-env envpool takes the game's registered id: pass --env-id {args.env_id.split(':', 1)[1]}")
    if kind != "atari" and args.capture_video:
        check_rendering(args.env_id, kind)
    if args.capture_video:
        check_video_writer()


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
