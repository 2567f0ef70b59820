"""The batched script of two versions side by side: ppo_continuous_action_seeds.py of OLD and of NEW (git revisions or
checkout folders) training N seeds at once, alternated in rounds (old, new for each N), each run a fresh process in a
fresh scratch folder, timed from start to exit (imports and compiling included). A change to the batched script, or to
what it takes from its parent, is measured so against what it replaced.

    python benchmark/seeds_versions.py e1236a6 . --env-id Hopper-v5 --total-timesteps 10240 --seeds-counts 8 16 \\
        --rounds 3 --output benchmark/results/seeds-versions.md
"""

import os
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

from same_scalars import REPO, BadInput, checkout  # beside this file
from versus import machine, run_once, speed_parser, write_report


def main(argv=None):
    parser = speed_parser(__doc__, env_id="Hopper-v5", steps=10240, steps_help="steps per seed", timed="run")
    parser.add_argument("old", metavar="OLD", help="a git revision or a checkout folder")
    parser.add_argument("new", metavar="NEW", help="a git revision or a checkout folder")
    parser.add_argument("--seeds-counts", type=int, nargs="+", default=[8, 16], help="N: seeds in one process")
    args = parser.parse_args(argv)
    tmp, worktrees = tempfile.mkdtemp(prefix="seeds_versions-"), []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    try:
        sides = {side: checkout(arg, side, tmp, worktrees) for side, arg in (("OLD", args.old), ("NEW", args.new))}
        walls = {(side, n): [] for side in sides for n in args.seeds_counts}
        logged = {(side, n): [] for side in sides for n in args.seeds_counts}  # the run's last charts/SPS (one agent's)
        for round_ in range(1, args.rounds + 1):
            for n in args.seeds_counts:
                flags = ["--env-id", args.env_id, "--total-timesteps", str(args.total_timesteps), "--no-save-model",
                         "--seeds", *map(str, range(1, n + 1))]  # fmt: skip
                for side, folder in sides.items():
                    wall, sps = run_once(os.path.join(folder, "ppo_continuous_action_seeds.py"), flags, env, args.timeout)
                    walls[side, n].append(wall)
                    logged[side, n].append(n * sps)
                    print(f"round {round_}, {n} seeds, {side}: {wall:.1f} s", file=sys.stderr, flush=True)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        for folder in worktrees:
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", folder], check=False)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# The batched script, two versions side by side", "", f"`python benchmark/seeds_versions.py "
             f"{' '.join(argv if argv is not None else sys.argv[1:])}`", "",
             f"{when}; {machine()}; {args.env_id}, {args.total_timesteps} steps per seed, default flags, "
             f"{args.rounds} rounds alternated (OLD = {args.old}, NEW = {args.new}). Aggregate SPS: all seeds' steps over "
             "the process's wall time (start to exit); logged: the agents' charts/SPS at the end (its steps since the first "
             "update, the warm-up and compiling left out) times the agents.", "",
             "| seeds | round | OLD wall s / SPS / logged SPS | NEW wall s / SPS / logged SPS | NEW / OLD: wall / logged |",
             "| ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for n in args.seeds_counts:
        steps = n * args.total_timesteps
        rows = zip(walls["OLD", n], walls["NEW", n], logged["OLD", n], logged["NEW", n])
        for i, (old, new, old_sps, new_sps) in enumerate(rows, 1):
            lines.append(f"| {n} | {i} | {old:.1f} / {steps / old:.0f} / {old_sps:.0f} | {new:.1f} / {steps / new:.0f} / "
                         f"{new_sps:.0f} | {old / new:.2f}x / {new_sps / old_sps:.2f}x |")  # fmt: skip
        wall = statistics.median(o / w for o, w in zip(walls["OLD", n], walls["NEW", n]))
        sps = statistics.median(w / o for o, w in zip(logged["OLD", n], logged["NEW", n]))
        lines.append(f"| {n} | median | | | **{wall:.2f}x** / **{sps:.2f}x** |")
    write_report("\n".join(lines) + "\n", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
