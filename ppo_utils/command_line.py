"""A script's `__main__` (`main`): the command line's training or evaluation, the stop signals in (SIGINT, SIGTERM:
train() stops with a checkpoint), every error a user can meet out as one line on stderr instead of a traceback (a bad
flag, a NaN, a full disk, a lost torchrun peer). It decides no PPO detail."""

import errno
import os
import signal
import sys
import time
import traceback
from dataclasses import fields

from .checkpoints import CheckpointError, refuse_other_flags, resume_command
from .contract import check_script
from .distributed import launched_processes, process_rank
from .evaluation import evaluate
from .flag_checks import ArgError
from .logs import LogWriteError
from .run import NonFiniteError, ObservationError, Run


# the first line of each script's --help (tyro's description), whose flags' help speaks of ids and "the reference"
HELP = (
    "Ids in parentheses, such as (G1) or (M3), name PPO's implementation details, one flag each (docs/details.md): G "
    "general, M MuJoCo, A Atari, D discrete actions, X auxiliary, B beyond the blog's 32; \"the reference\" is "
    "openai/baselines' ppo2, where the details and the defaults come from."
)


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
        check_script(args, train, make_envs, Agent, act)  # what the package reads of the script (contract.py)
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


DISK_TROUBLE = {
    errno.ENOSPC: "No space left on device",
    errno.EDQUOT: "Disk quota exceeded",
    errno.EROFS: "Read-only file system",
}


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
