"""G10's two backends of the continuous scripts side by side: gymnasium's vector env (the default, --vector-env sync)
against envpool's (--vector-env envpool), each configuration run with one and then the other, alternated in rounds, each
run a fresh process in a fresh scratch folder (wall time from start to exit, imports and compiling included, and the
run's own charts/SPS); then each configuration's ceiling, its vector env alone (all its wrappers) under random actions,
and for the batched script's envpool the two ways its agents could step: one pool of all agents' envs (what it does)
against one pool per agent stepped together. --parts splits (alone, or beside the others) takes one training run of
each configuration and backend apart (benchmark/sps.py's split: its median iteration's env steps, update and the rest)
and sets beside it the most any env could give: the steps of an iteration over its update and rest alone.

    python benchmark/envpool_speed.py --env-id Hopper-v5 --total-timesteps 102400 --num-envs 1 8 \\
        --seeds-counts 8 16 --seed-steps 20480 --rounds 3 --output benchmark/results/envpool-speed.md
    python benchmark/envpool_speed.py --parts splits --output benchmark/results/envpool-splits.md
"""

import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from sps import env_only_sps, script_args, timed_training  # beside this file
from versus import machine, run_once, speed_parser, write_report

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("sync", "envpool")
PARTS = ("rounds", "ceilings", "pools", "splits")  # the default: all but splits


def configurations(args):
    """(label, script, flags, --total-timesteps, agents) of each configuration, the backend's flag left to add."""
    single = [(f"single, --num-envs {n}", "ppo_continuous_action.py", ["--num-envs", str(n), "--seed", "1"],
               args.total_timesteps, 1) for n in args.num_envs]  # fmt: skip
    batched = [(f"batched, {n} seeds", "ppo_continuous_action_seeds.py", ["--seeds", *map(str, range(1, n + 1))],
                args.seed_steps, n) for n in args.seeds_counts]  # fmt: skip
    return single + batched


def config_args(args, config, backend):
    """A configuration's script (its module) and its Args on `backend`, as its command line makes them."""
    _, script, flags, steps, _ = config
    return script_args(script, args.env_id, steps, ["--vector-env", backend, *flags])


def ceilings(args, steps=2000):
    """{(label, backend): env-only SPS} of each configuration's vector env, as its script makes it."""
    found = {}
    for config in configurations(args):
        for backend in BACKENDS:
            module, run = config_args(args, config, backend)
            envs = module.make_envs(run)
            found[config[0], backend] = env_only_sps(envs, 1, max(steps // envs.num_envs, 200))
    return found


def splits(args):
    """{(label, backend): (steps per iteration, its median seconds, env seconds, update seconds)} of one training run of
    each configuration on each backend, in this process (benchmark/sps.py's timed_training), without checkpoints, its
    runs' logs in a scratch folder."""
    found, here = {}, os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:
            for config in configurations(args):
                for backend in BACKENDS:
                    module, run = config_args(args, config, backend)
                    _, env_s, update_s, iteration_s = timed_training(module, replace(run, save_model=False))
                    found[config[0], backend] = (config[4] * run.batch_size, iteration_s, env_s, update_s)
                    print(f"split, {config[0]}, {backend}: iteration {1e3 * iteration_s:.0f} ms, env "
                          f"{1e3 * env_s:.0f} ms", file=sys.stderr, flush=True)  # fmt: skip
        finally:
            os.chdir(here)
    return found


def split_table(found, configs):
    """The splits' Markdown: per configuration and backend, the iteration's parts, the env's share, and the steps/s of
    an iteration with its env steps left out, the most a faster env could give, also as a multiple of gymnasium's."""
    lines = ["| configuration | backend | iteration ms: env + update + rest | env's share | steady SPS | SPS with the env "
             "free | that / gymnasium's steady SPS |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for label, *_ in configs:
        gym_steps, gym_iteration = found[label, "sync"][:2]
        for backend in BACKENDS:
            steps, iteration, env, update = found[label, backend]
            free = steps / (iteration - env)
            lines.append(f"| {label} | {'gymnasium' if backend == 'sync' else backend} | {1e3 * iteration:.0f}: "
                         f"{1e3 * env:.0f} + {1e3 * update:.0f} + {1e3 * (iteration - env - update):.0f} | "
                         f"{env / iteration:.0%} | {steps / iteration:.0f} | {free:.0f} | "
                         f"{free / (gym_steps / gym_iteration):.2f}x |")  # fmt: skip
    return lines


def pools_sps(env_id, agents, steps=500):
    """Steps/s of envpool's raw envs (no wrappers) for `agents` agents of one env each: one pool of all (what the
    batched script steps) against one pool per agent, every pool sent its actions before the first is read."""
    import envpool

    shape = envpool.make_spec(env_id).action_space.shape
    actions = np.random.default_rng(0).uniform(-1, 1, size=(steps, agents) + shape)
    one = envpool.make_gymnasium(env_id, num_envs=agents, env_seed=list(range(1, agents + 1)))
    many = [envpool.make_gymnasium(env_id, num_envs=1, env_seed=[seed]) for seed in range(1, agents + 1)]
    one.reset()
    for pool in many:
        pool.reset()
    start = time.perf_counter()
    for action in actions:
        one.step(action)
    one_sps = steps * agents / (time.perf_counter() - start)
    start = time.perf_counter()
    for action in actions:
        for pool, row in zip(many, action):
            pool.send(row[None])
        for pool in many:
            pool.recv()
    many_sps = steps * agents / (time.perf_counter() - start)
    for pool in [one, *many]:
        pool.close()
    return one_sps, many_sps


def rounds_table(args, configs, env):
    """Each configuration's runs on both backends, alternated in rounds, as Markdown rows with their medians."""
    walls = {(label, backend): [] for label, *_ in configs for backend in BACKENDS}
    logged = {(label, backend): [] for label, *_ in configs for backend in BACKENDS}
    for round_ in range(1, args.rounds + 1):
        for label, script, flags, steps, agents in configs:
            for backend in BACKENDS if round_ % 2 else reversed(BACKENDS):  # who goes first alternates
                command = ["--env-id", args.env_id, "--total-timesteps", str(steps), "--no-save-model",
                           "--vector-env", backend, *flags]  # fmt: skip
                wall, sps = run_once(ROOT / script, command, env, args.timeout)
                walls[label, backend].append(steps * agents / wall)
                logged[label, backend].append(None if sps is None else sps * agents)
                print(f"round {round_}, {label}, {backend}: {wall:.1f} s", file=sys.stderr, flush=True)
    lines = ["| configuration | round | gymnasium SPS / logged | envpool SPS / logged | envpool / gymnasium: wall / logged |",
             "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for label, *_ in configs:
        gym_walls, pool_walls = walls[label, "sync"], walls[label, "envpool"]
        gym_logged, pool_logged = logged[label, "sync"], logged[label, "envpool"]
        for i in range(args.rounds):
            wall_ratio = pool_walls[i] / gym_walls[i]
            logged_ratio = "-" if None in (pool_logged[i], gym_logged[i]) else f"{pool_logged[i] / gym_logged[i]:.2f}x"
            gym_cell = f"{gym_walls[i]:.0f} / {gym_logged[i] or 0:.0f}"
            pool_cell = f"{pool_walls[i]:.0f} / {pool_logged[i] or 0:.0f}"
            lines.append(f"| {label} | {i + 1} | {gym_cell} | {pool_cell} | {wall_ratio:.2f}x / {logged_ratio} |")
        wall_median = statistics.median(p / g for p, g in zip(pool_walls, gym_walls))
        pairs = [(p, g) for p, g in zip(pool_logged, gym_logged) if p is not None and g is not None]
        logged_median = f"**{statistics.median(p / g for p, g in pairs):.2f}x**" if pairs else "-"
        lines.append(f"| {label} | median | | | **{wall_median:.2f}x** / {logged_median} |")
    return lines


def main(argv=None):
    parser = speed_parser(__doc__, env_id="Hopper-v5", steps=102400, steps_help="steps of each single-script run")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8], help="the single script's --num-envs")
    parser.add_argument("--seeds-counts", type=int, nargs="+", default=[8, 16], help="N: the batched script's seeds")
    parser.add_argument("--seed-steps", type=int, default=20480, help="steps per seed of each batched run")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS[:3]), help="what to measure")
    args = parser.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    configs = configurations(args)
    for config in configs:  # each script's own one-line error for a bad flag or env id, before anything is measured
        for backend in BACKENDS:
            config_args(args, config, backend)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(argv if argv is not None else sys.argv[1:])
    lines = ["# The continuous scripts on gymnasium's vector env and on envpool's", "",
             f"`python benchmark/envpool_speed.py {command}`", "", f"{when}; {machine()}; {args.env_id}, default flags."]
    if "rounds" in args.parts:
        lines += ["", f"{args.rounds} rounds, the two backends alternated (each round's first alternates). SPS: all steps "
                  "over the process's wall time (start to exit: imports and compiling included); logged: the run's "
                  "charts/SPS at its end (times the agents for the batched script).", ""]  # fmt: skip
        lines += rounds_table(args, configs, env)
    if "ceilings" in args.parts:
        limits = ceilings(args)
        lines += ["", "The ceiling: the configuration's vector env alone, all its wrappers, under random actions.", "",
                  "| configuration | gymnasium env-only SPS | envpool env-only SPS | envpool / gymnasium |",
                  "| --- | ---: | ---: | ---: |"]  # fmt: skip
        for label, *_ in configs:
            g, p = limits[label, "sync"], limits[label, "envpool"]
            lines.append(f"| {label} | {g:.0f} | {p:.0f} | {p / g:.2f}x |")
    if "pools" in args.parts:
        lines += ["", "envpool's raw envs, one env per agent, stepped without wrappers:", "",
                  "| agents | one pool of all (steps/s) | a pool per agent, stepped together (steps/s) | one / per agent |",
                  "| ---: | ---: | ---: | ---: |"]  # fmt: skip
        for n in args.seeds_counts:
            one, many = pools_sps(args.env_id, n)
            lines.append(f"| {n} | {one:.0f} | {many:.0f} | {one / many:.2f}x |")
    if "splits" in args.parts:
        lines += ["", "One training run per configuration and backend, in this process, taken apart: its median "
                  "iteration after the first (its env steps, one update, and the rest: the policy's forward passes, the "
                  "copies, GAE, the logging). SPS with the env free: the iteration's steps over its update and rest, the "
                  "most any env backend could give.", ""]  # fmt: skip
        lines += split_table(splits(args), configs)
    write_report("\n".join(lines) + "\n", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
