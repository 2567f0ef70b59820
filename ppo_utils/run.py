"""A training run's life cycle around the algorithm (`Run`): its folder (made for it alone, or a resumed run's own,
locked while it trains), its logs (logs.RunLog) and checkpoints (checkpoints.Checkpoints), the stop signals, the NaN
guard of each update and of what the envs return, and its end: the last checkpoint and the lines that say where
everything went. It decides no PPO detail."""

import fcntl
import os
import shlex
import shutil
import sys
import tempfile
import time
import warnings
from glob import escape as glob_escape
from glob import glob

import numpy as np
import torch
import torch.distributed as dist

from .checkpoints import CheckpointError, Checkpoints, Update, new_run_folder, resume_command, save_checkpoints
from .checkpoints import script_as_started
from .distributed import all_ranks_mean, processes_per_machine
from .flag_checks import ArgError, run_name_part
from .logs import RunLog, say_what_is_to_come
from .mujoco_log import keep_mujoco_log


class NonFiniteError(RuntimeError):
    """Training produced a NaN or infinity: the message names the update and the last good checkpoint."""


class ObservationError(NonFiniteError):
    """An env returned a NaN or infinite observation: the message names the env, the step and the last good checkpoint.
    Under torchrun (X2) one rank meets it, not all: the rank that does says it."""


AGREE_EVERY = 32  # X2: env steps between the ranks' agreements on whether a stop signal has come
STOPPED = "stopped by a signal; continue with:"  # the line that ends a stopped run (benchmark/run.py looks for it)


class Run:
    """One training run's life cycle around train()'s algorithm: its folder (made for it alone, or a resumed run's own),
    its `log` (RunLog) and `checkpoints`, and the stop signals. train() calls, in order: `start`, `should_stop` (each
    env step), `check_finite` and `finish_update` (each update), `finish`. Several runs of one process
    (ppo_continuous_action_seeds.py's agents) save and finish together: save_runs, finish_runs."""

    active = []  # the runs of this process not yet closed: where a write fails, main() names their checkpoints

    def __init__(self, args, *, resumed_from, rank, world_size, stop_signals=()):
        """resumed_from: the checkpoint a resumed run continues from (as resume_flags loaded it); None for a new run."""
        self.args, self.resumed_from, self.rank, self.world_size = args, resumed_from, rank, world_size
        self.stop_signals, self.stopping, self.steps_unchecked, self.log = stop_signals, False, 0, None
        self.folder = run_folder(args, resumed_from, rank, world_size)
        self.name = os.path.basename(os.path.abspath(self.folder))
        self.lock = lock_run_folder(self.folder, args.resume) if rank == 0 else None  # X2: rank 0 writes the folder
        # videos of env 0; each resumed session's in a new folder of their own, so that no video is overwritten
        videos = f"videos-from-step-{resumed_from['global_step']}" if resumed_from else "videos"
        self.video_folder = new_name(os.path.join(self.folder, videos))
        self.checkpoints = Checkpoints(args, self.folder, rank, world_size)
        Run.active.append(self)
        keep_mujoco_log(Run.active[0].folder)  # before make_envs: an AsyncVectorEnv's forked workers inherit the setting
        trained = args.num_iterations * args.batch_size * world_size
        chosen = args.total_timesteps != type(args)().total_timesteps  # a note for the user's budget, not for the default
        if rank == 0 and not resumed_from:  # a resumed session says it once its checkpoint has passed its checks
            say_what_is_to_come(args, self.folder, args.num_iterations, world_size)
        if rank == 0 and trained != args.total_timesteps and not resumed_from and chosen:
            print(
                f"note: --total-timesteps {args.total_timesteps} is not a whole number of updates of "
                f"{args.batch_size * world_size} steps: the run trains {trained} ({args.num_iterations} updates)",
                file=sys.stderr,
            )

    def start(self, agent, optimizer, envs, last_update: Update, state=None):
        """Takes what the checkpoints save, and the update the run starts after (none yet: iteration 0); opens the logs
        (so that a resumed checkpoint that fails its checks leaves its run folder as it was). state: a function
        returning the "rng" and "env_stats" a checkpoint keeps, where the run's are not this process's RNG states and the
        envs' statistics (ppo_continuous_action_seeds.py: each agent's own); envs: what the run reads of its envs, their
        num_envs and close()."""
        self.agent, self.optimizer, self.envs, self.last_update, self.state = agent, optimizer, envs, last_update, state
        keep_mujoco_log(Run.active[0].folder)  # again: make_envs may have been the first to load MuJoCo (one's own env)
        try:
            self.log = RunLog(
                self.args, self.folder, self.video_folder, self.rank, self.world_size, self.resumed_from, self.stop_signals
            )
        except ArgError:
            envs.close()
            self.abandon()
            raise
        last, steps = last_update, self.args.num_iterations * self.args.batch_size * self.world_size
        if self.resumed_from and self.rank == 0:
            print(f"resumed {self.name} after update {last.iteration} (step {last.global_step}); the envs start new episodes")
            say_what_is_to_come(self.args, self.folder, self.args.num_iterations - last.iteration, self.world_size)
        self.log.start(envs.num_envs, last.global_step, steps)
        self.checkpoints.keep(optimizer, envs, state and state(), self.log.elapsed())

    def abandon(self):
        """A run that ends before it starts (a checkpoint or wandb refused): its folder as it was before (a new run's
        removed, a resumed session's empty video folder too)."""
        self.let_go()
        if self.rank == 0 and os.path.isdir(self.video_folder) and not os.listdir(self.video_folder):
            os.rmdir(self.video_folder)
        if self.rank == 0 and not self.resumed_from and os.path.isdir(self.folder):
            shutil.rmtree(self.folder)  # made a moment ago, for this run: nothing else is in it
            if not os.listdir("runs"):
                os.rmdir("runs")

    def should_stop(self, last_step_of_rollout):
        """Whether SIGINT or SIGTERM has come (to any rank: X2 ranks agree every AGREE_EVERY steps and at the end of the
        rollout, not every step, so that a stop comes well within torchrun's 30 s between its signal and its kill)."""
        self.steps_unchecked += 1
        if self.world_size == 1:
            self.stopping = bool(self.stop_signals)
        elif last_step_of_rollout or self.steps_unchecked >= AGREE_EVERY:
            self.steps_unchecked = 0
            stop = torch.tensor(float(bool(self.stop_signals)), device=next(self.agent.parameters()).device)
            self.stopping = all_ranks_mean(stop, self.world_size).item() > 0  # device sync
        return self.stopping

    def check_finite(self, stats, iteration, global_step):
        """The NaN guard: before a NaN or infinite statistic or parameter reaches a checkpoint, closes the run (envs,
        logs) and raises NonFiniteError, naming the update and the last good checkpoint."""
        values = [v for v in stats.values() if isinstance(v, torch.Tensor)] + list(self.agent.parameters())
        if not all(torch.isfinite(v).all() for v in values):  # device sync
            self.close()
            last_good = self.checkpoints.path if os.path.exists(self.checkpoints.path) else "none written yet"
            raise NonFiniteError(
                f"a loss or a parameter became NaN or infinite in update {iteration} (step {global_step}); training stopped "
                f"and wrote no checkpoint; the last good one: {last_good}"
            )

    def check_observations(self, obs, global_step):
        """The NaN guard of what the envs return (`obs`, the observations of the env step that ended at `global_step`,
        as the agent is to see them, still on the host): where one is NaN or infinite, closes the run and raises
        ObservationError naming the env and the step, before the agent acts on it and before an update learns from it."""
        bad, kind = nonfinite_envs(obs, self.envs)
        if bad:
            self.close_alone()
            raise ObservationError(self.observation_fault(bad, kind, global_step))

    def observation_fault(self, bad, kind, global_step):
        """What check_observations says: the envs `bad` (indices) returned `kind` ("NaN") observations at the step."""
        which = f"env {bad[0]}" if len(bad) == 1 else f"envs {', '.join(map(str, bad))}"
        which += f" of rank {self.rank}" if self.world_size > 1 else ""
        what = f"a {kind} observation" if len(bad) == 1 else f"{kind} observations"
        last_good = self.checkpoints.path if os.path.exists(self.checkpoints.path) else "none written yet"
        return (
            f"{which} of {self.args.env_id} returned {what} at step {global_step} (in the rollout of update "
            f"{self.last_update.iteration + 1}); training stopped before an update learned from it and wrote no "
            f"checkpoint; the last good one: {last_good}"
        )

    def close_alone(self):
        """close(), but under torchrun (X2) without the barrier: a fault one rank met leaves the others mid-rollout."""
        if self.world_size == 1:
            return self.close()
        self.envs.close()
        self.log.close()
        self.let_go()

    def finish_update(self, iteration, global_step, kl_beta):
        """Marks an update as finished (what a checkpoint after a stop signal saves); writes the checkpoint every
        --checkpoint-interval updates."""
        self.last_update = Update(iteration, global_step, kl_beta)
        self.checkpoints.keep(self.optimizer, self.envs, self.state and self.state(), self.log.elapsed())
        if self.checkpoints.due(iteration):
            self.save()

    def save(self):
        """Writes the checkpoint of the last finished update (save_runs of this run alone)."""
        save_runs([self], self.args.script)

    def resume_command(self):
        return resume_command(self.args.script, self.checkpoints.path, self.world_size, processes_per_machine())

    def finish(self):
        """The checkpoint of the last finished update, the run closed, the last lines (finish_runs of this run alone)."""
        finish_runs([self], self.args.script)

    def close(self):
        """Closes the envs, the logs and (X2) the process group; lets go of the run folder. A log the disk refuses
        raises LogWriteError with the run still active, so that main() names its checkpoint."""
        self.envs.close()
        self.log.close()
        if self.world_size > 1:
            dist.barrier()  # no rank leaves while another still talks to it
            dist.destroy_process_group()
        self.let_go()

    def let_go(self):
        """The run is no longer this process's: out of Run.active, its folder's lock released."""
        if self in Run.active:
            Run.active.remove(self)
            keep_mujoco_log(Run.active[0].folder if Run.active else None)
        if self.lock is not None:
            os.close(self.lock)  # its lock goes with it
            self.lock = None

    def close_after_failure(self):
        """Closes the run as far as the disk lets it, and removes the video being written when it failed (ffmpeg writes
        an mp4's index, its moov box, last: a file without one does not play)."""
        warnings.filterwarnings("ignore", ".*Unable to save last video")  # gymnasium's, as the broken recorder is dropped
        try:
            self.close()
        except Exception:  # the logs' last flush meets the same full disk; the envs' video writer its broken pipe
            self.let_go()
        for path in glob(os.path.join(glob_escape(self.video_folder), "*.mp4")):
            with open(path, "rb") as f:
                if b"moov" not in f.read():
                    os.remove(path)


def save_runs(runs, script):
    """Writes the checkpoints of the last finished update of `runs` (one run, or ppo_continuous_action_seeds.py's agents)
    as one set (save_checkpoints), each run's log flushed to disk first (RunLog.flush): a crash leaves all of the last set
    or all of this one, with the log of every update it holds, which one command of `script` continues. Where the disk
    refuses, the runs are closed and CheckpointError names the last good set and that command."""
    paths = [run.checkpoints.path for run in runs]
    for run in runs:  # the log of the updates the checkpoints hold goes first: a kill after them loses none of it
        run.log.flush()
    contents = [run.checkpoints.content(run.agent, run.optimizer, run.last_update, run.log.wandb_id) for run in runs]
    try:
        save_checkpoints(paths, contents)
    except CheckpointError as e:
        for run in runs:
            run.close_after_failure()  # the logs' last flush may meet the same full disk
        hint = "start the run again once there is room"
        if all(os.path.exists(path) for path in paths):
            hint = f"once there is room, continue with: {continue_command(runs, script)}"
        raise CheckpointError(f"{e}; {hint}") from None


def continue_command(runs, script):
    """The command that continues `runs` from their checkpoints: `script` with --resume of each (X2: under torchrun)."""
    return resume_command(script, [run.checkpoints.path for run in runs], runs[0].world_size, processes_per_machine())


def finish_runs(runs, script):
    """The end of one run, or of ppo_continuous_action_seeds.py's agents together: the checkpoints of their last finished
    update as one set (with --save-model, a checkpoint interval, after a stop signal, or over an earlier one: a run
    folder's agent.pt is its last update or absent; X2: rank 0 writes it); then closes the runs and says where their
    files are and one command of `script`: the one that continues them after a stop signal, or one that plays an agent."""
    first, paths = runs[0], [run.checkpoints.path for run in runs]
    saving = first.stopping or first.args.save_model or first.checkpoints.interval or any(map(os.path.exists, paths))
    if first.rank == 0 and saving:
        save_runs(runs, script)
    for run in runs:
        run.close()
    if first.rank != 0:
        return
    agents = "the agent" if len(runs) == 1 else "the agents"
    if saving:
        last = first.last_update
        print(f"saved {agents} after update {last.iteration} (step {last.global_step}) to {' '.join(paths)}")
    folders = " ".join(run.folder for run in runs)
    print(f"logs: {folders} (see them with: tensorboard --logdir {os.path.dirname(first.folder) or '.'})")
    if first.stopping:
        print(f"{STOPPED} {continue_command(runs, script)}")
    elif saving:
        command = shlex.join(["python", script_as_started(script), "--eval-checkpoint", paths[0]])
        print(f"evaluate {'it' if len(runs) == 1 else 'one'} with: {command}")
    else:
        print(f"no checkpoint written: --save-model or --checkpoint-interval N keeps {agents}")


def nonfinite_envs(obs, envs):
    """([the env indices whose observation in `obs` is NaN or infinite], "NaN" or "infinite"), or ([], None) where all
    are finite (most steps: one np.isfinite on the host, no device sync; frames of uint8 are never checked). `obs` is
    what the agent is to see; where M1's statistics are shared by all envs, one env's NaN makes every env's normalized
    observation NaN, and the envs named are those whose raw observation (the vector env's own, under its wrappers) is."""
    obs = np.asarray(obs) if not isinstance(obs, dict) else None
    if obs is None or obs.dtype.kind != "f" or np.isfinite(obs).all():
        return [], None
    rows = obs.reshape(len(obs), -1)
    base = getattr(envs, "unwrapped", None)  # gymnasium: SyncVectorEnv._observations, AsyncVectorEnv.observations
    raw = getattr(base, "_observations", getattr(base, "observations", None))
    if isinstance(raw, np.ndarray) and raw.dtype.kind == "f" and len(raw) == len(obs) and not np.isfinite(raw).all():
        rows = raw.reshape(len(raw), -1)
    bad = ~np.isfinite(rows).all(1)
    return np.flatnonzero(bad).tolist(), "NaN" if np.isnan(rows[bad]).any() else "infinite"


def lock_run_folder(folder, resume):
    """Locks the run folder for this process (flock on the folder itself: the lock goes when the process ends, however
    it ends, and leaves no file); ArgError where another process holds it (a run that writes in it, or another --resume
    of its checkpoint) or the folder cannot be written. Returns the folder's descriptor, which holds the lock."""
    which = f"--resume {resume}: its run folder" if resume else "the run folder"
    try:
        lock = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        tempfile.TemporaryFile(dir=folder).close()  # a file with no name, gone when closed
    except OSError as e:
        raise ArgError(
            f"{which} {folder} cannot be written ({e.strerror}); make it writable, or copy the run folder to where you "
            "can write and resume the agent.pt in the copy"
        ) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        raise ArgError(
            f"--resume {resume}: another process is training this run now (it holds the run folder {folder}); let it "
            "finish or stop it (its checkpoint is then the one to resume)"
        ) from None
    except OSError:  # a file system without flock (some NFS mounts): the run goes on unlocked
        pass
    return lock


def new_name(path):
    """`path`, or where it exists path-2, path-3, ...: a folder no earlier session wrote."""
    name, k = path, 1
    while os.path.lexists(name):
        k += 1
        name = f"{path}-{k}"
    return name


def run_folder(args, resumed_from, rank, world_size):
    """Where a run writes: a resumed run in its checkpoint's folder, wherever it is started from; a new one in runs/<name>,
    made by rank 0 for this run alone (X2: the other ranks take rank 0's)."""
    if resumed_from:
        return os.path.dirname(args.resume) or "."
    name = f"{run_name_part(args.env_id)}__{args.exp_name}__{args.seed}__{int(time.time())}"
    folder = new_run_folder(name) if rank == 0 else None
    if world_size > 1:
        shared = [folder]
        dist.broadcast_object_list(shared, src=0)
        folder = shared[0]
    return folder
