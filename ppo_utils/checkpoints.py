"""Checkpoints: what one holds (the model, the optimizer, the counters, the env statistics, the RNG states, the flags),
written durably and read without running code from the file; --resume (a run continues with its checkpoint's flags
and as many processes, X2) and --eval-checkpoint (the saved agent plays its env; a recurrent agent carries its state
from step to step, B3)."""

import os
import random
import re
import shlex
import sys
import time
from dataclasses import asdict, fields, replace
from glob import glob
from typing import NamedTuple

import numpy as np
import torch

from .distributed import launched_processes, rank_seed, seed_everything
from .env_adapters import env_statistics, finished_episodes, set_env_statistics
from .flag_checks import ArgError, check_args, check_flags, is_folder_name, run_name_part


class CheckpointError(OSError):
    """A checkpoint could not be written (a full disk, a lost mount): the message names the file, the reason and the
    last good checkpoint, which stays as it was."""


def numpy_state_saved(state):
    """A numpy RandomState's get_state() as a checkpoint keeps it: plain types and tensors only (weights_only)."""
    name, keys, *rest = state
    return (name, torch.from_numpy(keys.astype(np.int64)), *rest)


def numpy_state_loaded(saved):
    """numpy_state_saved's inverse, for RandomState.set_state()."""
    name, keys, *rest = saved
    return (name, keys.numpy().astype(np.uint32), *rest)


def rng_state():
    """The state of every random number generator the run draws from: python, numpy, torch (and CUDA)."""
    return {
        "python": random.getstate(),
        "numpy": numpy_state_saved(np.random.get_state()),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state):
    random.setstate(state["python"])
    np.random.set_state(numpy_state_loaded(state["numpy"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():  # a run saved where more GPUs were visible restores those it has
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])


CHECKPOINT_KEYS = {
    "script",
    "model",
    "optimizer",
    "env_stats",
    "rng",
    "args",
    "run_name",
    "iteration",
    "global_step",
    "kl_beta",
    "wandb_id",
}  # and "world_size", "local_world_size" (X2), which older checkpoints lack (read as 1)


def new_run_folder(name):
    """Creates runs/<name> for a new run, exclusively: where a run of the same name exists (two runs started in the same
    second with the same env, --exp-name and seed) the new one gets runs/<name>-2, -3, ... Returns its path; ArgError
    where the working folder does not let it be made (read-only, runs/ not a folder)."""
    for k in range(1, 1000):
        folder = os.path.join("runs", name if k == 1 else f"{name}-{k}")
        try:
            os.makedirs("runs", exist_ok=True)
            os.mkdir(folder)
            return folder
        except FileExistsError:
            if not os.path.isdir("runs"):
                raise ArgError(f"runs is a file in {os.getcwd()}; runs go in a folder runs/ there: move the file") from None
        except OSError as e:
            raise ArgError(
                f"cannot create the run folder {folder} in {os.getcwd()} ({e.strerror}); start the run from a folder you "
                "can write to"
            ) from None
    raise ArgError(f"runs/{name}: 999 runs of that name exist; pass another --exp-name")


def save_checkpoint(path, checkpoint):
    """Writes `checkpoint` (a dict with CHECKPOINT_KEYS) durably: to a temporary file, flushed to disk, renamed over
    `path`, then the rename flushed too, so that a crash or a power cut at any point leaves the old checkpoint or the
    new one, never a torn file. Where the disk refuses (full, read-only), the temporary file is removed and
    CheckpointError says so; the old checkpoint is untouched."""
    try:
        with open(path + ".tmp", "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as e:  # torch.save reports a failed write as a RuntimeError
        if os.path.lexists(path + ".tmp"):
            os.remove(path + ".tmp")
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
        last = f"the last good one stays: {path}" if os.path.exists(path) else "none was written before"
        raise CheckpointError(f"could not write the checkpoint {path} ({reason}); {last}") from None
    os.replace(path + ".tmp", path)
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename is an entry of the folder
    finally:
        os.close(folder)


def load_checkpoint(path, flag, args):
    """A checkpoint save_checkpoint wrote, loaded without executing code (weights_only); ArgError naming `flag` if the
    path is a folder (naming the agent.pt files in it and up to two levels below: a run folder, runs/, the folder that
    holds runs/), or the file is missing, truncated or written by another script than args.script."""
    if os.path.isdir(path):
        found = [p for pattern in ("agent.pt", "*/agent.pt", "*/*/agent.pt") for p in glob(os.path.join(path, pattern))]
        hint = "pass the agent.pt inside a run folder, e.g. runs/<run>/agent.pt"
        if len(found) == 1:
            hint = f"pass the agent.pt inside it: {found[0]}"
        elif found:
            hint = f"pass one of the {len(found)} agent.pt files under it; the newest: {max(found, key=os.path.getmtime)}"
        raise ArgError(f"{flag} {path}: is a folder; {hint}")
    if not os.path.isfile(path):
        raise ArgError(f"{flag} {path}: no such file; pass an agent.pt written under runs/ by --save-model or a checkpoint")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ArgError(f"{flag} {path} is not a readable checkpoint ({type(e).__name__}); use another one") from None
    if not isinstance(checkpoint, dict) or not CHECKPOINT_KEYS <= checkpoint.keys():
        raise ArgError(f"{flag} {path} was not written by {args.script}")
    if checkpoint["script"] != args.script:
        raise ArgError(f"{flag} {path} was written by {checkpoint['script']}; load it with that script")
    run_name, wandb_id = checkpoint["run_name"], checkpoint["wandb_id"]  # checked as names of files would be
    if not (isinstance(run_name, str) and is_folder_name(run_name)) or not (
        wandb_id is None or (isinstance(wandb_id, str) and re.fullmatch(r"[\w-]{1,64}", wandb_id))
    ):
        raise ArgError(f"{flag} {path} holds a run name or wandb id that this script never writes; use another checkpoint")
    unknown = sorted(set(checkpoint["args"]) - {field.name for field in fields(args)})
    if unknown:
        names = " ".join(f"--{key.replace('_', '-')}" for key in unknown)
        raise ArgError(
            f"{flag} {path} was written by another version of {args.script}, with flags this one does not have "
            f"({names}); load it with the version that wrote it"
        )
    return checkpoint


def script_as_started(script):
    """The script's path as this process was started with it (../ppo_atari.py, say), for commands a user pastes."""
    return sys.argv[0] if os.path.basename(sys.argv[0]) == script else script


def resume_command(script, path, world_size, local_world_size):
    """The shell command that continues a run of `world_size` processes, `local_world_size` of them on each machine
    (X2): the script as this process was started (its path as typed), each word quoted for the shell."""
    paths = path if isinstance(path, list) else [path]  # ppo_continuous_action_seeds.py: one checkpoint per agent
    words = shlex.join([script_as_started(script), "--resume", *paths])
    if world_size == 1:
        return f"python {words}"
    nodes = world_size // local_world_size
    if nodes == 1:
        return f"torchrun --nproc-per-node {world_size} {words}"
    return (
        f"torchrun --nnodes {nodes} --nproc-per-node {local_world_size} --rdzv-backend c10d --rdzv-endpoint HOST:29400 "
        f"{words} (on each machine; HOST: the first one)"
    )


def resume_flags(args, world_size=None):
    """--resume: (the checkpoint's flags, the checkpoint), or (args, None) without --resume. The run continues with
    the flags it was started with: another flag given with --resume, or another number of processes (X2: the
    schedules and the step budget count updates of all processes), is refused with an ArgError."""
    if not args.resume:
        return args, None
    world_size = world_size or launched_processes()
    resumed = load_checkpoint(args.resume, "--resume", args)
    default = type(args)()
    changed = [
        f"--{key.replace('_', '-')}"
        for key, value in asdict(args).items()
        if key != "resume" and value != getattr(default, key)
    ]
    if changed:
        raise ArgError(f"--resume continues the run with its own flags; drop {' '.join(changed)}")
    saved = resumed.get("world_size", 1), resumed.get("local_world_size", 1)
    if saved[0] != world_size:
        processes = f"{saved[0]} process{'es' if saved[0] > 1 else ''}"
        raise ArgError(
            f"--resume {args.resume} continues a run of {processes}, not {world_size}; continue it with: "
            + resume_command(args.script, args.resume, *saved)
        )
    args = replace(type(args)(**resumed["args"]), resume=args.resume)
    updates = args.total_timesteps // (args.batch_size * world_size)
    if resumed["iteration"] >= updates:
        raise ArgError(
            f"--resume {args.resume}: the run finished all its {updates} updates (step {resumed['global_step']}); "
            f"nothing is left to train; play it with --eval-checkpoint {args.resume}"
        )
    return args, resumed


class Update(NamedTuple):
    """An update's counters: the iteration (1 for the first update), the step the run has reached at its end, and the
    KL coefficient (G1's adaptive beta) it leaves."""

    iteration: int
    global_step: int
    kl_beta: float


def restore(resumed, agent, optimizer, envs, rank, args):
    """--resume: loads the checkpoint's parameters, optimizer, env statistics and RNG states into what train() made and
    seeded (X2: rank 0's RNG states; the other ranks draw numbers of their own from a seed moved on by the step).
    Returns the Update the checkpoint ended."""
    agent.load_state_dict(resumed["model"])
    optimizer.load_state_dict(optimizer_in_current_order(resumed["optimizer"], resumed["model"], agent))
    set_env_statistics(envs, resumed["env_stats"])
    set_rng_state(resumed["rng"])
    if rank > 0:
        seed_everything(rank_seed(args.seed + resumed["global_step"], rank), args.torch_deterministic)
    return Update(resumed["iteration"], resumed["global_step"], resumed["kl_beta"])


def optimizer_in_current_order(saved, model, agent):
    """The saved optimizer state `saved` with its entries in the order of agent.parameters(), which it lists by
    position. Checkpoints of earlier versions hold the parameters in another order (the heads were built after both
    bodies, before the scripts took CleanRL's order); the saved model's state_dict keeps the order in which they were
    registered then (a tensor shared by two names, as with a shared trunk, under its first name), which says where each
    entry belongs."""
    current = [name for name, _ in agent.named_parameters()]
    saved_order, seen = [], set()
    for name, tensor in model.items():
        where = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if where not in seen:
            seen.add(where)
            saved_order.append(name)
    if saved_order == current or sorted(saved_order) != sorted(current) or len(saved["param_groups"]) != 1:
        return saved
    position = {name: i for i, name in enumerate(current)}
    state = {position[saved_order[i]]: entry for i, entry in saved["state"].items()}
    return {"state": state, "param_groups": saved["param_groups"]}


class Checkpoints:
    """What a checkpoint holds and when rank 0 writes it (every --checkpoint-interval updates; at the end with
    --save-model; after a stop signal), and the restoring of a resumed run. `keep` notes the state at the end of each
    finished update, so that a checkpoint written after a stop signal saves that, not what the dropped rollout has
    since made of the RNG states, env statistics and learning rate."""

    def __init__(self, args, folder, rank, world_size):
        self.args, self.name, self.rank, self.world_size = args, os.path.basename(os.path.abspath(folder)), rank, world_size
        self.path = os.path.join(folder, "agent.pt")
        self.interval = args.checkpoint_interval if args.checkpoint_interval is not None else 100 * args.save_model

    def due(self, iteration):
        return self.rank == 0 and self.interval and iteration % self.interval == 0

    def keep(self, optimizer, envs, state=None):
        """state: the "rng" and "env_stats" to keep; None: this process's RNG states and the statistics of `envs`."""
        if self.rank == 0:
            learning_rates = [group["lr"] for group in optimizer.param_groups]
            self.kept = (state or {"rng": rng_state(), "env_stats": env_statistics(envs)}) | {"lr": learning_rates}

    def save(self, agent, optimizer, done: Update, wandb_id):
        """Writes the checkpoint of the finished update `done` with the kept state."""
        optimizer = optimizer.state_dict()  # its param_groups are copies
        for group, lr in zip(optimizer["param_groups"], self.kept["lr"]):
            group["lr"] = lr  # G6 may have annealed it for the rollout the stop dropped
        save_checkpoint(
            self.path,
            {
                "script": self.args.script,
                "model": agent.state_dict(),
                "optimizer": optimizer,
                "env_stats": self.kept["env_stats"],
                "rng": self.kept["rng"],
                "args": asdict(self.args),
                "run_name": self.name,
                "iteration": done.iteration,
                "global_step": done.global_step,
                "kl_beta": done.kl_beta,
                "wandb_id": wandb_id,
                "world_size": self.world_size,  # X2: a resumed run must have as many processes
                "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
            },
        )


def evaluate(args, make_envs, Agent):
    """--eval-checkpoint: the saved agent plays --eval-episodes episodes in one env made with the flags that trained it,
    its actions sampled as in training, the env statistics frozen at their saved values; videos and the seed come from
    `args`. A recurrent agent (one with initial_state) carries its state from step to step (B3). Prints and returns the
    episodic returns. The env is the checkpoint's: an --env-id that differs from it is refused, unless it is the
    script's default, which cannot be told from no --env-id at all (tyro fills it in) and is therefore let through."""
    check_flags(args)  # --eval-episodes, --seed; the training flags are the checkpoint's, checked below
    checkpoint = load_checkpoint(args.eval_checkpoint, "--eval-checkpoint", args)
    env_id = checkpoint["args"]["env_id"]
    if args.env_id not in (env_id, type(args)().env_id):
        raise ArgError(
            f"--env-id {args.env_id} is not the env of --eval-checkpoint {args.eval_checkpoint}, which was trained on "
            f"{env_id}; drop --env-id (the checkpoint's env is played) or pass --env-id {env_id}"
        )
    print(f"evaluating {args.eval_checkpoint} on {env_id} over {args.eval_episodes} episodes", flush=True)
    train_args = replace(
        type(args)(**checkpoint["args"]), num_envs=1, num_minibatches=1, capture_video=args.capture_video, seed=args.seed
    )
    check_args(train_args)
    torch.manual_seed(args.seed)
    name = f"{run_name_part(train_args.env_id)}__{args.exp_name}-eval__{args.seed}__{int(time.time())}"
    video_folder = os.path.join(new_run_folder(name), "videos") if args.capture_video else None  # runs/<name>/videos
    envs = make_envs(train_args, video_folder)
    agent = Agent(envs, train_args)
    agent.load_state_dict(checkpoint["model"])
    set_env_statistics(envs, checkpoint["env_stats"], frozen=True)

    episodic_returns = []
    next_obs, _ = envs.reset(seed=args.seed)
    next_done, state = torch.zeros(1), agent.initial_state(1) if hasattr(agent, "initial_state") else None
    while len(episodic_returns) < args.eval_episodes:
        obs = torch.as_tensor(next_obs, dtype=torch.uint8 if next_obs.dtype == np.uint8 else torch.float32)
        with torch.inference_mode():
            if state is None:
                action = agent.get_action_and_value(obs)[0]
            else:
                action, _, _, _, state = agent.get_action_and_value(obs, state, next_done)
        next_obs, _, terminations, truncations, infos = envs.step(action.numpy())
        next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32)
        episodic_returns += [episodic_return for _, episodic_return in finished_episodes(infos)]
    envs.close()
    mean, std = np.mean(episodic_returns), np.std(episodic_returns)
    episodes = len(episodic_returns)
    print(f"eval {args.eval_checkpoint} on {env_id}: mean return {mean:.1f} +- {std:.1f} over {episodes} episodes")
    return episodic_returns
