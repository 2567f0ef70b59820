"""Checkpoints: what one holds (the model, the optimizer, the counters, the env statistics, the RNG states, the flags),
written durably, read without running code from the file and checked whole before anything is made of it; --resume (a
run continues with its checkpoint's flags and as many processes, X2). --eval-checkpoint's play is run.evaluate's."""

import io
import math
import os
import random
import re
import shlex
import sys
import typing
import warnings
from dataclasses import asdict, fields, replace
from glob import escape as glob_escape
from glob import glob
from typing import Literal, NamedTuple

import numpy as np
import torch

from .distributed import launched_processes, process_rank, processes_per_machine, rank_seed
from .env_statistics import env_statistics, set_env_statistics
from .flag_checks import ArgError, check_args, check_not_empty, is_folder_name, run_name_part


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
}  # and "world_size", "local_world_size", "torchrun_job" (X2) and "elapsed", which older checkpoints lack (read as 1, 1,
# None and 0 s)

# The layout of a checkpoint, saved as its "format" (one without it is of format 1: written before the number was). Another
# format is refused, not migrated: the one earlier layout (Adam's state in another parameter order, before the layers were
# built in CleanRL's order) came before --fused-adam, so its checkpoints are refused already, as lacking that flag.
CHECKPOINT_FORMAT = 1


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
            if os.path.islink("runs") and not os.path.exists("runs"):
                raise ArgError(
                    f"runs in {os.getcwd()} is a link to {os.readlink('runs')}, which does not exist; make that folder, "
                    "or remove the link"
                ) from None
            if not os.path.isdir("runs"):
                raise ArgError(f"runs is a file in {os.getcwd()}; runs go in a folder runs/ there: move the file") from None
        except OSError as e:
            raise ArgError(
                f"cannot create the run folder {folder} in {os.getcwd()} ({e.strerror}); start the run from a folder you "
                "can write to"
            ) from None
    raise ArgError(f"runs/{name}: 999 runs of that name exist; pass another --exp-name")


def save_checkpoint(path, checkpoint):
    """Writes `checkpoint` (a dict with CHECKPOINT_KEYS) durably: save_checkpoints of one."""
    save_checkpoints([path], [checkpoint])


def save_checkpoints(paths, checkpoints):
    """Writes each checkpoint durably over its path, all of them as one set (ppo_continuous_action_seeds.py's agents):
    each to its temporary file path.tmp, flushed to disk, and only once all are there, each renamed over its path, then
    the renames flushed too. A crash or a power cut before the first rename leaves the old set; one between two renames
    leaves the rest of the new set complete in the .tmp files, which finish_interrupted_set renames on --resume; never a
    torn file. Where the disk refuses (full, read-only) before the renames, the temporary files are removed and
    CheckpointError says so; the old checkpoints are untouched."""
    renamed = 0
    try:
        for path, checkpoint in zip(paths, checkpoints):
            content = io.BytesIO()
            torch.save(checkpoint, content)  # in memory first: a full disk is then the OSError of a write, not torch's
            with open(path + ".tmp", "wb") as f:
                f.write(content.getbuffer())
                f.flush()
                os.fsync(f.fileno())
        for path in paths:
            os.replace(path + ".tmp", path)
            renamed += 1
        flush_folders(paths)
    except OSError as e:
        for other in paths if not renamed else []:  # once one is renamed, the others' new ones finish the set on --resume
            try:
                os.remove(other + ".tmp")
            except OSError:  # not written, or a disk that refuses this too
                pass
        kept = [other for other in paths if os.path.exists(other)]
        last = f"the last good one stays: {kept[0]}" if len(kept) == 1 else f"the last good ones stay: {' '.join(kept)}"
        raise CheckpointError(
            f"could not write the checkpoint {path} ({e.strerror or e}); {last if kept else 'none was written before'}"
        ) from None


def flush_folders(paths):
    """Flushes to disk the folders that hold `paths`: a rename is an entry of its folder."""
    for folder in dict.fromkeys(os.path.dirname(path) or "." for path in paths):
        folder = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def finish_interrupted_set(paths):
    """--resume of several runs' checkpoints written as one set (save_checkpoints): where the writing process died
    between two renames, so that some are of a later update than the others, renames into place the later update's
    checkpoints complete in the others' .tmp files; where it died in the renames of the very first set, the agents not
    yet renamed have no agent.pt at all, only agent.pt.tmp. Returns the paths it completed (none where the set is whole,
    or where what is there is not such a set, which the checks of --resume then name: no agent.pt renamed yet means the
    .tmp files may not all have been on disk)."""

    def update_of(path):
        try:
            update = torch.load(path, map_location="cpu", weights_only=True)["iteration"]
        except Exception:  # missing, a folder, torn, foreign: --resume's own checks say what it is
            return None
        return update if isinstance(update, int) else None

    updates = [update_of(path) for path in paths]
    missing = [not os.path.lexists(path) for path in paths]  # the first set's, not renamed yet
    written = [update for update, gone in zip(updates, missing) if not gone]
    if None in written or not written or len(set(updates)) == 1:
        return []
    behind = [path for path, update in zip(paths, updates) if update != max(written)]
    if not all(update_of(path + ".tmp") == max(written) for path in behind):
        return []
    try:
        for path in behind:
            os.replace(path + ".tmp", path)
        flush_folders(behind)
    except OSError:  # a folder that cannot be written: --resume names it
        return []
    return behind


def load_checkpoint(path, flag, args):
    """A checkpoint save_checkpoint wrote, loaded without executing code (weights_only) and checked whole before anything
    is made of it (its flags, counters and RNG states here; its model, optimizer and env statistics against the run's
    own by check_restorable); ArgError naming `flag` if the path is a folder (naming the agent.pt files in it and up to
    two levels below: a run folder, runs/, the folder that holds runs/), or the file is missing, not a regular file,
    truncated, written by another script than args.script, or changed since it was written."""
    if os.path.isdir(path):
        found = [p for pattern in ("agent.pt", "*/agent.pt", "*/*/agent.pt") for p in glob(os.path.join(path, pattern))]
        hint = "pass the agent.pt inside a run folder, e.g. runs/<run>/agent.pt"
        if len(found) == 1:
            hint = f"pass the agent.pt inside it: {found[0]}"
        elif found:
            hint = f"pass one of the {len(found)} agent.pt files under it; the newest: {max(found, key=os.path.getmtime)}"
        raise ArgError(f"{flag} {path}: is a folder; {hint}")
    if os.path.exists(path) and not os.path.isfile(path):
        raise ArgError(f"{flag} {path}: not a regular file (a device or a pipe); pass an agent.pt written under runs/")
    if not os.path.isfile(path):
        raise ArgError(f"{flag} {path}: no such file; pass an agent.pt written under runs/ by --save-model or a checkpoint")
    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of a file it then refuses
            warnings.simplefilter("ignore")
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ArgError(f"{flag} {path} is not a readable checkpoint ({type(e).__name__}); use another one") from None
    if not isinstance(checkpoint, dict) or not CHECKPOINT_KEYS <= checkpoint.keys():
        raise ArgError(f"{flag} {path} was not written by {args.script}")
    if checkpoint.get("format", 1) != CHECKPOINT_FORMAT:
        raise ArgError(
            f"{flag} {path} was written by another version of this project (checkpoint format {checkpoint['format']!r}, "
            f"where this one reads format {CHECKPOINT_FORMAT}); load it with the version that wrote it"
        )
    if checkpoint["script"] != args.script:
        raise ArgError(f"{flag} {path} was written by {checkpoint['script']}; load it with that script")
    if not isinstance(checkpoint["args"], dict) or not all(isinstance(key, str) for key in checkpoint["args"]):
        raise damaged(flag, path, "no flags, or flags without names")
    run_name, wandb_id = checkpoint["run_name"], checkpoint["wandb_id"]  # checked as names of files would be
    if not (isinstance(run_name, str) and is_folder_name(run_name)) or not (
        wandb_id is None or (isinstance(wandb_id, str) and re.fullmatch(r"[\w-]{1,64}", wandb_id))
    ):
        raise ArgError(f"{flag} {path} holds a run name or wandb id that this script never writes; use another checkpoint")
    names = {field.name for field in fields(args)}
    unknown, missing = sorted(set(checkpoint["args"]) - names), sorted(names - set(checkpoint["args"]))
    if unknown:  # a later version's flag, or one this copy of the script lost: what it did cannot be known here
        raise ArgError(
            f"{flag} {path} was written by another version of {args.script}, with flags this one does not have "
            f"({flag_names(unknown)}); load it with the version that wrote it"
        )
    if missing:  # a flag added since the checkpoint was written: its default is what the run did without it
        defaults = type(args)()
        checkpoint["args"] |= {name: getattr(defaults, name) for name in missing}
        values = ", ".join(f"--{name.replace('_', '-')} {getattr(defaults, name)!r}" for name in missing)
        if process_rank() == 0:  # X2: said once
            print(f"note: {flag} {path} was written before {flag_names(missing)} existed; it loads with {values}",
                  file=sys.stderr)  # fmt: skip
    hints = typing.get_type_hints(type(args))
    for name, value in checkpoint["args"].items():
        if not fits(value, hints[name]):
            kind = str(hints[name]).replace("typing.", "") if typing.get_args(hints[name]) else hints[name].__name__
            raise damaged(flag, path, f"--{name.replace('_', '-')} {value!r}, which is not {kind}")
    counters = {"iteration": int, "global_step": int, "kl_beta": float, "world_size": int, "local_world_size": int}
    for name, kind in counters.items():
        value = checkpoint.get(name, 1)
        least = 1 if name.endswith("world_size") else 0
        if not fits(value, kind) or value < least or not math.isfinite(value):
            raise damaged(flag, path, f"{name} {value!r}, which no run reaches")
    elapsed = checkpoint.get("elapsed", 0.0)  # written since issue 84; a checkpoint without it trained 0 s before
    if not fits(elapsed, float) or not math.isfinite(elapsed) or elapsed < 0:
        raise damaged(flag, path, f"elapsed {elapsed!r}, which no run reaches")
    if checkpoint.get("world_size", 1) % checkpoint.get("local_world_size", 1):
        raise damaged(flag, path, "a process count that is no whole number of machines")
    try:  # on generators of its own: the process's stay as they are
        rng = checkpoint["rng"]
        random.Random().setstate(rng["python"])
        np.random.RandomState().set_state(numpy_state_loaded(rng["numpy"]))
        torch.Generator().set_state(rng["torch"])
        assert all(isinstance(state, torch.Tensor) and state.dtype == torch.uint8 for state in rng["cuda"])
    except Exception:
        raise damaged(flag, path, "random number generator states that cannot be restored") from None
    return checkpoint


def damaged(flag, path, what):
    """The ArgError of a checkpoint changed after it was written (by hand, or by a damaged disk): it names what it holds."""
    return ArgError(f"{flag} {path} holds {what}: it was changed after it was written; use another checkpoint")


def flag_names(names):
    return " ".join(f"--{name.replace('_', '-')}" for name in names)


def fits(value, hint):
    """Whether `value` is of the type `hint`, a flag's annotation (a type, X | None, a Literal of strings): isinstance's
    answer, but that an int will do for a float (PEP 484's reading of an annotation) and a bool will not for an int."""
    if typing.get_origin(hint) is Literal:
        return value in typing.get_args(hint)
    kinds = typing.get_args(hint) or (hint,)  # X | None: X or None
    kinds += (int,) if float in kinds else ()
    return isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))


def check_restorable(checkpoint, flag, path, agent, optimizer, env_stats, same_count=True):
    """ArgError unless the checkpoint's model, optimizer state (optimizer None: not restored) and env statistics fit the
    agent, optimizer and env statistics (env_statistics()) this run made from the checkpoint's flags: a model of another
    env or network, an empty or partial Adam state after updates, statistics missing where the flags keep them. Checks
    only: nothing is loaded. same_count: as many statistics entries as envs where each env normalizes by itself (an
    evaluation's single env takes the first)."""
    model, own = checkpoint["model"], agent.state_dict()
    if not isinstance(model, dict) or not all(isinstance(tensor, torch.Tensor) for tensor in model.values()):
        raise damaged(flag, path, "a model that is not a set of named tensors")
    if model.keys() != own.keys():
        names = sorted(model.keys() ^ own.keys(), key=str)
        raise damaged(flag, path, f"a model of another network ({'lacking' if names[0] in own else 'with'} {names[0]})")
    for name, tensor in own.items():
        if model[name].shape != tensor.shape:
            raise ArgError(
                f"{flag} {path} holds a network whose {name} is {tuple(model[name].shape)}, where one for its flags "
                f"(--env-id {checkpoint['args']['env_id']}) is {tuple(tensor.shape)}: its flags were changed after it "
                "was written; use another checkpoint"
            )
    if not all(torch.isfinite(tensor).all() for tensor in model.values()):  # the NaN guard never saves one
        raise damaged(flag, path, "weights that are NaN or infinite")
    if optimizer is not None:
        check_optimizer_state(checkpoint, flag, path, agent, optimizer)
    if not isinstance(checkpoint["env_stats"], dict):
        raise damaged(flag, path, "env statistics that are not a dict")
    for key, expected in env_stats.items():
        saved = checkpoint["env_stats"].get(key)
        if expected is None:
            continue
        if saved is None or isinstance(saved, list) != isinstance(expected, list):
            raise damaged(flag, path, f"no {key} statistics of the kind its flags keep (M1, M3)")
        saved, expected = (saved, expected) if isinstance(saved, list) else ([saved], [expected])
        if (same_count and len(saved) != len(expected)) or not saved:
            raise damaged(flag, path, f"{len(saved)} {key} statistics for {len(expected)} envs")
        for entry in saved:
            fine = isinstance(entry, dict) and all(isinstance(entry.get(part), torch.Tensor) for part in ("mean", "var"))
            fine = fine and entry["mean"].shape == entry["var"].shape == expected[0]["mean"].shape
            fine = fine and bool(torch.isfinite(entry["mean"]).all() and (entry["var"] >= 0).all())
            if not (fine and fits(entry.get("count"), float) and entry["count"] > 0):
                raise damaged(flag, path, f"{key} statistics that do not fit its env's observations or rewards")


def check_optimizer_state(checkpoint, flag, path, agent, optimizer):
    """check_restorable's part for the optimizer: loads the saved state into a copy of the run's optimizer."""
    saved, parameters = checkpoint["optimizer"], list(agent.parameters())
    try:
        scratch = type(optimizer)([torch.zeros_like(p) for p in parameters], **optimizer.defaults)
        scratch.load_state_dict(saved)
    except Exception:
        raise damaged(flag, path, "an optimizer state that is not one of this network's") from None
    state = saved["state"]
    if not set(state) <= set(range(len(parameters))):
        raise damaged(flag, path, "Adam moments for parameters this network does not have")
    if checkpoint["iteration"] > 0 and len(state) != len(parameters):
        raise damaged(flag, path, f"Adam's moments for {len(state)} of {len(parameters)} parameters after update "
                      f"{checkpoint['iteration']}")  # fmt: skip
    for i, entry in state.items():
        moments = [entry.get(name) for name in ("exp_avg", "exp_avg_sq")]
        if not all(isinstance(m, torch.Tensor) and m.shape == parameters[i].shape for m in moments):
            raise damaged(flag, path, "Adam moments of other shapes than the network's parameters")
        if not all(torch.isfinite(m).all() for m in moments):
            raise damaged(flag, path, "Adam moments that are NaN or infinite")


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
    if nodes == 1:  # --standalone: its own rendezvous on a free port (two jobs on one machine would meet on 29500)
        return f"torchrun --standalone --nproc-per-node {world_size} {words}"
    return (
        f"torchrun --nnodes {nodes} --nproc-per-node {local_world_size} --rdzv-backend c10d --rdzv-endpoint HOST:29400 "
        f"{words} (on each machine; HOST: the first one)"
    )


def resume_flags(args, world_size=None):
    """--resume: (the checkpoint's flags, the checkpoint), or (args, None) without --resume. The run continues with
    the flags it was started with: another flag given with --resume (refuse_other_flags), or another number of
    processes (X2: the schedules and the step budget count updates of all processes), is refused with an ArgError, as
    are flags and counters in the checkpoint that no run of this script could have written."""
    check_not_empty(args)  # `--resume ''` is an error, never a new run
    restart = restarted_job_checkpoint(args)  # X2: torchrun restarted the job's workers: its run goes on
    if not args.resume and not restart:
        return args, None
    world_size = world_size or launched_processes()
    checkpoint = load_checkpoint(args.resume or restart, "--resume", args)
    if not restart:  # a restarted job's flags are those it was launched with, which its checkpoint holds
        refuse_other_flags(args)
    args = replace(args, resume=args.resume or restart)
    saved = checkpoint.get("world_size", 1), checkpoint.get("local_world_size", 1)
    if saved[0] != world_size:
        processes = f"{saved[0]} process{'es' if saved[0] > 1 else ''}"
        raise ArgError(
            f"--resume {args.resume} continues a run of {processes}, not {world_size}; continue it with: "
            + resume_command(args.script, args.resume, *saved)
        )
    args = replace(type(args)(**checkpoint["args"]), resume=args.resume)
    checked_saved_flags(args, "--resume", args.resume, world_size)
    updates = args.total_timesteps // (args.batch_size * world_size)
    if checkpoint["global_step"] != checkpoint["iteration"] * args.batch_size * world_size:
        raise damaged("--resume", args.resume, f"step {checkpoint['global_step']} after update {checkpoint['iteration']}")
    if checkpoint["iteration"] >= updates:
        raise ArgError(
            f"--resume {args.resume}: the run finished all its {updates} updates (step {checkpoint['global_step']}); "
            f"nothing is left to train; play it with --eval-checkpoint {args.resume}"
        )
    folder, run_name = os.path.dirname(args.resume) or ".", checkpoint["run_name"]
    if os.path.basename(os.path.abspath(folder)) != run_name:  # the run writes in its folder: its logs, its agent.pt
        raise ArgError(
            f"--resume {args.resume} is a checkpoint of the run {run_name}, which would write into the folder {folder} "
            f"of another run (or a renamed copy); resume it from a folder named {run_name}, e.g. runs/{run_name}/agent.pt"
        )
    return args, checkpoint


def refuse_other_flags(args, typed=()):
    """ArgError naming the flags given with --resume, which continues a run with its own: those set to another value
    than their default, and those in `typed` (main(): typed on the command line, whatever their values)."""
    default = type(args)()
    others = [
        f.name
        for f in fields(args)
        if f.name != "resume" and (f.name in typed or getattr(args, f.name) != getattr(default, f.name))
    ]
    if others:
        raise ArgError(f"--resume continues the run with its own flags; drop {flag_names(others)}")


def checked_saved_flags(args, flag, path, world_size=None):
    """check_args on the flags the checkpoint `path` holds: an ArgError names the checkpoint that holds the flag, which
    the user did not type."""
    try:
        check_args(args, world_size)
    except ArgError as e:
        raise ArgError(f"{flag} {path} holds flags this script refuses: {e}") from None


def restarted_job_checkpoint(args):
    """X2: torchrun --max-restarts restarts a job's workers when one of them dies; the restarted workers continue from
    the last checkpoint their run wrote, found by the job's id (torchrun's --rdzv-id: a new one per --standalone job,
    the same across its restarts), so that the job loses at most the updates since. None on a first start, where the
    job has no id of its own, or where its run wrote no checkpoint yet (the workers then start it again). A job that
    was itself a --resume continues from its checkpoint, which its run has written over since."""
    job = os.environ.get("TORCHELASTIC_RUN_ID")
    if args.resume or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) == 0 or job in (None, "none"):
        return None
    name = f"{run_name_part(args.env_id)}__{args.exp_name}__{args.seed}__"
    for path in sorted(glob(os.path.join("runs", glob_escape(name) + "*", "agent.pt")), key=os.path.getmtime, reverse=True):
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # another run's file, cut or foreign: not this job's
            continue
        if isinstance(saved, dict) and saved.get("torchrun_job") == job:
            if process_rank() == 0:
                restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
                print(f"torchrun restarted the workers (restart {restart}): the run continues from {path}", flush=True)
            return path
    return None


class Update(NamedTuple):
    """An update's counters: the iteration (1 for the first update), the step the run has reached at its end, and the
    KL coefficient (G1's adaptive beta) it leaves."""

    iteration: int
    global_step: int
    kl_beta: float


def restore(checkpoint, agent, optimizer, envs, rank, args):
    """--resume of a script's run: restore_runs of its checkpoint into what train() made and seeded, the RNG states and
    env statistics the process's (X2: rank 0's RNG states; the other ranks draw numbers of their own from a seed moved
    on by the step). Returns the Update the checkpoint ended."""

    def set_streams(_):  # the one checkpoint
        set_env_statistics(envs, checkpoint["env_stats"])
        set_rng_state(checkpoint["rng"])
        if rank > 0:  # python, numpy and torch, as train() seeds them
            seed = rank_seed(args.seed + checkpoint["global_step"], rank)
            random.seed(seed)
            np.random.seed(seed)
            torch.manual_seed(seed)

    return restore_runs([args.resume], [checkpoint], [agent], [optimizer], [env_statistics(envs)], set_streams)[0]


def restore_runs(paths, checkpoints, agents, optimizers, env_stats, set_streams):
    """--resume of one run or of several (ppo_continuous_action_seeds.py's agents): each checkpoint (of `paths`) checked
    against its run's agent, optimizer and env statistics (`env_stats`, as env_statistics() gives them) that train()
    made from its flags, all of them before anything is loaded; then each one's parameters and optimizer state, and
    `set_streams(checkpoints)`, which puts their RNG states and env statistics where the runs keep them. Returns each
    one's Update."""
    for path, checkpoint, agent, optimizer, stats in zip(paths, checkpoints, agents, optimizers, env_stats, strict=True):
        check_restorable(checkpoint, "--resume", path, agent, optimizer, stats)
    for checkpoint, agent, optimizer in zip(checkpoints, agents, optimizers):
        agent.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
    set_streams(checkpoints)
    return [Update(c["iteration"], c["global_step"], c["kl_beta"]) for c in checkpoints]


class Checkpoints:
    """What a checkpoint holds and when rank 0 writes it (every --checkpoint-interval updates; at the end with
    --save-model; after a stop signal). `keep` notes the state at the end of each
    finished update, so that a checkpoint written after a stop signal saves that, not what the dropped rollout has
    since made of the RNG states, env statistics and learning rate."""

    def __init__(self, args, folder, rank, world_size):
        self.args, self.name, self.rank, self.world_size = args, os.path.basename(os.path.abspath(folder)), rank, world_size
        self.path = os.path.join(folder, "agent.pt")
        self.interval = args.checkpoint_interval if args.checkpoint_interval is not None else 100 * args.save_model

    def due(self, iteration):
        return self.rank == 0 and self.interval and iteration % self.interval == 0

    def keep(self, optimizer, envs, state=None, elapsed=0.0):
        """state: the "rng" and "env_stats" to keep; None: this process's RNG states and the statistics of `envs`.
        elapsed: the seconds the run has trained, its earlier sessions' included (the progress line's "elapsed")."""
        if self.rank == 0:
            learning_rates = [group["lr"] for group in optimizer.param_groups]
            self.kept = (state or {"rng": rng_state(), "env_stats": env_statistics(envs)}) | {"lr": learning_rates}
            self.kept["elapsed"] = float(elapsed)

    def content(self, agent, optimizer, last_update: Update, wandb_id):
        """The checkpoint of the finished update `last_update` with the kept state, as run.save_runs writes it."""
        optimizer = optimizer.state_dict()  # its param_groups are copies
        for group, lr in zip(optimizer["param_groups"], self.kept["lr"]):
            group["lr"] = lr  # G6 may have annealed it for the rollout the stop dropped
        return {
            "script": self.args.script,
            "model": agent.state_dict(),
            "optimizer": optimizer,
            "env_stats": self.kept["env_stats"],
            "rng": self.kept["rng"],
            "args": asdict(self.args),
            "run_name": self.name,
            "iteration": last_update.iteration,
            "global_step": last_update.global_step,
            "kl_beta": last_update.kl_beta,
            "elapsed": self.kept.get("elapsed", 0.0),  # a resumed session's progress line goes on from it
            "wandb_id": wandb_id,
            "format": CHECKPOINT_FORMAT,
            "world_size": self.world_size,  # X2: a resumed run must have as many processes
            "local_world_size": processes_per_machine(),
            "torchrun_job": os.environ.get("TORCHELASTIC_RUN_ID") if self.world_size > 1 else None,  # its restarts
        }
