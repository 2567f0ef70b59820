"""What a run reports (`RunLog`, on rank 0): TensorBoard's scalars, wandb with --track (and its videos), the episodes
that ended, the SPS and the progress lines, and the line a session starts with. A log the disk refuses is
LogWriteError, which ppo_utils.command_line.main turns into one line. It decides no PPO detail."""

import os
import threading
import time
from collections import deque
from dataclasses import asdict
from glob import glob

import numpy as np
import torch.distributed as dist
from torch.utils.tensorboard import SummaryWriter

from .contract import declared
from .flag_checks import ArgError


class LogWriteError(OSError):
    """The TensorBoard log could not be written (its writer thread met a full disk or a lost mount)."""


# the seconds between two progress lines; benchmark/tune.py reads a trial's returns on the way from them, more often
PROGRESS_SECONDS = float(os.environ.get("PPO_PROGRESS_SECONDS", 10))


class RunLog:
    """What a run reports, on rank 0 (X2: the other ranks pass their episodes to it): TensorBoard scalars, wandb with
    --track (and its videos), the episodes that ended, the SPS and a progress line every PROGRESS_SECONDS."""

    def __init__(self, args, folder, video_folder, rank, world_size, resumed_from=None, stop_signals=()):
        self.args, self.video_folder, self.rank, self.world_size = args, video_folder, rank, world_size
        self.stop_signals = stop_signals
        self.elapsed_before = float(resumed_from.get("elapsed", 0.0)) if resumed_from else 0.0  # earlier sessions' seconds
        self.track = args.track and rank == 0
        self.wandb_id = None
        if self.track:
            self.wandb_id = start_wandb(args, folder, resumed_from["wandb_id"] if resumed_from else None)
        self.writer = None
        if rank == 0:
            threading.excepthook = quiet_log_writer
            try:  # on resume, TensorBoard hides what the interrupted run logged after its checkpoint: no step twice
                self.writer = SummaryWriter(folder, purge_step=resumed_from["global_step"] + 1 if resumed_from else None)
                if resumed_from is None:
                    table = "\n".join([f"|{key}|{value}|" for key, value in asdict(args).items()])
                    self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
            except OSError as e:
                raise LogWriteError(e.errno, e.strerror) from None
        self.episodes, self.episodic_returns, self.recent_returns, self.videos_logged = [], [], deque(maxlen=20), set()
        self.sps = 0

    def start(self, num_envs, global_step, last_step):
        """The clock and the step count the SPS are measured from; the step whose log prints the last progress line.
        The first update of a session is its warm-up (the first rollout, --compile building its graph), which the
        progress line's SPS and time left leave out."""
        self.start_time = self.last_print = time.time()
        self.start_step, self.last_step = global_step, last_step
        self.warm = None  # (step, time) at the end of the first update, where the steady rate is measured from
        self.episode_steps = np.zeros(num_envs, dtype=np.int64)

    def elapsed(self, now=None):
        """The seconds the run has trained until `now` (default: now): this session's, and at a resume its earlier
        sessions' (its checkpoint's)."""
        return self.elapsed_before + (time.time() if now is None else now) - self.start_time

    def record_episodes(self, infos, global_step):
        """Keeps the return and length of the episodes that ended in this env step, for the next log(). The length
        counts the agent's steps only, not those the Atari wrappers take at a reset (A2's FIRE presses, A3's no-op)."""
        self.episode_steps += 1
        for i, episodic_return in finished_episodes(infos):
            self.episodes.append((global_step, episodic_return, int(self.episode_steps[i])))
            self.episode_steps[i] = 0

    def write(self, global_step, scalars):
        """Writes the update's scalars, the episodes that ended since the last call (of all ranks) and the SPS; prints
        a progress line every PROGRESS_SECONDS; sends finished videos to wandb."""
        episodes, self.episodes = self.episodes, []
        if self.world_size > 1:
            gathered = [None] * self.world_size
            dist.all_gather_object(gathered, episodes)  # X2: rank 0 logs the episodes of every rank
            episodes = sorted(episode for rank_episodes in gathered for episode in rank_episodes)
        self.episodic_returns += [r for _, r, _ in episodes]
        self.recent_returns.extend(r for _, r, _ in episodes)
        now = time.time()
        self.sps = int((global_step - self.start_step) / max(now - self.start_time, 1e-9))  # over all ranks, warm-up too
        self.warm = self.warm or (global_step, now)
        if self.rank != 0:
            return
        try:  # TensorBoard's thread writes the file; a write it failed fails the next add_scalar
            for step_of_end, episodic_return, episodic_length in episodes:
                self.writer.add_scalar("charts/episodic_return", episodic_return, step_of_end)
                self.writer.add_scalar("charts/episodic_length", episodic_length, step_of_end)
            for tag, value in scalars.items():
                self.writer.add_scalar(tag, value, global_step)
            self.writer.add_scalar("charts/SPS", self.sps, global_step)
        except OSError as e:
            raise LogWriteError(e.errno, e.strerror) from None
        if (now - self.last_print > PROGRESS_SECONDS or global_step == self.last_step) and not len(self.stop_signals):
            self.last_print = now  # (no line once a stop is asked: "stopping:" is the last word until it is done)
            mean_return = f"{np.mean(self.recent_returns):.1f}" if self.recent_returns else "n/a"
            recent = f"mean return (last {len(self.recent_returns)}) {mean_return}"
            # the steady rate, after the warm-up: with it counted, the time left came out 5-10 times too long
            steady_steps, steady_time = global_step - self.warm[0], now - self.warm[1]
            sps = int(steady_steps / max(steady_time, 1e-9)) if steady_steps else self.sps
            elapsed = clock(self.elapsed(now))  # a resumed run's earlier sessions too
            left = clock((self.last_step - global_step) / max(sps, 1))
            timing = f"{elapsed} elapsed, {left} left"
            if not steady_steps:  # the first update's line: no steady rate yet
                video = " and env 0's video, each of its steps rendered" if self.args.capture_video else ""
                timing = f"{elapsed} elapsed (warm-up{video}), time left from the next line"
            timing = elapsed if global_step == self.last_step else timing
            print(f"step {global_step}/{self.args.total_timesteps}  SPS {sps}  {timing}  {recent}")
        if self.track and self.args.capture_video:
            self.videos_logged = log_videos(self.video_folder, self.videos_logged)

    def flush(self):
        """Puts every scalar written so far into the run's event files, on disk (TensorBoard's thread writes them when
        it gets to it, which on a loaded machine can be after the checkpoint that follows them): run.save_runs calls it
        before a checkpoint, so that a run killed after its checkpoint has the log of every update the checkpoint holds,
        and its --resume goes on from there with none lost."""
        if self.writer is None:
            return
        try:
            self.writer.flush()
            folder = self.writer.get_logdir()
            for name in sorted(os.listdir(folder)):
                if name.startswith("events.out.tfevents."):  # this session's, and the earlier ones' (already on disk)
                    events = os.open(os.path.join(folder, name), os.O_RDONLY)
                    try:
                        os.fsync(events)
                    finally:
                        os.close(events)
        except OSError as e:
            raise LogWriteError(e.errno, e.strerror) from None

    def close(self):
        if self.track and self.args.capture_video:
            log_videos(self.video_folder, self.videos_logged)
        if self.writer is not None:
            try:
                self.writer.close()
            except OSError as e:
                raise LogWriteError(e.errno, e.strerror) from None
        if self.track:
            import wandb

            wandb.finish()


def say_what_is_to_come(args, folder, updates, world_size):
    """The line a session starts with (rank 0), as soon as its folder is known: the first update, its warm-up (the
    first rollout, --compile building its graph), can take a minute before the first progress line."""
    notes = [note for flag, note in declared(type(args), "warm_up").items() if getattr(args, flag)]  # --compile's
    compiling = f" ({'; '.join(notes)})" if notes else ""
    video = ""
    if args.capture_video:  # RecordVideo renders every step of the episodes it records (0, 1, 8, 27, ... of env 0)
        video = ("; --capture-video renders each step of the episodes it records (0, 1, 8, 27, ...), which slows them "
                 "(MuJoCo without a GPU: minutes for the first update)")  # fmt: skip
    print(
        f"{folder}: {updates} updates of {args.batch_size * world_size} steps to go; the first one warms up{compiling}, "
        f"then a progress line every {PROGRESS_SECONDS:g} s{video}",
        flush=True,
    )


def clock(seconds):
    """A duration as h:mm:ss (the progress line's elapsed and left times)."""
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


def finished_episodes(infos):
    """(env index, return) of each episode that ended in this step: with SAME_STEP autoreset its statistics (those of
    gymnasium's RecordEpisodeStatistics) are in infos["final_info"]."""
    final_info = infos.get("final_info", {})
    if "episode" not in final_info:
        return []
    ended = np.flatnonzero(final_info["_episode"])
    return list(zip(ended.tolist(), final_info["episode"]["r"][ended].tolist()))


def quiet_log_writer(hook_args, report=threading.excepthook):
    """threading.excepthook: TensorBoard's writer thread ends on a failed write with a traceback; the next write raises
    the same error, which the run reports in one line. Other threads' exceptions are reported as they were."""
    if not (isinstance(hook_args.exc_value, OSError) and type(hook_args.thread).__module__.startswith("tensorboard")):
        report(hook_args)


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
