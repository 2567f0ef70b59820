"""Checks that a refactoring changed nothing a run computes: runs the same short training runs (RUNS) with two
revisions of this repository and compares every (tag, step, value) of their TensorBoard scalars to the bit (all tags but
charts/SPS, a clock reading), and the model tensors of their final agent.pt; a run of the seeds script writes a run
folder per seed, each compared with the same seed's.

    python benchmark/same_scalars.py OLD NEW [--runs NAME ...] [--keep] [--python PYTHON]

OLD, NEW: a git revision (made a temporary `git worktree add --detach`, removed at the end) or a checkout's folder. Run
from the repository root; each run trains in a fresh temporary folder (--keep keeps them) with OMP_NUM_THREADS=1 and
WANDB_MODE=offline. One line per run: identical, the difference at the earliest step (the nearest to its cause), or the
side that failed. Exit status 0 if all runs are identical, 1 if not, 2 for bad input.

The resume run stops with SIGTERM once its first agent.pt appears, then goes on with --resume to the end; compared: the
whole run folder (update 1 of the first session, 2-4 of the resumed one) and the final agent.pt, once both sides stopped
after exactly update 1. Fair, as a stopped run saves the state at the end of its last finished update (the cut rollout
logs nothing; the resumed writer hides what was logged after the checkpoint's step): when the signal came reaches
neither scalars nor agent. The scripts have no deterministic stop, so a side whose signal came late (after update 2)
runs its first session again, up to STOP_TRIES times, and else fails: no partial comparison."""

import argparse
import glob
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository whose revisions OLD and NEW name
IGNORED = {"charts/SPS"}  # steps per second: a clock reading, never the same twice
STOP_TRIES = 3
CONT = ["ppo_continuous_action.py", "--env-id", "Pendulum-v1", "--num-steps", "256", "--num-minibatches", "4",
        "--update-epochs", "2", "--total-timesteps", "1024", "--save-model"]  # fmt: skip
# fmt: off
RUNS = {  # name: the script and its flags, tiny budgets, each with --save-model (agent.pt to compare)
    "continuous": CONT,  # Pendulum-v1, 4 updates of 256 steps, compiled (the default): ~20 s more, compiling
    "continuous-eager": CONT + ["--no-compile"],
    "continuous-kl": CONT + ["--no-compile", "--surrogate", "kl-adaptive"],  # eager: compiling is continuous's to check
    "atari": ["ppo_atari.py", "--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1",
              "--total-timesteps", "128", "--save-model", "--no-compile"],  # Breakout, 2 updates; compiled: ~50 s more
    "rnn": ["ppo_rnn.py", "--env-id", "CartPoleNoVelocity-v1", "--num-envs", "2", "--num-steps", "32",
            "--num-minibatches", "2", "--total-timesteps", "256", "--save-model"],  # 4 updates; it has no --compile
    "rnn-continuous": ["ppo_rnn_continuous_action.py", "--env-id", "Pendulum-v1", "--num-envs", "2", "--num-steps", "64",
                       "--num-minibatches", "2", "--update-epochs", "2", "--total-timesteps", "512",
                       "--save-model"],  # 4 updates; it has no --compile
    "seeds": ["ppo_continuous_action_seeds.py", *CONT[1:], "--no-compile", "--seeds", "1", "2"],  # continuous-eager's, x2
    "resume": CONT + ["--no-compile", "--checkpoint-interval", "1"],  # stopped after update 1, resumed: see above
}
# fmt: on


class BadInput(Exception):
    """An argument that names no checkout: one line for the user, no traceback."""


class RunFailed(Exception):
    """A run that exited non-zero, left no run folder, or did not stop after update 1."""


def checkout(arg, side, tmp, worktrees):
    """The folder of the checkout OLD or NEW names: `arg` itself if it is a folder, else a new worktree of the revision."""
    if os.path.isdir(arg):
        if not os.path.isfile(os.path.join(arg, "ppo_continuous_action.py")):
            raise BadInput(f"{side} {arg} is a folder without ppo_continuous_action.py; pass the root of a checkout")
        return os.path.abspath(arg)
    git = ["git", "-C", REPO]
    found = subprocess.run([*git, "rev-parse", "--verify", "--quiet", f"{arg}^{{commit}}"], capture_output=True, text=True)
    if found.returncode != 0:
        raise BadInput(f"{side} {arg} is neither a folder nor a revision of {REPO}; pass a checkout or a revision (git log)")
    folder = os.path.join(tmp, f"checkout-{side.lower()}")
    subprocess.run([*git, "worktree", "add", "--detach", "--quiet", folder, found.stdout.strip()], check=True)
    worktrees.append(folder)
    return folder


def start(python, checkout, argv, cwd):
    """Starts `python <checkout>/<script> <flags>` in `cwd`, its output added to files there (a pipe could fill, stall it)."""
    os.makedirs(cwd, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    with open(os.path.join(cwd, "stdout.txt"), "a") as out, open(os.path.join(cwd, "stderr.txt"), "a") as err:
        return subprocess.Popen([python, os.path.join(checkout, argv[0]), *argv[1:]], cwd=cwd, env=env, stdout=out, stderr=err)


def finish(proc, cwd):
    """Waits for the run; its run folders runs/<run>/ by name (one, or one per seed in seed order: the names are
    {env_id}__{exp_name}__{seed}__{time}), or RunFailed with the last line it wrote to stderr."""
    if proc.wait() != 0:
        with open(os.path.join(cwd, "stderr.txt")) as f:
            raise RunFailed(f"exited {proc.returncode}: {(f.read().strip().splitlines() or ['no output'])[-1]}")
    folders = sorted(glob.glob(os.path.join(cwd, "runs", "*", "")))
    if not folders:
        raise RunFailed(f"left no run folder in {cwd}/runs")
    return folders


def train(python, checkout, argv, cwd, resume=False):
    """Trains in `cwd`; returns its run folders (finish). With `resume`: SIGTERM once the first agent.pt appears, until
    a try stops after update 1 (see above), then --resume to the end."""
    if not resume:
        return finish(start(python, checkout, argv, cwd), cwd)
    for _ in range(STOP_TRIES):
        shutil.rmtree(cwd, ignore_errors=True)
        proc = start(python, checkout, argv, cwd)
        while proc.poll() is None and not glob.glob(os.path.join(cwd, "runs", "*", "agent.pt")):
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)  # nothing to a run that has already ended (it finished: tried again)
        path = os.path.join(finish(proc, cwd)[0], "agent.pt")
        if torch.load(path, map_location="cpu", weights_only=True)["iteration"] == 1:
            return finish(start(python, checkout, [argv[0], "--resume", os.path.relpath(path, cwd)], cwd), cwd)
    raise RunFailed(f"did not stop after update 1 in {STOP_TRIES} tries (the signal came too late each time)")


def read_scalars(run_dir):
    """{tag: [(step, value), ...]} of every scalar in a run folder, as TensorBoard shows it (a resume's purge applied)."""
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def first_difference(old, new):
    """None where two read_scalars dicts agree to the bit on every tag but IGNORED; else the difference at the earliest
    step, in words (the earliest is the nearest to its cause: later steps differ because it did)."""
    found = []  # (step, words): each tag's first difference
    for tag in sorted((old.keys() | new.keys()) - IGNORED):
        a, b = old.get(tag, []), new.get(tag, [])  # a tag one side lacks: all its values are the other's only
        # to the bit: a NaN equals a NaN, -0.0 is not 0.0
        pairs = [(x, y) for x, y in zip(a, b) if x[0] != y[0] or struct.pack("<d", x[1]) != struct.pack("<d", y[1])]
        if pairs:
            (step, x), (step_new, y) = pairs[0]
            found.append((min(step, step_new), f"{tag}: OLD step {step} value {x!r}, NEW step {step_new} value {y!r}"))
        elif len(a) != len(b):
            side, longer = ("OLD", a) if len(a) > len(b) else ("NEW", b)
            step, value = longer[min(len(a), len(b))]
            found.append((step, f"{tag}: only {side} logs step {step} (value {value!r})"))
    return min(found)[1] if found else None


def model_difference(old_path, new_path):
    """None where the two agent.pt files' model tensors are the same to the bit (names, dtypes, shapes, bytes)."""
    old, new = (torch.load(path, map_location="cpu", weights_only=True)["model"] for path in (old_path, new_path))
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a is None or b is None or a.dtype != b.dtype or a.shape != b.shape or a.numpy().tobytes() != b.numpy().tobytes():
            return f"agent.pt: the model tensor {key} differs" + (" (one side lacks it)" if a is None or b is None else "")
    return None


def compare_run(name, checkouts, python, tmp):
    """Runs `name` with OLD and with NEW: (identical?, the line that says so, or the first difference, or who failed).
    A run of several seeds is compared seed by seed: each side's run folders in name order (finish), which is seed order."""
    folders = {}
    for side, folder in checkouts.items():
        try:
            folders[side] = train(python, folder, RUNS[name], os.path.join(tmp, f"{name}-{side.lower()}"), name == "resume")
        except (RunFailed, OSError) as e:  # OSError: a --python that cannot be started
            return False, f"{side} failed: {e}"
    count = len(folders["OLD"])
    if len(folders["NEW"]) != count:
        return False, f"differs: OLD left {count} run folders, NEW {len(folders['NEW'])}"
    values, tags, all_saved = 0, set(), True
    for i, pair in enumerate(zip(folders["OLD"], folders["NEW"]), 1):
        old, new = map(read_scalars, pair)
        models = [os.path.join(folder, "agent.pt") for folder in pair]
        saved = [os.path.exists(path) for path in models]
        difference = first_difference(old, new) or (saved[0] != saved[1] and f"only {['NEW', 'OLD'][saved[0]]} saved agent.pt")
        difference = difference or (all(saved) and model_difference(*models))
        if difference:
            return False, "differs: " + (f"run folder {i} of {count}: " if count > 1 else "") + difference
        values += sum(len(old[tag]) for tag in old.keys() - IGNORED)
        tags |= old.keys() - IGNORED
        all_saved &= all(saved)
    folders_note = f"{count} run folders: " if count > 1 else ""
    return True, f"identical ({folders_note}{values} values of {len(tags)} tags{', agent.pt' * all_saved})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", metavar="OLD", help="a git revision or a checkout folder")
    parser.add_argument("new", metavar="NEW", help="a git revision or a checkout folder")
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS), metavar="NAME", help=", ".join(RUNS))
    parser.add_argument("--keep", action="store_true", help="keep the temporary working folders (their path is printed)")
    parser.add_argument("--python", default=sys.executable, help="the python that runs the scripts (default: this one)")
    args = parser.parse_args(argv)
    tmp, worktrees, all_identical = tempfile.mkdtemp(prefix="same_scalars-"), [], True
    try:
        checkouts = {side: checkout(arg, side, tmp, worktrees) for side, arg in (("OLD", args.old), ("NEW", args.new))}
        for name in args.runs:
            identical, line = compare_run(name, checkouts, args.python, tmp)
            all_identical &= identical
            print(f"{name}: {line}", flush=True)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        for folder in worktrees:  # git keeps a list of its worktrees: removed even with --keep
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", folder], check=False)
        if args.keep:
            print(f"kept the working folders in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all_identical else 1


if __name__ == "__main__":
    sys.exit(main())
