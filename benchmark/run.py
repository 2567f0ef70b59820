"""Runs a matrix of training runs (script x env ids x variants x seeds) as local processes, or prints it for a cluster.

    python benchmark/run.py --preset mujoco                       # the paper's 7 MuJoCo tasks, 1M steps, 3 seeds
    python benchmark/run.py --preset ablation --env-ids InvertedPendulum-v5 --total-timesteps 50000 --seeds 1 2
    python benchmark/run.py --script ppo_atari.py --env-ids PongNoFrameskip-v4 --seeds 1 2 \\
        --variant default= --variant envpool="--vector-env envpool"
    python benchmark/run.py --preset atari                        # ours and CleanRL's ppo_atari.py, 2 games, 2M steps
    python benchmark/run.py --preset atari-10m --print-commands   # one shell line per run
    python benchmark/run.py --preset atari-10m --slurm atari.sbatch   # a Slurm array job, one task per run
    python benchmark/run.py --script ppo_atari.py --env-ids PongNoFrameskip-v4 --peer cleanrl=PATH/cleanrl/ppo_atari.py

Each run gets its own folder, <out>/<env id>/<variant>/seed<k>/, and runs there, so its TensorBoard logs land in
<out>/<env id>/<variant>/seed<k>/runs/<run name>/; its output goes to output.log beside them. A run that exits cleanly
leaves done.json (command, exit code, wall time), and later calls skip it: run the same command again after an
interruption and only the unfinished runs start (those stopped by Ctrl-C continue from their checkpoint).
A peer (--peer NAME=SCRIPT) is another
project's script run as one more variant, NAME, with its own defaults: it gets only --env-id, --seed and
--total-timesteps, none of --flags, and starts over when interrupted (it writes no checkpoint). Flags after the script
(--peer "NAME=SCRIPT --gamma 1") go to it alone.
Summarize the folder with benchmark/report.py, which keeps each run's episodes in <results>/data/ (committed); runs
whose data are already there are skipped too, so that a matrix can be finished over several sittings and machines.
"""

import argparse
import ctypes
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path

from report_data import link_outside, read_csv, read_run, writable  # beside this file
from speed import machine  # beside this file

ROOT = Path(__file__).resolve().parent.parent

ATARI_GAMES = ["PongNoFrameskip-v4", "BreakoutNoFrameskip-v4", "BeamRiderNoFrameskip-v4"]
# the hyperparameters of the README's CartPoleNoVelocity command
CARTPOLE_FLAGS = (
    "--num-envs 8 --num-steps 32 --num-minibatches 1 --update-epochs 20 --learning-rate 1e-3 --gamma 0.98 "
    "--gae-lambda 0.8 --ent-coef 0 --clip-coef 0.2"
)
MUJOCO_TASKS = [  # the PPO paper's seven, at today's versions
    "HalfCheetah-v5",
    "Hopper-v5",
    "InvertedDoublePendulum-v5",
    "InvertedPendulum-v5",
    "Reacher-v5",
    "Swimmer-v5",
    "Walker2d-v5",
]


@dataclass
class Preset:
    """A predefined matrix: a script on env ids (each with its steps and env-specific flags), seeds, and peers: other
    projects' scripts, by name, each a file in the folder an environment variable names (e.g. CLEANRL_DIR)."""

    script: str
    envs: dict  # env id: (steps, flags)
    seeds: list
    peers: dict = field(default_factory=dict)  # name: (environment variable of its folder, script file in it)


PRESETS = {
    "mujoco": Preset("ppo_continuous_action.py", {env_id: (1_000_000, "") for env_id in MUJOCO_TASKS}, [1, 2, 3]),
    "atari": Preset(
        "ppo_atari.py",
        {game: (2_000_000, "") for game in ["BreakoutNoFrameskip-v4", "PongNoFrameskip-v4"]},
        [1, 2, 3],
        peers={"cleanrl": ("CLEANRL_DIR", "ppo_atari.py")},
    ),
    "atari-10m": Preset("ppo_atari.py", {game: (10_000_000, "") for game in ATARI_GAMES}, [1, 2, 3]),
    "rnn": Preset(
        "ppo_rnn.py",
        {**{game: (10_000_000, "") for game in ATARI_GAMES}, "CartPoleNoVelocity-v1": (200_000, CARTPOLE_FLAGS)},
        [1, 2, 3],
    ),
    "ablation": Preset("ppo_continuous_action.py", {"Hopper-v5": (1_000_000, "")}, [1, 2, 3]),
    "table1": Preset("ppo_continuous_action.py", {env_id: (1_000_000, "") for env_id in MUJOCO_TASKS}, [1, 2, 3]),
}
# The `table1` preset's variants: the PPO paper's eleven Table 1 settings (G1), every other flag at its default. Where
# a setting is the script's default it takes no flag, so that its command is the one the mujoco and ablation presets
# ran (clip-0.2 is mujoco's default; unclipped, kl-fixed-1 and kl-adaptive-0.01 are ablation's G1 variants on Hopper).
TABLE1 = {
    "unclipped": "--surrogate unclipped",
    "clip-0.1": "--clip-coef 0.1",
    "clip-0.2": "",
    "clip-0.3": "--clip-coef 0.3",
    "kl-adaptive-0.003": "--surrogate kl-adaptive --kl-dtarg 0.003",
    "kl-adaptive-0.01": "--surrogate kl-adaptive",
    "kl-adaptive-0.03": "--surrogate kl-adaptive --kl-dtarg 0.03",
    "kl-fixed-0.3": "--surrogate kl-fixed --kl-beta 0.3",
    "kl-fixed-1": "--surrogate kl-fixed",
    "kl-fixed-3": "--surrogate kl-fixed --kl-beta 3",
    "kl-fixed-10": "--surrogate kl-fixed --kl-beta 10",
}


def ablations(script):
    """The `ablation` preset's variants for a script: the defaults, then one run per detail of docs/details.md
    with that detail turned off (or set to its non-reference value), named after its id. X2 is a launcher
    (torchrun), not a flag, and is left out. G1 gets the paper's three other Table 1 objectives, each at the setting
    that is this script's default: no clipping or penalty, a fixed KL penalty (beta 1), an adaptive one (d_targ 0.01),
    and SPO's; the details beyond the reference (M9, X4, X5) are turned on instead."""
    continuous = script in ("ppo_continuous_action.py", "ppo_rnn_continuous_action.py")
    rnn = script in ("ppo_rnn.py", "ppo_rnn_continuous_action.py")
    vector = script in ("ppo.py", "ppo_masked.py")  # discrete actions, vector observations: no M or A details
    if vector:  # the same batch from 1 env instead of 4
        g10 = "--num-envs 1 --num-steps 512"
    elif script == "ppo_rnn_continuous_action.py":  # G10: the same batch from 8 envs instead of 32, in 8 minibatches of
        # whole env sequences (B3), so of 256 steps instead of 64: the minibatch size changes with it
        g10 = "--num-envs 8 --num-steps 256 --num-minibatches 8"
    else:  # the same batch from 8 envs instead of 1 (continuous), or from 1 env instead of 8 (Atari)
        g10 = "--num-envs 8 --num-steps 256" if continuous else "--num-envs 1 --num-steps 1024"
    common = [
        ("G1-unclipped", "--surrogate unclipped"),
        ("G1-kl-fixed", "--surrogate kl-fixed"),
        ("G1-kl-adaptive", "--surrogate kl-adaptive"),
        ("G1-spo", "--surrogate spo"),
        ("G2-no-gae", "--no-gae"),
        ("G3-no-norm-adv", "--no-norm-adv"),
        ("G4-no-clip-vloss", "--no-clip-vloss"),
        ("G5-ent-coef", "--ent-coef 0.01" if continuous else "--ent-coef 0"),
        ("G6-no-anneal-lr", "--no-anneal-lr"),
        ("G7-full-batch", "--num-minibatches 1"),
        ("G8-no-grad-clip", "--max-grad-norm 0"),
        ("G9-no-ortho-init", "--no-ortho-init"),
        ("G10-num-envs", g10),
        ("G11-adam-eps", "--adam-eps 1e-8"),
    ]
    if vector:
        specific = [("D1-no-mask-actions", "--no-mask-actions")] if script == "ppo_masked.py" else []
    elif continuous:
        specific = [
            ("M1-no-norm-obs", "--no-norm-obs"),
            ("M2-no-clip-obs", "--clip-obs 0"),
            ("M3-no-norm-reward", "--no-norm-reward"),
            ("M4-no-clip-reward", "--clip-reward 0"),
            ("M5-state-dependent-std", "--state-dependent-std"),
            ("M6-relu", "--activation relu"),
            ("M7-shared-network", "--shared-network"),
            ("M8-no-clip-action", "--no-clip-action"),
            ("M9-tanh-gaussian", "--action-dist tanh-gaussian"),
            ("M9-beta", "--action-dist beta"),
        ]
    else:
        specific = [
            ("A1-no-noop", "--noop-max 0"),
            ("A2-no-fire-reset", "--no-fire-reset"),
            ("A3-no-episodic-life", "--no-episodic-life"),
            ("A4-no-frame-skip", "--frame-skip 1"),
            ("A5-no-warp-frame", "--no-warp-frame"),
            ("A6-frame-stack", "--frame-stack 4" if rnn else "--frame-stack 1"),
            ("A7-no-clip-reward", "--no-clip-reward-sign"),
            ("A8-no-scale-obs", "--no-scale-obs"),
            ("A9-tanh", "--activation tanh"),
            ("A10-separate-networks", "--no-shared-network"),
        ]
    auxiliary = [
        ("X1-anneal-clip-coef", "--anneal-clip-coef"),
        ("X3-target-kl", "--target-kl 0.015"),
        ("X4-kl-adaptive-lr", "--kl-adaptive-lr --no-anneal-lr"),
        ("X5-norm-value", "--norm-value"),
        ("B1-bootstrap-truncated", "--bootstrap-truncated"),
    ]
    if rnn:
        auxiliary.append(("B2-gru", "--rnn gru"))
    return {"default": "", **dict(common + specific + auxiliary)}


@dataclass
class PlannedRun:
    """One run of the matrix, to start or continue: a script on an env id, a variant, a seed (a training run itself is
    ppo_utils.run.Run)."""

    script: str
    env_id: str
    variant: str
    seed: int
    total_timesteps: int
    flags: list = field(default_factory=list)  # env flags, --flags, then the variant's; a peer's: its own from --peer
    peer: bool = False  # another project's script (--peer)

    runs = property(lambda self: [self])  # as a Batch's
    key = property(lambda self: (self.env_id, self.variant, self.seed))

    def folder(self, out: Path) -> Path:
        return out / self.env_id / self.variant / f"seed{self.seed}"

    def command(self):  # a peer's script is an absolute path, which the join keeps
        return [sys.executable, str(ROOT / self.script), "--env-id", self.env_id, "--seed", str(self.seed),
                "--total-timesteps", str(self.total_timesteps), *self.flags]  # fmt: skip


SEEDS_SCRIPT = "ppo_continuous_action_seeds.py"  # --batch-seeds: one process trains the seeds and variants of a task
# the flags of ppo_continuous_action.py a --setting of the seeds script may set (its PER_AGENT, which
# tests/test_runner.py checks these against: this runner imports nothing of the scripts): those that take a value, and
# the switches (--X / --no-X). Variants of a task that differ in these alone train in one process, one --setting each
PER_AGENT_VALUES = {"surrogate", "clip_coef", "kl_beta", "kl_dtarg", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm",
                    "log_std_init", "target_kl", "learning_rate", "adam_eps", "desired_kl", "min_lr", "max_lr"}  # fmt: skip
PER_AGENT_SWITCHES = {"norm_adv", "clip_vloss", "ortho_init", "anneal_clip_coef", "anneal_lr", "kl_adaptive_lr",
                      "norm_value"}  # fmt: skip


def per_agent_part(flags):
    """(the flags a --setting may not set, those it may: PER_AGENT_VALUES' with their values, PER_AGENT_SWITCHES')."""
    shared, own, words = [], [], list(flags)
    while words:
        word = words.pop(0)
        name = word[2:].partition("=")[0].replace("-", "_") if word.startswith("--") else ""
        if name in PER_AGENT_VALUES:
            own += [word] if "=" in word or not words else [word, words.pop(0)]
        elif name in PER_AGENT_SWITCHES or (name.startswith("no_") and name[3:] in PER_AGENT_SWITCHES):
            own.append(word)
        else:
            shared.append(word)
    return shared, own


def setting_name(variant):
    """Whether a variant's name can name a --setting (letters, digits, -, _ and .; no "__", which parts a run's name)."""
    return bool(variant) and all(c.isalnum() or c in "-_." for c in variant) and "__" not in variant


@dataclass
class Batch:
    """--batch-seeds: runs of one task of ppo_continuous_action.py, trained together by one process of
    ppo_continuous_action_seeds.py: the seeds of one variant, or of several variants whose flags differ only in flags a
    --setting may set (one --setting per variant, the same seeds each). The process works in <out>/<env id>/<variant>/
    (several: <first variant>+<how many more>/); each run's folder then goes where its own would be."""

    runs: list
    script = SEEDS_SCRIPT
    peer = False
    env_id = property(lambda self: self.runs[0].env_id)
    variants = property(lambda self: list(dict.fromkeys(run.variant for run in self.runs)))
    seeds = property(lambda self: list(dict.fromkeys(run.seed for run in self.runs)))
    variant = property(lambda self: ", ".join(self.variants))  # for the progress lines
    seed = property(lambda self: " ".join(map(str, self.seeds)))

    def folder(self, out: Path) -> Path:
        first, more = self.variants[0], len(self.variants) - 1
        return out / self.env_id / (f"{first}+{more}" if more else first)

    def command(self):
        first = self.runs[0]
        command = [sys.executable, str(ROOT / self.script), "--env-id", self.env_id, "--seeds", *map(str, self.seeds),
                   "--total-timesteps", str(first.total_timesteps)]  # fmt: skip
        if len(self.variants) == 1:
            return command + first.flags
        settings = {run.variant: shlex.join(per_agent_part(run.flags)[1]) for run in self.runs}
        return command + per_agent_part(first.flags)[0] + [f"--setting={name}={flags}" for name, flags in settings.items()]

    def run_of(self, run_name, by_setting=None):
        """The run of a run folder the process wrote, runs/<env>__<exp name>[-<variant>]__<seed>__<time>, or None where
        the name is not one of its runs'. by_setting: whether the process named its runs after their --setting, as one
        of several variants does (the default: whether this batch has several)."""
        parts = seed_of(run_name)
        if parts is None:
            return None
        head, seed = parts
        named = [v for v in self.variants if head.endswith(f"-{v}")]
        by_setting = len(self.variants) > 1 if by_setting is None else by_setting
        variant = max(named, key=len, default=None) if by_setting else self.variants[0]
        return next((run for run in self.runs if (run.variant, run.seed) == (variant, seed)), None)


def seed_of(run_name):
    """(what comes before the seed, the seed) of a run folder's name, <env>__<exp name>__<seed>__<time>[-<k>]; None
    where it is not of that form. Read from the right: an exp name may end in _ (a variant a_), whose __ then runs into
    the seed's."""
    parts = run_name.rsplit("__", 2)
    if len(parts) != 3 or not parts[2].replace("-", "").isdigit():
        return None
    try:
        return parts[0], int(parts[1])
    except ValueError:
        return None


def batches(runs):
    """The runs of ppo_continuous_action.py grouped into Batches: by task, steps and the flags no --setting may set,
    then by the seeds each variant has left to run (a variant whose name cannot name a setting goes alone); the others
    alone."""
    groups, others = {}, []
    for run in runs:
        if run.script != "ppo_continuous_action.py" or run.peer:
            others.append(run)
            continue
        key = (run.env_id, run.total_timesteps, tuple(per_agent_part(run.flags)[0]))
        key += () if setting_name(run.variant) else (tuple(run.flags), run.variant)  # alone
        groups.setdefault(key, {}).setdefault(run.variant, []).append(run)
    found = []
    for variants in groups.values():
        by_seeds = {}
        for variant_runs in variants.values():
            by_seeds.setdefault(tuple(run.seed for run in variant_runs), []).extend(variant_runs)
        found += [Batch(group) for group in by_seeds.values()]
    return found + others


def folder_name(name):
    """Whether `name` (an env id, a variant's or a peer's name) can name one folder of <out>/<env id>/<variant>/seed<k>/:
    not empty, ".", "..", or holding a "/", each of which would put runs elsewhere, outside --out or in another's."""
    return bool(name) and name not in (".", "..") and "/" not in name and name.isprintable()


def build_matrix(options):
    """The runs of the preset, with the command line's choices taking precedence; exits in one line, before anything
    is written, where a name would not name a folder of its own in --out (folder_name)."""
    preset = PRESETS[options.preset] if options.preset else Preset(None, {}, [1])
    script, envs, seeds, peers = preset.script, preset.envs, preset.seeds, {}
    given = dict(spec.partition("=")[::2] for spec in options.peer or [])
    for spec in options.peer or []:
        name, sep, words = spec.partition("=")
        path, *flags = shlex.split(words) or [""]
        if not sep or not folder_name(name) or not Path(path).is_file():
            raise SystemExit(f"error: --peer {spec}: write NAME=SCRIPT naming an existing script, e.g. --peer cleanrl=PATH")
        peers[name] = (str(Path(path).resolve()), flags)
    for name, (variable, file) in preset.peers.items():
        if name in given:
            continue
        folder = os.environ.get(variable)
        if not folder or not (Path(folder) / file).is_file():
            said = f"{variable}={folder} holds no {file}" if folder else f"{variable} is not set"
            raise SystemExit(
                f"error: peer {name} of --preset {options.preset}: {said}; set {variable} to the folder of its {file} "
                f"(e.g. a clone of CleanRL: {variable}=~/cleanrl/cleanrl), or pass --peer {name}=PATH"
            )
        peers[name] = (str((Path(folder) / file).resolve()), [])
    script = options.script or script
    if script is None:
        raise SystemExit("error: pass --preset or --script")
    if not (ROOT / script).is_file():
        raise SystemExit(f"error: --script {script}: no such script; choose one of this project's ppo_*.py")
    if options.env_ids:
        envs = {env_id: envs.get(env_id, (None, "")) for env_id in options.env_ids}
    for env_id in envs:
        if not folder_name(env_id):
            raise SystemExit(f"error: --env-ids {env_id}: an env id names its runs' folder, <out>/<env id>/; pass one without "
                             "/ that is not . or ..")  # fmt: skip
    if not envs:
        raise SystemExit("error: no env ids; pass --env-ids")
    seeds = options.seeds or seeds
    if options.variant:
        variants = {}
        for spec in options.variant:
            name, sep, flags = spec.partition("=")
            if not sep or not folder_name(name):
                raise SystemExit(f"error: --variant {spec}: write NAME=FLAGS, NAME a folder's name (no /, not . or ..), e.g. "
                                 "--variant no-gae=--no-gae")  # fmt: skip
            variants[name] = flags
    else:
        variants = {"ablation": ablations(script), "table1": TABLE1}.get(options.preset, {"default": ""})
    if set(peers) & set(variants):
        raise SystemExit(f"error: {', '.join(sorted(set(peers) & set(variants)))}: a peer and a variant share a name")
    runs = []
    for env_id, (steps, env_flags) in envs.items():
        total = options.total_timesteps or steps
        if total is None:
            raise SystemExit(f"error: no step count for {env_id}; pass --total-timesteps")
        for name, variant_flags in variants.items():
            for seed in seeds:
                flags = shlex.split(env_flags) + shlex.split(options.flags) + shlex.split(variant_flags)
                runs.append(PlannedRun(script, env_id, name, seed, total, flags))
        for name, (path, peer_flags) in peers.items():
            runs += [PlannedRun(path, env_id, name, seed, total, peer_flags, peer=True) for seed in seeds]
    if options.preset == "table1":  # seed by seed, so that a matrix cut short still covers every task and setting
        runs.sort(key=lambda run: run.seed)
    return runs


def commit(root=ROOT):
    """The checkout's commit, with "+changes" when its tracked code (Python files, requirements.txt) differs from it,
    so that editing a report or README while runs start does not mark them; None outside git."""
    git = lambda *words: subprocess.run(["git", *words], cwd=root, capture_output=True, text=True)  # noqa: E731
    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", "*.py", "requirements.txt").stdout.strip()
    except OSError:
        return None
    return None if head.returncode else head.stdout.strip() + ("+changes" if dirty else "")


def committed_runs(results: Path):
    """The (env id, variant, seed) of the runs whose data a report folder holds (benchmark/report.py writes them); exits
    in one line where its runs.csv is cut or damaged (report_data.read_csv)."""
    table = results / "data" / "runs.csv"
    if not table.exists():
        return set()
    fix = f"restore it (git checkout), or pass --results a report folder whose data are whole (not {results})"
    rows = read_csv(table, fix)
    if not {"env_id", "variant", "seed"} <= set(rows):
        raise SystemExit(f"error: {table}: not the runs.csv benchmark/report.py writes (no env_id, variant, seed); {fix}")
    return set(zip(rows["env_id"], rows["variant"], rows["seed"].astype(int)))


def checkpoint_of(folder: Path):
    return max(glob(str(folder / "runs" / "*" / "agent.pt")), default=None)


def held(run_folder: Path):
    """Whether a process trains in `run_folder` now: the scripts hold an flock on their run folder while they train
    (ppo_utils.run.lock_run_folder), which goes with the process however it ends; tried without waiting, and let go."""
    try:
        descriptor = os.open(run_folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # gone, or not a folder: nothing trains in it
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without flock (some NFS mounts): nothing to tell
        return False
    finally:
        os.close(descriptor)  # and with it the lock, where this took it
    return False


def live_folders(folder: Path):
    """The run folders under `folder`/runs/ that a process trains in now (held)."""
    return [run_folder for run_folder in sorted(folder.glob("runs/*")) if held(run_folder)]


def trained_all(folder: Path, total_timesteps):
    """Whether the run in `folder` (seed<k>) trained all its updates, read from its own files: its checkpoint's counters
    (those --resume refuses as finished), or without one its logs reaching its budget (benchmark/report.py's rule: less
    than an iteration short). A finished run whose runner was killed after it exited has no done.json."""
    checkpoint = checkpoint_of(folder)
    if checkpoint:
        import torch  # here alone: most calls of the runner load no checkpoint

        try:
            saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
            iteration, step, budget = saved["iteration"], saved["global_step"], saved["args"]["total_timesteps"]
            return iteration > 0 and iteration >= budget // (step // iteration)  # step: iteration updates of all processes
        except Exception:  # torn, foreign, or counters that no run writes: the script's --resume says which
            return False
    logged = read_run(folder)
    return logged is not None and total_timesteps - logged[3] < max(logged[4], 1)


def gather_batch_runs(out: Path, runs):
    """Moves the run folders a batched process left in its own folder (<out>/<env id>/<variant or first+more>/runs/,
    where the runner was killed before it moved them) to their runs' folders, so that those are continued or recorded
    like any other. Returns ({key of a run whose folder a process still trains in: left where it is}, {key of a moved
    run: the runs its process trained})."""
    live, agents = set(), {}
    for env_id in dict.fromkeys(run.env_id for run in runs):
        env_runs = [run for run in runs if run.env_id == env_id]
        for folder in [runs.parent for runs in sorted((out / env_id).glob("*/runs"))]:
            several = "+" in folder.name  # <first>+<more>: its runs named after their settings
            own = env_runs if several else [run for run in env_runs if run.variant == folder.name]
            if not own or link_outside(out, folder, []):
                continue
            moved, held_runs = move_batch_runs(Batch(own), folder, out, several)
            live |= {run.key for run in held_runs}
            agents |= {run.key: len(moved) + len(held_runs) for run in moved}
    return live, agents


def move_batch_runs(batch: Batch, folder: Path, out: Path, by_setting=None):
    """Moves each run folder of `batch` in `folder`/runs/ to <out>/<env id>/<variant>/seed<k>/runs/, but those a process
    trains in now and those of other runs; removes runs/ once empty. Returns (the runs moved, those held)."""
    moved, held_runs = [], []
    for run_folder in sorted(folder.glob("runs/*")):
        run = batch.run_of(run_folder.name, by_setting)
        target = run.folder(out) / "runs" / run_folder.name if run else None
        if run is None or target.exists():
            continue
        if held(run_folder):
            held_runs.append(run)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(run_folder), str(target))
        moved.append(run)
    if (folder / "runs").is_dir() and not any((folder / "runs").iterdir()):
        (folder / "runs").rmdir()
    return moved, held_runs


def write_record(run: PlannedRun, out: Path, record):
    (run.folder(out) / "done.json").write_text(json.dumps(record, indent=1) + "\n")


# what a script prints when a signal stopped it after saving a checkpoint (ppo_utils.run.STOPPED, which
# tests/test_runner.py checks it against: this runner imports nothing of the scripts); the script then exits 0
STOPPED_LINE = "stopped by a signal; continue with:"


# done.json's note on a finished run recorded from its own files (trained_all), its runner having been killed after it
RECOVERED = "finished without done.json: recorded from its files by a later call; its wall time, commit and machine unknown"

RUNNING = set()  # the training processes now running, which a stop of the runner passes on to


def interrupt(signum, frame):
    raise KeyboardInterrupt


LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_runner(runner=os.getpid()):
    """The training process's preexec_fn: it gets SIGTERM (saves a checkpoint and exits, as when the runner is stopped)
    when the runner's thread that started it ends, however the runner ends, a SIGKILL too; where the runner is gone
    already (before the call took effect), it stops at once. Linux alone: elsewhere the children outlive a killed runner."""
    if LIBC is not None:
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != runner:
            os.kill(os.getpid(), signal.SIGTERM)


def launch(command, folder: Path, stopping: threading.Event, threads):
    """Runs a training process in `folder`, its output appended to output.log there, with `threads` torch threads.
    Returns (exit code, seconds, status: done, stopped (by a signal, after saving a checkpoint) or failed, the commit)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env.setdefault("WANDB_MODE", "offline")
    revision, start = commit(), time.time()  # the code this process runs, not what is checked out when it ends
    with open(folder / "output.log", "a") as log:
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        start_of_output = log.tell()
        with subprocess.Popen(
            command, cwd=folder, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_runner
        ) as process:
            RUNNING.add(process)
            returncode = process.wait()
            RUNNING.discard(process)
    seconds = time.time() - start
    status = "done" if returncode == 0 and not stopping.is_set() else "failed"
    with open(folder / "output.log") as log:  # a stop by a signal this runner did not get exits 0 too
        log.seek(start_of_output)
        if status == "done" and STOPPED_LINE in log.read():
            status = "stopped"
    return returncode, seconds, status, revision


def execute(unit, out: Path, stopping: threading.Event, threads=1):
    """Runs a PlannedRun's or a Batch's training process in its folder with `threads` torch threads (the CPUs shared
    among the workers), continuing from the checkpoints where each run has one (--resume takes the runs' own flags),
    else starting all over; a Batch's run folders are then moved to their runs' folders. Writes each run's done.json
    when the process completed (a Batch's: the whole process's seconds). Returns (unit, seconds, status): done, stopped
    (by a signal, after saving a checkpoint), failed, or live (another process trains in one of its folders now:
    nothing touched). MUJOCO_GL is left as the caller has it: no run renders unless its flags ask to."""
    folder, runs = unit.folder(out), unit.runs
    if any(live_folders(path) for path in {folder, *(run.folder(out) for run in runs)}):
        return unit, 0.0, "live"
    folder.mkdir(parents=True, exist_ok=True)
    checkpoints = [checkpoint_of(run.folder(out)) for run in runs]
    if all(checkpoints):  # interrupted earlier: continue
        command = [sys.executable, str(ROOT / unit.script), "--resume", *checkpoints]
    else:  # none, or not all of a Batch's, has a checkpoint: all start over (a run that died without one too)
        command = unit.command()
        for path in {folder / "runs", *(run.folder(out) / "runs" for run in runs)}:
            if path.exists():
                shutil.rmtree(path)
    returncode, seconds, status, revision = launch(command, folder, stopping, threads)
    if isinstance(unit, Batch):
        move_batch_runs(unit, folder, out)
    if status == "done":
        record = {"command": shlex.join(unit.command()), "returncode": returncode, "seconds": round(seconds, 1)}
        record |= {"commit": revision, "machine": machine()}  # benchmark/report.py states both
        record |= {"seeds_in_process": len(runs)} if isinstance(unit, Batch) else {}  # its agents
        record |= {"peer": str(Path(unit.script).name)} if unit.peer else {}  # another project's script
        for run in runs:
            write_record(run, out, record)
    return unit, seconds, status


def slurm_job(name, count, cpus, out, program, argv, drop, then=""):
    """A Slurm array job of `count` tasks of `cpus` CPUs each, logging to <out>/slurm-<job>_<task>.log, each running
    `program` with argv less the job's own options `drop` (--X VALUE or --X=VALUE), then `then`."""
    words, kept = list(argv), []
    while words:
        word = words.pop(0)
        if word in drop:
            words = words[1:]
        elif not word.startswith(tuple(f"{flag}=" for flag in drop)):
            kept.append(word)
    return (
        "#!/bin/bash\n"
        f"#SBATCH --job-name={name}\n"
        f"#SBATCH --array=0-{count - 1}\n"
        f"#SBATCH --cpus-per-task={cpus}\n"
        "#SBATCH --mem=8G\n"
        f"#SBATCH --output={out}/slurm-%A_%a.log\n"
        f"{shlex.join([sys.executable, str(Path(program).resolve()), *kept])}{then}\n"
    )


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--preset", choices=list(PRESETS), help="a predefined matrix; the options below override it")
    parser.add_argument("--script", help="ppo_continuous_action.py, ppo_atari.py, ppo_rnn.py or ppo_rnn_continuous_action.py")
    parser.add_argument("--env-ids", nargs="+", help="environment ids")
    parser.add_argument("--seeds", nargs="+", type=int, help="seeds (default: the preset's, or 1)")
    parser.add_argument("--total-timesteps", type=int, help="steps of every run (default: the preset's per env)")
    parser.add_argument("--flags", default="", help='flags for every run, e.g. --flags "--vector-env envpool" (one flag '
                        "alone: --flags=--no-gae)")  # fmt: skip
    parser.add_argument("--variant", action="append", help="NAME=FLAGS, repeatable, e.g. --variant no-gae=--no-gae")
    parser.add_argument("--peer", action="append", help="NAME=SCRIPT, repeatable: another project's script, run with its "
                        "own defaults ('NAME=SCRIPT FLAGS': with those)")  # fmt: skip
    parser.add_argument("--out", help="folder of the runs (default: benchmark/runs/<preset or script name>)")
    parser.add_argument("--results", help="report folder whose data/runs.csv lists runs not to run again (default: "
                        "benchmark/results/<preset or script name>)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="runs at the same time (default: the CPUs)")
    parser.add_argument("--index", type=int, help="run only the run with this index in the matrix (for array jobs)")
    parser.add_argument("--batch-seeds", action="store_true", help=f"train the seeds of each task of ppo_continuous_action.py "
                        f"in one process of {SEEDS_SCRIPT}, its variants too where their flags differ only in those a "
                        "--setting may set (the same runs, sooner; docs/speed.md)")  # fmt: skip
    parser.add_argument("--print-commands", action="store_true", help="print one shell line per unfinished run and exit")
    parser.add_argument("--slurm", metavar="FILE", help="write a Slurm array job script running the matrix and exit")
    options = parser.parse_args(argv)
    if options.workers < 1:
        parser.error(f"--workers {options.workers}: pass 1 or more")
    if options.batch_seeds and (options.slurm or options.index is not None):
        parser.error("--batch-seeds groups runs into processes; --slurm and --index take one run each: drop one")
    name = options.preset or Path(options.script or "runs").stem
    options.out = options.out or str(ROOT / "benchmark" / "runs" / name)
    out = Path(options.out).resolve()
    if out.exists() and not out.is_dir():
        parser.error(f"--out {options.out} is a file; pass a folder (the runs go in <out>/<env id>/<variant>/seed<k>/)")
    unwritable = None if options.print_commands or options.slurm else writable(out)  # those two write no run
    if unwritable:
        parser.error(f"--out {options.out}: {unwritable}; pass --out a folder you can write to")
    matrix = build_matrix(options)
    recorded = committed_runs(Path(options.results or ROOT / "benchmark" / "results" / name))
    runs = [run for run in matrix if (run.env_id, run.variant, run.seed) not in recorded]
    committed = len(matrix) - len(runs)
    if options.slurm:
        name = f"ppo-{options.preset or Path(options.script).stem}"  # each task runs one run through this program
        then = " --workers 1 --index $SLURM_ARRAY_TASK_ID"
        Path(options.slurm).write_text(slurm_job(name, len(runs), 2, options.out, __file__, argv, ["--slurm"], then))
        print(f"wrote {options.slurm}: {len(runs)} array tasks; submit with: sbatch {options.slurm}")
        return
    if options.index is not None:
        if not 0 <= options.index < len(runs):
            parser.error(f"--index {options.index}: the matrix has runs 0..{len(runs) - 1}")
        runs = [runs[options.index]]
    todo = [run for run in runs if not (run.folder(out) / "done.json").exists()]
    if options.print_commands:
        for run in batches(todo) if options.batch_seeds else todo:
            print(f"cd {shlex.quote(str(run.folder(out)))} && {shlex.join(run.command())}")
        return
    folders = [run.folder(out) for run in todo] + [batch.folder(out) for batch in batches(todo) if isinstance(batch, Batch)]
    link = next((link for folder in folders if (link := link_outside(out, folder, []))), None)
    if link:
        parser.error(f"--out {options.out}: {link} links to {os.readlink(link)}, outside it; the runner writes and "
                     "removes inside --out alone: put a folder in place of the link")  # fmt: skip

    out.mkdir(parents=True, exist_ok=True)
    record, command = out / "command.txt", "python benchmark/run.py " + shlex.join(argv)  # read by benchmark/report.py
    previous = record.read_text().splitlines() if record.exists() else []
    if command not in previous:
        record.write_text("\n".join(previous + [command]) + "\n")
    live, agents = gather_batch_runs(out, todo)  # a batched process's runs its runner was killed before it moved
    live |= {run.key for run in todo if live_folders(run.folder(out))}
    recovered = [run for run in todo if run.key not in live and trained_all(run.folder(out), run.total_timesteps)]
    for run in recovered:
        record = {"command": shlex.join(run.command()), "returncode": 0, "seconds": None, "commit": None, "machine": None}
        record |= {"seeds_in_process": agents[run.key]} if run.key in agents else {}
        write_record(run, out, record | {"recovered": RECOVERED})
    todo = [run for run in todo if run.key not in live and run not in recovered]
    pending = len(todo)
    if options.batch_seeds:
        todo = batches(todo)
    print(
        f"{len(runs)} runs in {out}: {len(runs) - pending - len(live)} already done, {pending} to run on "
        f"{options.workers} workers"
        + (f" in {len(todo)} processes" if options.batch_seeds else "")
        + (f"; {len(recovered)} of the done finished without a done.json, recorded now from their files" if recovered else "")
        + (f"; {len(live)} trained by another process now, left alone" if live else "")
        + (f"; {committed} more skipped: their data are in the results folder already" if committed else "")
    )
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background, which ignores it
    signal.signal(signal.SIGTERM, interrupt)  # a cluster's preemption or a kill stops it as Ctrl-C does
    stopping, finished, unfinished, durations = threading.Event(), 0, [], []
    with ThreadPoolExecutor(max_workers=options.workers) as pool:
        threads = max(1, (os.cpu_count() or 1) // options.workers)
        futures = [pool.submit(execute, run, out, stopping, threads) for run in todo]
        try:
            for future in as_completed(futures):
                run, seconds, status = future.result()
                finished += 1
                durations.append(seconds)
                if status == "live":  # started since this call looked: by another runner on the same --out
                    live |= {one.key for one in run.runs}
                elif status != "done" and not stopping.is_set():
                    unfinished.append(run)
                eta = sum(durations) / len(durations) * -(-(len(todo) - finished) // options.workers)  # rounds to come
                said = {"failed": f"FAILED (see {run.folder(out) / 'output.log'})", "stopped": "STOPPED by a signal",
                        "live": "LEFT ALONE: another process trains it now"}.get(status, status)  # fmt: skip
                print(f"[{finished}/{len(todo)}] {run.env_id} {run.variant} seed {run.seed}: {said} in {seconds:.0f} s; "
                      f"about {eta / 60:.0f} min left", flush=True)  # fmt: skip
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the runs save a checkpoint and exit, no new run starts
            stopping.set()
            for future in futures:
                future.cancel()
            for process in list(RUNNING):  # a terminal's Ctrl-C reached them already; a kill of the runner did not
                process.send_signal(signal.SIGTERM)
            print("interrupted; run the same command again to continue the unfinished runs", flush=True)
            raise SystemExit(130)
    if unfinished:
        raise SystemExit(f"error: {len(unfinished)} of {len(todo)} runs failed or were stopped; their output.log says why, "
                         "and the same command runs them again (a stopped run continues from its checkpoint)")  # fmt: skip
    if live:
        raise SystemExit(f"error: {len(live)} runs are trained by another process now (it holds their run folders); run the "
                         "same command again once it has ended, which continues or records them")  # fmt: skip
    print(f"all {len(runs)} runs done; summarize them with: python benchmark/report.py {out}")


if __name__ == "__main__":
    main()
