"""A training run's life cycle around the algorithm, which the scripts share: the command line (`main`: training
or evaluation, stop signals in, one-line errors out), `evaluate` (--eval-checkpoint: the saved agent plays its env),
and `Run` (the run's folder, then each step's and each update's bookkeeping: the NaN guard, `RunLog`'s TensorBoard,
wandb and progress lines, `Checkpoints`, the last lines that say where everything went). It decides no PPO detail."""

import errno
import fcntl
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import deque
from dataclasses import asdict, fields, replace
from glob import escape as glob_escape
from glob import glob

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.tensorboard import SummaryWriter

from .checkpoints import CheckpointError, Checkpoints, Update, check_restorable, checked_saved_flags, load_checkpoint
from .checkpoints import new_run_folder, refuse_other_flags, resume_command, script_as_started
from .distributed import all_ranks_mean, launched_processes, process_rank, processes_per_machine
from .env_statistics import env_statistics, set_env_statistics
from .flag_checks import ArgError, check_flags, run_name_part


class LogWriteError(OSError):
    """The TensorBoard log could not be written (its writer thread met a full disk or a lost mount)."""


class NonFiniteError(RuntimeError):
    """Training produced a NaN or infinity: the message names the update and the last good checkpoint."""


class ObservationError(NonFiniteError):
    """An env returned a NaN or infinite observation: the message names the env, the step and the last good checkpoint.
    Under torchrun (X2) one rank meets it, not all: the rank that does says it."""


# the first line of each script's --help (tyro's description), whose flags' help speaks of ids and "the reference"
HELP = (
    "Ids in parentheses, such as (G1) or (M3), name PPO's implementation details, one flag each (docs/details.md): G "
    "general, M MuJoCo, A Atari, D discrete actions, X auxiliary, B beyond the blog's 32; \"the reference\" is "
    "openai/baselines' ppo2, where the details and the defaults come from."
)
AGREE_EVERY = 32  # X2: env steps between the ranks' agreements on whether a stop signal has come
STOPPED = "stopped by a signal; continue with:"  # the line that ends a stopped run (benchmark/run.py looks for it)


def main(args, train, make_envs, Agent, act):
    """A script's `__main__`: trains, or with --eval-checkpoint evaluates a saved agent (make_envs, Agent and act: the
    script's own, so that what it plays is what it trains). While training, SIGINT and
    SIGTERM ask train() to stop with a checkpoint (stop_on_signals); while evaluating they stop it at once. A bad
    command line or a NaN ends with one line on stderr (printed by rank 0 alone under torchrun) instead of a traceback."""
    Run.active.clear()  # runs an earlier train() in this process left open when it raised (a test's) are not this one's
    run_or_say_why(args, train, make_envs, Agent, act, sys.argv[1:])
    if launched_processes() > 1:
        # X2: the run is done and its process group closed, but torch's gloo backend sometimes aborts the interpreter's
        # teardown ("terminate called without an active exception"), which would fail the torchrun job: a worker whose
        # run has ended leaves without that teardown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def typed_flags(args, words):
    """The names of args' fields whose flags the command line `words` names (--total-timesteps 2048, --no-save-model,
    --seed=2, --num_envs 1: tyro's spellings)."""
    typed = {word[2:].split("=")[0].replace("_", "-") for word in words if word.startswith("--")}
    return [f.name for f in fields(args) if {f.name.replace("_", "-"), "no-" + f.name.replace("_", "-")} & typed]


def run_or_say_why(args, train, make_envs, Agent, act, command_line):
    """main()'s training or evaluation, its errors turned into one line on stderr and an exit code. command_line: the
    words after the script's name, whose flags --resume refuses whatever their values."""
    try:
        if args.eval_checkpoint:  # Ctrl-C stops it at once, also where a shell started it in the background (SIG_IGN)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        elif args.resume:
            refuse_other_flags(args, typed_flags(args, command_line))
        evaluate(args, make_envs, Agent, act) if args.eval_checkpoint else train(args, stop_on_signals())
    except (ArgError, NonFiniteError, CheckpointError) as e:
        for run in [run for run in Run.active if run.log is None]:
            run.abandon()  # refused before it started (a checkpoint that fails its checks): its folder as it was
        if process_rank() == 0 or isinstance(e, ObservationError):
            print(f"error: {e}", file=sys.stderr)
        else:  # X2: every rank meets the same error; rank 0 says it, and torchrun stops the group once one rank exits
            time.sleep(3)
        sys.exit(1)
    except OSError as e:  # a full disk or a lost mount under the logs or the videos (under a checkpoint: CheckpointError)
        if not Run.active or not disk_trouble(e):
            raise
        print(f"error: {write_failed(list(Run.active), e)}", file=sys.stderr)
        sys.exit(1)
    except RuntimeError as e:  # X2: a collective of the process group failed: another process of the job is gone
        if launched_processes() == 1 or not Run.active or not from_collective(e):
            raise
        print(f"error: {process_lost(Run.active[0], e)}", file=sys.stderr, flush=True)
        os._exit(1)  # the process group cannot close: its peer is gone
    except KeyboardInterrupt:  # Ctrl-C while evaluating
        sys.exit(130)


def evaluate(args, make_envs, Agent, act):
    """--eval-checkpoint: the saved agent plays --eval-episodes episodes in one env made with the flags that trained it,
    each step the script's act() (its actions sampled as in training, a recurrent agent's state carried), the env
    statistics frozen at their saved values; videos and the seed come from `args`. Prints and returns the episodic
    returns. The env is the checkpoint's: an --env-id that differs from it is refused, unless it is the
    script's default, which cannot be told from no --env-id at all (tyro fills it in) and is therefore let through."""
    check_flags(args)  # --eval-episodes, --seed; the training flags are the checkpoint's, checked below
    checkpoint = load_checkpoint(args.eval_checkpoint, "--eval-checkpoint", args)
    env_id = checkpoint["args"]["env_id"]
    if args.env_id not in (env_id, type(args)().env_id):
        raise ArgError(
            f"--env-id {args.env_id} is not the env of --eval-checkpoint {args.eval_checkpoint}, which was trained on "
            f"{env_id}; drop --env-id (the checkpoint's env is played) or pass --env-id {env_id}"
        )
    env_id = env_as_trained(type(args), checkpoint["args"])  # what the agent sees of it: velocities hidden, say
    print(f"evaluating {args.eval_checkpoint} on {env_id} over {args.eval_episodes} episodes", flush=True)
    one_env = type(args).eval_flags  # the script's flags for one env
    train_args = replace(type(args)(**checkpoint["args"]), **one_env, capture_video=args.capture_video, seed=args.seed)
    checked_saved_flags(train_args, "--eval-checkpoint", args.eval_checkpoint)
    torch.manual_seed(args.seed)
    name = f"{run_name_part(train_args.env_id)}__{args.exp_name}-eval__{args.seed}__{int(time.time())}"
    video_folder = os.path.join(new_run_folder(name), "videos") if args.capture_video else None  # runs/<name>/videos
    envs = make_envs(train_args, video_folder)
    keep_mujoco_log(os.path.dirname(video_folder) if video_folder else None)  # an evaluation's folder is its videos'
    agent = Agent(envs, train_args)
    check_restorable(checkpoint, "--eval-checkpoint", args.eval_checkpoint, agent, None, env_statistics(envs), False)
    agent.load_state_dict(checkpoint["model"])
    set_env_statistics(envs, checkpoint["env_stats"], frozen=True)

    episodic_returns, steps = [], 0
    next_obs, _ = envs.reset(seed=args.seed)
    next_done, state = torch.zeros(1), None  # no state yet: a recurrent script's act() starts it (B3)
    while len(episodic_returns) < args.eval_episodes:
        bad, kind = nonfinite_envs(next_obs, envs)  # a NaN the agent would be given: its actions would be NaN, or raise
        if bad:
            envs.close()
            raise ObservationError(f"{env_id} returned a {kind} observation at step {steps} of the evaluation, which stopped "
                                   "there; fix the env, or evaluate on another --seed")  # fmt: skip
        action, state = act(agent, envs, train_args, next_obs, next_done, state)
        next_obs, _, terminations, truncations, infos = envs.step(action)
        steps += 1
        next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32)
        episodic_returns += [episodic_return for _, episodic_return in finished_episodes(infos)]
    envs.close()
    keep_mujoco_log(None)
    mean, std = np.mean(episodic_returns), np.std(episodic_returns)
    episodes = len(episodic_returns)
    print(f"eval {args.eval_checkpoint} on {env_id}: mean return {mean:.1f} +- {std:.1f} over {episodes} episodes")
    return episodic_returns


# the flags whose wrappers change what the agent sees of its env (what it observes, not how it is scaled), and what a
# value other than the script's default means: an evaluation names those its checkpoint was trained with, for its return
# is one on that env, not on the plain one
OBSERVATION_FLAGS = {"mask_velocity": "velocities hidden", "warp_frame": "raw RGB frames", "frame_stack": None}


def env_as_trained(Args, saved):
    """The env a checkpoint's agent was trained on, as its flags (`saved`, of the script's `Args`) made it: its id, and
    the OBSERVATION_FLAGS that are not the script's default, as they are typed ("Pendulum-v1 with --mask-velocity
    (velocities hidden)")."""
    defaults, named = Args(), []
    for name, meaning in OBSERVATION_FLAGS.items():
        if name not in saved or not hasattr(defaults, name) or saved[name] == getattr(defaults, name):
            continue
        flag, value = "--" + name.replace("_", "-"), saved[name]
        flag = (flag if value else "--no-" + flag[2:]) if isinstance(value, bool) else f"{flag} {value}"
        named.append(f"{flag} ({meaning})" if meaning else flag)
    return " with ".join([saved["env_id"], ", ".join(named)] if named else [saved["env_id"]])


def finished_episodes(infos):
    """(env index, return) of each episode that ended in this step: with SAME_STEP autoreset its statistics (those of
    gymnasium's RecordEpisodeStatistics) are in infos["final_info"]."""
    final_info = infos.get("final_info", {})
    if "episode" not in final_info:
        return []
    ended = np.flatnonzero(final_info["_episode"])
    return list(zip(ended.tolist(), final_info["episode"]["r"][ended].tolist()))


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


def from_collective(error):
    """Whether `error` was raised inside torch.distributed (gloo's lost connection, NCCL's error)."""
    return any(f"torch{os.sep}distributed" in frame.filename for frame in traceback.extract_tb(error.__traceback__))


def process_lost(run, error):
    """The line a surviving process of a torchrun job ends with when another one is gone (killed, out of memory): the
    last checkpoint and how the run goes on from it (torchrun restarts the workers where --max-restarts allows, and
    they continue from it by themselves; otherwise the command that continues it). Rank 0's logs are flushed first."""
    try:
        run.log.writer.flush()
    except Exception:  # not rank 0 (no writer), or the log's disk is the trouble too
        pass
    reason = str(error).split("] ")[-1].split(". ")[0]  # gloo: "Read error [127.0.0.1]:35497: Connection reset by peer"
    restarts_left = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", 0)) - int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    if not os.path.exists(run.checkpoints.path):
        then = "torchrun restarts the workers, which start the run again" if restarts_left > 0 else "start the job again"
        return (f"another process of this torchrun job ended ({reason}); no checkpoint was written yet (--checkpoint-interval "
                f"N writes one every N updates); {then}")  # fmt: skip
    then = f"continue with: {run.resume_command()}"
    if restarts_left > 0:
        then = "torchrun restarts the workers (--max-restarts), which continue from it by themselves"
    return f"another process of this torchrun job ended ({reason}); the last checkpoint: {run.checkpoints.path}; {then}"


def stop_on_signals():
    """Makes SIGINT and SIGTERM append their number to the returned list, which train() checks after each env step to
    stop with a checkpoint. A second Ctrl-C exits at once without one (exit code 130); a SIGINT within a second of the
    first counts as the same request, since torchrun forwards the terminal's Ctrl-C to its workers, who get two."""
    stop_signals, first_time, trainer = [], [], os.getpid()

    def on_signal(signum, frame):
        if os.getpid() != trainer:  # an env worker of an AsyncVectorEnv (forked with this handler): the trainer stops it
            return
        rank0 = process_rank() == 0
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
    compiling = " (--compile builds its graph)" if getattr(args, "compile", False) else ""
    video = ""
    if args.capture_video:  # RecordVideo renders every step of the episodes it records (0, 1, 8, 27, ... of env 0)
        video = ("; --capture-video renders each step of the episodes it records (0, 1, 8, 27, ...), which slows them "
                 "(MuJoCo without a GPU: minutes for the first update)")  # fmt: skip
    print(
        f"{folder}: {updates} updates of {args.batch_size * world_size} steps to go; the first one warms up{compiling}, "
        f"then a progress line every {PROGRESS_SECONDS:g} s{video}",
        flush=True,
    )


SETTOTALMASS = "compiler attribute 'settotalmass' is deprecated"  # MuJoCo 4's warning at each compile of such a model


def say_settotalmass_once():
    """MuJoCo 4 warns that the compiler attribute settotalmass is deprecated each time it compiles a model that sets it
    (gymnasium's HalfCheetah: in the flag checks, in each env, in an evaluation's): with this process's MuJoCo loaded,
    that warning is said once a process, on the console, and kept out of MUJOCO_LOG.TXT (it is about gymnasium's model,
    not the run; the first one, in the flag checks, wrote the file in the working folder before any run folder existed).
    Every other warning goes where MuJoCo's default handler sends it, as MjLogConfig says (keep_mujoco_log): the console
    and the log file. A warning handler of one's own, installed before, is left as it is."""
    mujoco = sys.modules.get("mujoco")
    if mujoco is None or not hasattr(mujoco, "MjLogConfig") or mujoco.get_mju_user_warning() is not None:
        return
    said = []  # an AsyncVectorEnv's forked workers inherit it: what the trainer said, they do not say again

    def on_warning(message):
        config = mujoco.MjLogConfig.get()
        if SETTOTALMASS in message:
            if said:
                return
            said.append(message)
        elif config.logto_file:
            try:
                with open(config.logfile or "MUJOCO_LOG.TXT", "a") as log:
                    log.write(f"WARNING {time.ctime()}: {message}\n\n")  # MuJoCo's default handler's form
            except OSError:  # as MuJoCo's: a log that cannot be written is not the run's failure
                pass
        if config.logto_console:
            sys.stderr.write(f"WARNING: {message}\n\n")
            sys.stderr.flush()

    mujoco.set_mju_user_warning(on_warning)


def keep_mujoco_log(folder):
    """MuJoCo writes its warnings and errors (an unstable simulation's "Nan, Inf or huge value in QACC") to
    MUJOCO_LOG.TXT in the working folder, besides printing them: where this process has loaded MuJoCo, its log goes to
    `folder`'s MUJOCO_LOG.TXT instead, or, with no folder (an evaluation without videos, a run that has ended, a
    folder another machine holds: X2), nowhere but the console. The setting is the process's; an AsyncVectorEnv's
    workers, forked after it is made, inherit it."""
    mujoco = sys.modules.get("mujoco")  # not imported here: loading it for an Atari run would cost time and GL trouble
    if mujoco is None or not hasattr(mujoco, "MjLogConfig"):  # MjLogConfig: MuJoCo 4's (requirements.txt pins it)
        return
    say_settotalmass_once()
    config = mujoco.MjLogConfig.get()
    path = os.path.abspath(os.path.join(folder, "MUJOCO_LOG.TXT")) if folder and os.path.isdir(folder) else None
    config.logto_file = path is not None and len(path.encode()) < 1024  # MuJoCo keeps the path in 1024 bytes
    if config.logto_file:
        config.logfile = path
    config.set()


def clock(seconds):
    """A duration as h:mm:ss (the progress line's elapsed and left times)."""
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


class Run:
    """One training run's life cycle around train()'s algorithm: its folder (made for it alone, or a resumed run's own),
    its `log` (RunLog) and `checkpoints`, and the stop signals. train() calls, in order: `start`, `should_stop` (each
    env step), `check_finite` and `finish_update` (each update), `finish`."""

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
        """Writes the checkpoint of the last finished update. Where the disk refuses, the run is closed and
        CheckpointError says how to continue from the last good checkpoint."""
        try:
            self.checkpoints.save(self.agent, self.optimizer, self.last_update, self.log.wandb_id)
        except CheckpointError as e:
            self.close_after_failure()  # the logs' last flush may meet the same full disk
            hint = "start the run again once there is room"
            if os.path.exists(self.checkpoints.path):
                hint = "once there is room, continue with: " + self.resume_command()
            raise CheckpointError(f"{e}; {hint}") from None

    def resume_command(self):
        return resume_command(self.args.script, self.checkpoints.path, self.world_size, processes_per_machine())

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
            last = self.last_update
            print(f"saved the agent after update {last.iteration} (step {last.global_step}) to {self.checkpoints.path}")
        print(f"logs: {self.folder} (see them with: tensorboard --logdir {os.path.dirname(self.folder) or '.'})")
        if self.stopping:
            print(f"{STOPPED} {self.resume_command()}")
        elif saving:
            command = ["python", script_as_started(self.args.script), "--eval-checkpoint", self.checkpoints.path]
            print(f"evaluate it with: {shlex.join(command)}")
        else:
            print("no checkpoint written: --save-model or --checkpoint-interval N keeps the agent")

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


DISK_TROUBLE = {
    errno.ENOSPC: "No space left on device",
    errno.EDQUOT: "Disk quota exceeded",
    errno.EROFS: "Read-only file system",
}


def quiet_log_writer(hook_args, report=threading.excepthook):
    """threading.excepthook: TensorBoard's writer thread ends on a failed write with a traceback; the next write raises
    the same error, which the run reports in one line. Other threads' exceptions are reported as they were."""
    if not (isinstance(hook_args.exc_value, OSError) and type(hook_args.thread).__module__.startswith("tensorboard")):
        report(hook_args)


def disk_trouble(error):
    """What kept `error`'s write from the disk (ffmpeg's broken pipe says it in its message), or None."""
    if error.errno in DISK_TROUBLE:
        return DISK_TROUBLE[error.errno]
    return next((reason for reason in DISK_TROUBLE.values() if reason in str(error)), None)


def write_failed(runs, error):
    """The line that ends runs whose logs or videos could not be written: what failed, the last good checkpoints and
    the command that continues from them (ppo_continuous_action_seeds.py: several runs, one command)."""
    text, folders = str(error), " ".join(run.folder for run in runs)
    what = f"the TensorBoard log in {folders}" if isinstance(error, LogWriteError) else f"in {folders}"
    for run in runs:
        what = f"a video in {run.video_folder}" if run.video_folder in text or "MoviePy" in text else what
        run.close_after_failure()
    paths = [run.checkpoints.path for run in runs]
    hint = "start the run again once there is room"
    if all(os.path.exists(path) for path in paths):
        command = runs[0].resume_command() if len(runs) == 1 else resume_command(os.path.basename(sys.argv[0]), paths, 1, 1)
        hint = f"the last good checkpoint: {' '.join(paths)}; once there is room, continue with: {command}"
    return f"could not write {what} ({disk_trouble(error)}); {hint}"


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
