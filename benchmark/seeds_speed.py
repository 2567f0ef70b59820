"""Many seeds in one process against one process per seed: ppo_continuous_action_seeds.py training N seeds at once
against ppo_continuous_action.py training seeds one after another (as benchmark/run.py at one worker does), side by side
in rounds, each run a fresh process in a fresh scratch folder (wall time from start to exit, imports and compiling
included); and the ceiling each configuration has: its envs alone (the vector env with all its wrappers) stepped with
random actions.

    python benchmark/seeds_speed.py --env-id Hopper-v5 --total-timesteps 102400 --seeds-counts 3 8 16 --rounds 3 \\
        --output benchmark/results/seeds-speed.md

Each round runs, in this order: the single script on seeds 1 .. --single-seeds one after another, then the batched
script on seeds 1 .. N for each N, then the env-only rates. A study's steps per second with one process per seed do not
depend on how many seeds it has (each run is the same process, one after another), so the single script's aggregate
rate of the round stands for every N; --single-seeds 16 runs the whole sequence instead.
"""

import os
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

from sps import env_only_sps, load_script  # beside this file
from versus import machine, run_once, speed_parser, write_report

ROOT = Path(__file__).resolve().parent.parent


def env_ceilings(env_id, counts, steps):
    """{N: env-only SPS} (sps.env_only_sps): 0 for the single script's vector env (one env), N for the batched
    script's with N agents."""
    import torch

    torch.set_num_threads(1)
    single, batched = load_script("ppo_continuous_action.py"), load_script("ppo_continuous_action_seeds.py")
    rates = {0: env_only_sps(single.make_envs(single.Args(env_id=env_id)), 1, steps)}
    for n in counts:
        args = batched.SeedsArgs(env_id=env_id, seeds=tuple(range(1, n + 1)))
        rates[n] = env_only_sps(batched.make_envs(args), 1, max(steps // n, 200))
    return rates


def report(args, rounds):
    lines = [
        "# Many seeds in one process against one process per seed",
        "",
        f"`python benchmark/seeds_speed.py {' '.join(sys.argv[1:])}`",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {machine()}; {args.env_id}, {args.total_timesteps} steps per "
        f"seed, default flags, one torch thread (the scripts' default); {args.rounds} rounds. Aggregate SPS: all seeds' "
        "steps over the wall time of all their processes (start to exit). Env-only: the same vector env with its "
        "wrappers, random actions, no agent (the ceiling).",
        "",
        "| round | single script, seeds 1-{0} one after another: wall s / aggregate SPS | ".format(args.single_seeds)
        + " | ".join(f"{n} seeds in one process: wall s / aggregate SPS / x single" for n in args.seeds_counts)
        + " |",
        "| ---: | ---: | " + " | ".join("---:" for _ in args.seeds_counts) + " |",
    ]
    ratios = {n: [] for n in args.seeds_counts}
    for i, (single_wall, single_sps, batched, _) in enumerate(rounds, 1):
        cells = []
        for n in args.seeds_counts:
            wall, sps = batched[n]
            ratios[n].append(sps / single_sps)
            cells.append(f"{wall:.1f} / {sps:.0f} / {sps / single_sps:.2f}x")
        lines.append(f"| {i} | {single_wall:.1f} / {single_sps:.0f} | " + " | ".join(cells) + " |")
    lines.append(
        "| median | - / {0:.0f} | ".format(statistics.median(r[1] for r in rounds))
        + " | ".join(
            f"- / {statistics.median(r[2][n][1] for r in rounds):.0f} / **{statistics.median(ratios[n]):.2f}x**"
            for n in args.seeds_counts
        )
        + " |"
    )
    ceilings = [r[3] for r in rounds]
    lines += [
        "",
        "Env-only SPS (median of the rounds) and each configuration's share of its ceiling (its aggregate SPS over it):",
        "",
        "| configuration | env-only SPS | training's share of it |",
        "| --- | ---: | ---: |",
    ]
    single_ceiling = statistics.median(c[0] for c in ceilings)
    lines.append(
        f"| single script (1 env) | {single_ceiling:.0f} | {statistics.median(r[1] for r in rounds) / single_ceiling:.0%} |"
    )
    for n in args.seeds_counts:
        ceiling = statistics.median(c[n] for c in ceilings)
        share = statistics.median(r[2][n][1] for r in rounds) / ceiling
        lines.append(f"| {n} seeds in one process ({n} envs) | {ceiling:.0f} | {share:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = speed_parser(__doc__, "Hopper-v5", 102_400, steps_help="steps per seed", timed="process")
    parser.add_argument("--seeds-counts", type=int, nargs="+", default=[3, 8, 16], help="N: seeds in one process")
    parser.add_argument("--single-seeds", type=int, default=3, help="seeds the single script runs one after another")
    parser.add_argument("--env-steps", type=int, default=4096, help="env-only: vector env steps of the single script's")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.single_seeds < 1 or min(args.seeds_counts) < 1 or args.env_steps < 1:
        parser.error("--rounds, --single-seeds, --seeds-counts and --env-steps take counts of 1 or more")
    env = {**os.environ, "WANDB_MODE": "offline"}
    common = ["--env-id", args.env_id, "--total-timesteps", str(args.total_timesteps)]
    rounds = []
    for i in range(1, args.rounds + 1):
        walls = [run_once(ROOT / "ppo_continuous_action.py", common + ["--seed", str(seed)], env, args.timeout)[0]
                 for seed in range(1, args.single_seeds + 1)]  # fmt: skip
        single = (sum(walls), args.single_seeds * args.total_timesteps / sum(walls))
        batched = {}
        for n in args.seeds_counts:
            seeds = ["--seeds", *map(str, range(1, n + 1))]
            wall, _ = run_once(ROOT / "ppo_continuous_action_seeds.py", common + seeds, env, args.timeout)
            batched[n] = (wall, n * args.total_timesteps / wall)
        ceilings = env_ceilings(args.env_id, args.seeds_counts, args.env_steps)
        rounds.append((*single, batched, ceilings))
        said = ", ".join(f"{n} seeds {batched[n][1] / single[1]:.2f}x" for n in args.seeds_counts)
        print(f"round {i}/{args.rounds}: single {single[1]:.0f} SPS; {said}", flush=True)
    write_report(report(args, rounds), args.output)


if __name__ == "__main__":
    main()
