"""Speed side by side: our script and a peer's (CleanRL's, say) on the same env, steps and seed, run alternately
(ours, peer, ours, peer, ...) for N rounds, each run a fresh process in a fresh scratch folder. The machine's speed
drifts within a session and changes between sessions, so a speed is only quoted as the ratio of the two, measured in
one such run: wall time (start to exit, imports included) and the SPS each script logged last (charts/SPS).

    python benchmark/versus.py ppo_continuous_action.py $CLEANRL_DIR/ppo_continuous_action.py \\
        --env-id Hopper-v5 --total-timesteps 102400 --rounds 3 --output benchmark/results/versus-hopper.md
    python benchmark/versus.py ppo_atari.py $CLEANRL_DIR/ppo_atari.py --env-id BreakoutNoFrameskip-v4 \\
        --total-timesteps 40960 --rounds 3 -- --vector-env envpool     # flags after -- go to our script only

Both scripts take --env-id, --total-timesteps, --seed and --num-steps (where given: a start-up run of one small batch);
each runs with its own defaults otherwise. The peer's folder
is put on PYTHONPATH (CleanRL's Atari script imports cleanrl_utils from beside it).
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from report_data import read_run  # beside this file

ROOT = Path(__file__).resolve().parent.parent


def run_once(script, flags, env, timeout):
    """Runs `python script flags` in a new scratch folder; returns (wall seconds, last logged SPS or None)."""
    with tempfile.TemporaryDirectory(prefix="versus-") as folder:
        start = time.perf_counter()
        try:
            result = subprocess.run(
                [sys.executable, str(script), *flags], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            sys.exit(f"error: {script} ran past --timeout {timeout:g} s; raise --timeout or lower --total-timesteps")
        wall = time.perf_counter() - start
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["(no output)"]
            sys.exit(f"error: {script} exited with {result.returncode}: {tail[0]}")
        logged = read_run(Path(folder))  # report.py's reader: (episodes, statistics, last charts/SPS or NaN)
        return wall, None if logged is None or np.isnan(logged[2]) else float(logged[2])


def machine():
    """One line: the CPU model, its cores, the GPU torch sees (if any), and the versions that matter."""
    model = platform.processor() or platform.machine()
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        model = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name"))
    except (OSError, StopIteration):
        pass
    import torch

    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{model}, {os.cpu_count()} CPUs{gpu}, Python {platform.python_version()}, torch {torch.__version__}"


def speed_parser(doc, env_id=None, steps=None, steps_help=None, rounds_help=None, timed="run"):
    """The flags of versus.py and seeds_speed.py, the tool's own added after them: --env-id and --total-timesteps
    (required unless given a default here), --rounds, --timeout (its help names what one `timed` is) and --output."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--env-id", default=env_id, required=env_id is None)
    parser.add_argument("--total-timesteps", type=int, default=steps, required=steps is None, help=steps_help)
    parser.add_argument("--rounds", type=int, default=3, help=rounds_help)
    parser.add_argument("--timeout", type=float, default=3600, help=f"seconds one {timed} may take")
    parser.add_argument("--output", help="also write the Markdown report to this file")
    return parser


def write_report(text, output):
    """Prints the report, and writes it to `output` too where one is given."""
    print(text)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(text)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def report(args, rows, ours, peer):
    """The Markdown report: the command, the machine, each round, the medians and their ratios."""
    lines = [
        f"# {Path(ours).name} against {peer}",
        "",
        f"`python benchmark/versus.py {' '.join(sys.argv[1:])}`",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {machine()}; {args.env_id}, {args.total_timesteps} steps, "
        f"seed {args.seed}, {args.rounds} alternating rounds (ours first).",
        "",
        "| round | ours: wall s | ours: SPS | peer: wall s | peer: SPS |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for i, (our_wall, our_sps, peer_wall, peer_sps) in enumerate(rows, 1):
        lines.append(f"| {i} | {our_wall:.1f} | {fmt(our_sps, '.0f')} | {peer_wall:.1f} | {fmt(peer_sps, '.0f')} |")
    walls = median([r[0] for r in rows]), median([r[2] for r in rows])
    sps = median([r[1] for r in rows]), median([r[3] for r in rows])
    lines.append(f"| median | {walls[0]:.1f} | {fmt(sps[0], '.0f')} | {walls[1]:.1f} | {fmt(sps[1], '.0f')} |")
    sps_ratio = sps[0] / sps[1] if None not in sps else None
    lines += [
        "",
        f"Peer's wall time / ours (medians): **{walls[1] / walls[0]:.2f}x**; "
        f"our logged SPS / the peer's (medians): {fmt(sps_ratio, '.2f')}x.",
    ]
    return "\n".join(lines) + "\n", walls[1] / walls[0], sps_ratio


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ours_only = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = speed_parser(__doc__, rounds_help="ours then the peer's, this many times")
    parser.add_argument("ours", help="our script, e.g. ppo_continuous_action.py (relative to the repository's root)")
    parser.add_argument(
        "peer",
        help="the peer's script, e.g. $CLEANRL_DIR/ppo_continuous_action.py (CLEANRL_DIR: the folder of CleanRL's scripts)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-steps", type=int, help="steps per env in a rollout, passed to both (default: each its own)")
    args = parser.parse_args(argv)
    ours = Path(args.ours) if Path(args.ours).is_absolute() else ROOT / args.ours
    peer = Path(args.peer).resolve()
    for flag, path in (("ours", ours), ("peer", peer)):
        if not path.is_file():
            parser.error(f"{flag}: {path} is not a file")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    common = ["--env-id", args.env_id, "--total-timesteps", str(args.total_timesteps), "--seed", str(args.seed)]
    common += ["--num-steps", str(args.num_steps)] if args.num_steps else []
    env = {**os.environ, "WANDB_MODE": "offline"}
    peer_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(peer.parent), env.get("PYTHONPATH")]))}
    rows = []
    for i in range(1, args.rounds + 1):
        our_wall, our_sps = run_once(ours, common + ours_only, env, args.timeout)
        peer_wall, peer_sps = run_once(peer, common, peer_env, args.timeout)
        rows.append((our_wall, our_sps, peer_wall, peer_sps))
        print(f"round {i}/{args.rounds}: ours {our_wall:.1f} s (SPS {our_sps}), peer {peer_wall:.1f} s (SPS {peer_sps})")
    text, wall_ratio, sps_ratio = report(args, rows, ours, args.peer)
    write_report(text, args.output)
    return wall_ratio, sps_ratio


if __name__ == "__main__":
    main()
