"""A training run's life cycle around the algorithm, which the three scripts share: the command line (`main`: training
or evaluation, stop signals in, one-line errors out), and `Run` (the run's folder, then each step's and each update's
bookkeeping: the NaN guard, `RunLog`'s TensorBoard, wandb and progress lines, `Checkpoints`, the last lines that say
where everything went). It decides no PPO detail."""

import os
import shlex
import shutil
import signal
import sys
import time
from collections import deque
from dataclasses import asdict
from glob import glob

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.tensorboard import SummaryWriter

from .checkpoints import CheckpointError, Checkpoints, Update, evaluate, new_run_folder, resume_command, script_as_started
from .distributed import all_ranks_mean
from .env_adapters import finished_episodes
from .flag_checks import ArgError, run_name_part


class NonFiniteError(RuntimeError):
    """Training produced a NaN or infinity: the message names the update and the last good checkpoint."""


AGREE_EVERY = 32  # X2: env steps between the ranks' agreements on whether a stop signal has come
STOPPED = "stopped by a signal; continue with:"  # the line that ends a stopped run (benchmark/run.py looks for it)


def main(args, train, make_envs, Agent):
    """A script's `__main__`: trains, or with --eval-checkpoint evaluates a saved agent. While training, SIGINT and
    SIGTERM ask train() to stop with a checkpoint (stop_on_signals); while evaluating they stop it at once. A bad
    command line or a NaN ends with one line on stderr (printed by rank 0 alone under torchrun) instead of a traceback."""
    try:
        if args.eval_checkpoint:  # Ctrl-C stops it at once, also where a shell started it in the background (SIG_IGN)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        evaluate(args, make_envs, Agent) if args.eval_checkpoint else train(args, stop_on_signals())
    except (ArgError, NonFiniteError, CheckpointError) as e:
        if int(os.environ.get("RANK", 0)) == 0:
            print(f"error: {e}", file=sys.stderr)
        else:  # X2: every rank meets the same error; rank 0 says it, and torchrun stops the group once one rank exits
            time.sleep(3)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C while evaluating
        sys.exit(130)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        # X2: the run is done and its process group closed, but torch's gloo backend sometimes aborts the interpreter's
        # teardown ("terminate called without an active exception"), which would fail the torchrun job: a worker whose
        # run has ended leaves without that teardown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def stop_on_signals():
    """Makes SIGINT and SIGTERM append their number to the returned list, which train() checks after each env step to
    stop with a checkpoint. A second Ctrl-C exits at once without one (exit code 130); a SIGINT within a second of the
    first counts as the same request, since torchrun forwards the terminal's Ctrl-C to its workers, who get two."""
    stop_signals, first_time, trainer = [], [], os.getpid()

    def on_signal(signum, frame):
        if os.getpid() != trainer:  # an env worker of --vector-env async (forked with this handler): the trainer stops it
            return
        rank0 = int(os.environ.get("RANK", 0)) == 0
        if signum == signal.SIGINT and first_time and time.monotonic() - first_time[0] > 1.0:
            if rank0:
                os.write(2, b"\nsecond Ctrl-C: exiting without a checkpoint (the last one written stays as it was)\n")
            os._exit(130)
        if not first_time:
            first_time.append(time.monotonic())
            if rank0:  # os.write: print() is not safe inside a signal handler
                os.write(2, b"\nstopping: saving the last finished update (Ctrl-C again to exit without saving)\n")
        stop_signals.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    return stop_signals


class RunLog:
    """What a run reports, on rank 0 (X2: the other ranks pass their episodes to it): TensorBoard scalars, wandb with
    --track (and its videos), the episodes that ended, the SPS and a progress line every 10 s."""

    def __init__(self, args, folder, video_folder, rank, world_size, resumed=None):
        self.args, self.video_folder, self.rank, self.world_size = args, video_folder, rank, world_size
        self.track = args.track and rank == 0
        self.wandb_id = None
        if self.track:
            self.wandb_id = start_wandb(args, folder, resumed["wandb_id"] if resumed else None)
        self.writer = None
        if rank == 0:
            # on resume, TensorBoard hides what the interrupted run logged after its checkpoint: no step appears twice
            self.writer = SummaryWriter(folder, purge_step=resumed["global_step"] + 1 if resumed else None)
            if resumed is None:
                table = "\n".join([f"|{key}|{value}|" for key, value in asdict(args).items()])
                self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
        self.episodes, self.episodic_returns, self.recent_returns, self.videos_logged = [], [], deque(maxlen=20), set()
        self.sps = 0

    def start(self, num_envs, global_step, last_step):
        """The clock and the step count the SPS are measured from; the step whose log prints the last progress line."""
        self.start_time = self.last_print = time.time()
        self.start_step, self.last_step = global_step, last_step
        self.episode_steps = np.zeros(num_envs, dtype=np.int64)

    def record_episodes(self, infos, global_step):
        """Keeps the return and length of the episodes that ended in this env step, for the next log(). The length
        counts the agent's steps only, not those the Atari wrappers take at a reset (A2's FIRE presses, A3's no-op)."""
        self.episode_steps += 1
        for i, episodic_return in finished_episodes(infos):
            self.episodes.append((global_step, episodic_return, int(self.episode_steps[i])))
            self.episode_steps[i] = 0

    def write(self, global_step, scalars):
        """Writes the update's scalars, the episodes that ended since the last call (of all ranks) and the SPS; prints
        a progress line every 10 s; sends finished videos to wandb."""
        episodes, self.episodes = self.episodes, []
        if self.world_size > 1:
            gathered = [None] * self.world_size
            dist.all_gather_object(gathered, episodes)  # X2: rank 0 logs the episodes of every rank
            episodes = sorted(episode for rank_episodes in gathered for episode in rank_episodes)
        self.episodic_returns += [r for _, r, _ in episodes]
        self.recent_returns.extend(r for _, r, _ in episodes)
        self.sps = int((global_step - self.start_step) / (time.time() - self.start_time))  # over all ranks
        if self.rank != 0:
            return
        for step_of_end, episodic_return, episodic_length in episodes:
            self.writer.add_scalar("charts/episodic_return", episodic_return, step_of_end)
            self.writer.add_scalar("charts/episodic_length", episodic_length, step_of_end)
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, global_step)
        self.writer.add_scalar("charts/SPS", self.sps, global_step)
        if time.time() - self.last_print > 10 or global_step == self.last_step:
            self.last_print = time.time()
            mean_return = f"{np.mean(self.recent_returns):.1f}" if self.recent_returns else "n/a"
            recent = f"mean return (last {len(self.recent_returns)}) {mean_return}"
            print(f"step {global_step}/{self.args.total_timesteps}  SPS {self.sps}  {recent}")
        if self.track and self.args.capture_video:
            self.videos_logged = log_videos(self.video_folder, self.videos_logged)

    def close(self):
        if self.track and self.args.capture_video:
            log_videos(self.video_folder, self.videos_logged)
        if self.writer is not None:
            self.writer.close()
        if self.track:
            import wandb

            wandb.finish()


class Run:
    """One training run's life cycle around train()'s algorithm: its folder (made for it alone, or a resumed run's own),
    its `log` (RunLog) and `checkpoints`, and the stop signals. train() calls, in order: `start`, `should_stop` (each
    env step), `check_finite` and `finish_update` (each update), `finish`."""

    def __init__(self, args, *, resumed, rank, world_size, stop_signals=()):
        if args.torch_threads > 0:
            torch.set_num_threads(args.torch_threads)
        self.args, self.resumed, self.rank, self.world_size = args, resumed, rank, world_size
        self.stop_signals, self.stopping, self.steps_unchecked = stop_signals, False, 0
        self.folder = run_folder(args, resumed, rank, world_size)
        self.name = os.path.basename(os.path.abspath(self.folder))
        # videos of env 0; a resumed session's in a folder of their own, so that the first session's stay
        self.video_folder = os.path.join(self.folder, f"videos-from-step-{resumed['global_step']}" if resumed else "videos")
        try:
            self.log = RunLog(args, self.folder, self.video_folder, rank, world_size, resumed)
        except ArgError:
            if rank == 0 and not resumed:
                shutil.rmtree(self.folder)  # made a moment ago, for this run: nothing else is in it
                if not os.listdir("runs"):
                    os.rmdir("runs")
            raise
        self.checkpoints = Checkpoints(args, self.folder, rank, world_size)
        trained = args.num_iterations * args.batch_size * world_size
        if rank == 0 and trained != args.total_timesteps and not resumed:
            print(
                f"note: --total-timesteps {args.total_timesteps} is not a whole number of updates of "
                f"{args.batch_size * world_size} steps: the run trains {trained} ({args.num_iterations} updates)",
                file=sys.stderr,
            )

    def start(self, agent, optimizer, envs, done: Update, state=None):
        """Takes what the checkpoints save, and the update the run starts after (none yet: iteration 0). state: a function
        returning the "rng" and "env_stats" a checkpoint keeps, where the run's are not this process's RNG states and the
        envs' statistics (ppo_continuous_action_seeds.py: each agent's own); envs: what the run reads of its envs, their
        num_envs and close()."""
        self.agent, self.optimizer, self.envs, self.done, self.state = agent, optimizer, envs, done, state
        if self.resumed and self.rank == 0:
            print(f"resumed {self.name} after update {done.iteration} (step {done.global_step}); the envs start new episodes")
        self.log.start(envs.num_envs, done.global_step, self.args.num_iterations * self.args.batch_size * self.world_size)
        self.checkpoints.keep(optimizer, envs, state and state())

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

    def finish_update(self, iteration, global_step, kl_beta):
        """Marks an update as finished (what a checkpoint after a stop signal saves); writes the checkpoint every
        --checkpoint-interval updates."""
        self.done = Update(iteration, global_step, kl_beta)
        self.checkpoints.keep(self.optimizer, self.envs, self.state and self.state())
        if self.checkpoints.due(iteration):
            self.save()

    def save(self):
        """Writes the checkpoint of the last finished update. Where the disk refuses, the run is closed and
        CheckpointError says how to continue from the last good checkpoint."""
        try:
            self.checkpoints.save(self.agent, self.optimizer, self.done, self.log.wandb_id)
        except CheckpointError as e:
            self.close()
            hint = "start the run again once there is room"
            if os.path.exists(self.checkpoints.path):
                hint = "once there is room, continue with: " + self.resume_command()
            raise CheckpointError(f"{e}; {hint}") from None

    def resume_command(self):
        local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))  # X2: processes on each machine
        return resume_command(self.args.script, self.checkpoints.path, self.world_size, local_world_size)

    def finish(self):
        """The checkpoint of the last finished update (with --save-model, a checkpoint interval, after a stop signal,
        or over an earlier one: a run folder's agent.pt is its last update or absent); then closes the run and says
        where its files are and what can be done with them."""
        saving = self.stopping or self.args.save_model or self.checkpoints.interval or os.path.exists(self.checkpoints.path)
        if self.rank == 0 and saving:
            self.save()
        self.close()
        if self.rank != 0:
            return
        if saving:
            done = self.done
            print(f"saved the agent after update {done.iteration} (step {done.global_step}) to {self.checkpoints.path}")
        print(f"logs: {self.folder} (see them with: tensorboard --logdir {os.path.dirname(self.folder) or '.'})")
        if self.stopping:
            print(f"{STOPPED} {self.resume_command()}")
        elif saving:
            command = ["python", script_as_started(self.args.script), "--eval-checkpoint", self.checkpoints.path]
            print(f"evaluate it with: {shlex.join(command)}")
        else:
            print("no checkpoint written: --save-model or --checkpoint-interval N keeps the agent")

    def close(self):
        """Closes the envs, the logs and (X2) the process group."""
        self.envs.close()
        self.log.close()
        if self.world_size > 1:
            dist.barrier()  # no rank leaves while another still talks to it
            dist.destroy_process_group()


def run_folder(args, resumed, rank, world_size):
    """Where a run writes: a resumed run in its checkpoint's folder, wherever it is started from; a new one in runs/<name>,
    made by rank 0 for this run alone (X2: the other ranks take rank 0's)."""
    if resumed:
        return os.path.dirname(args.resume) or "."
    name = f"{run_name_part(args.env_id)}__{args.exp_name}__{args.seed}__{int(time.time())}"
    folder = new_run_folder(name) if rank == 0 else None
    if world_size > 1:
        shared = [folder]
        dist.broadcast_object_list(shared, src=0)
        folder = shared[0]
    return folder


def start_wandb(args, folder, wandb_id=None):
    """--track: starts wandb's run (a resumed run's own, by its id), keeping its files in the run folder; returns its id.
    ArgError where wandb is not installed or cannot start (no key and no network, say)."""
    try:
        import wandb
    except ImportError:
        raise ArgError(
            "--track: wandb is not installed here; `pip install wandb` (in requirements.txt), or leave out --track"
        ) from None

    try:
        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=asdict(args),
            name=os.path.basename(os.path.abspath(folder)),
            save_code=True,
            id=wandb_id,
            resume="allow",
            dir=folder,
        )
    except Exception as e:  # wandb's UsageError, CommError, ...: none means a bug of this run
        reason = (str(e).strip().splitlines() or [""])[0]
        raise ArgError(
            f"--track: wandb did not start ({type(e).__name__}: {reason}); log in with `wandb login`, or set "
            "WANDB_MODE=offline to keep wandb's logs in the run folder and `wandb sync` them later"
        ) from None
    return wandb.run.id


def log_videos(video_folder, logged):
    """Sends the finished videos of env 0 to wandb (gymnasium's RecordVideo and wandb's monitor_gym do not mix)."""
    import wandb

    for path in sorted(glob(f"{video_folder}/*.mp4")):
        if path not in logged:
            wandb.log({"videos": wandb.Video(path, format="mp4")})
            logged = logged | {path}
    return logged
