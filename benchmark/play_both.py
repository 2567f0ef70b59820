"""One trained agent played on both of the continuous scripts' backends (G10: gymnasium's env and envpool's): the same
weights and frozen normalization statistics, the script's own --eval-checkpoint play (actions sampled as in training)
with only the checkpoint's --vector-env changed, the same seed and number of episodes on each. Where a study finds a
task scoring differently on the two backends, this tells the env from the training: a policy that plays the same on
both met the same task.

    python benchmark/play_both.py benchmark/runs/mujoco-envpool/Walker2d-v5/envpool/seed*/runs/*/agent.pt --episodes 30
"""

import argparse
import contextlib
import os
import statistics
import sys
import tempfile

import torch

from speed import load_script  # beside this file

BACKENDS = ("sync", "envpool")


def play(saved, backend, episodes, seed, script):
    """The episodic returns of the checkpoint `saved` (loaded) played by the script's evaluator with its --vector-env
    set to `backend`."""
    from ppo_utils.evaluation import evaluate  # loaded with the script, from the repository

    saved = {**saved, "args": {**saved["args"], "vector_env": backend}}
    with tempfile.TemporaryDirectory() as scratch:  # the copy, and the evaluation's runs/ folder if it makes one
        copy = os.path.join(scratch, "agent.pt")
        torch.save(saved, copy)
        here = os.getcwd()
        os.chdir(scratch)
        try:
            flags = script.Args(env_id=saved["args"]["env_id"], eval_checkpoint=copy, eval_episodes=episodes, seed=seed)
            with contextlib.redirect_stdout(sys.stderr):  # its own lines, beside the table
                return evaluate(flags, script.make_envs, script.Agent, script.act)
        finally:
            os.chdir(here)


def loaded(path, script):
    """The checkpoint at `path`, checked as --eval-checkpoint checks it (one line for a missing, foreign or damaged
    file), of a task both backends have; else SystemExit in one line."""
    from ppo_utils.checkpoints import load_checkpoint
    from ppo_utils.flag_checks import MUJOCO_TASKS, ArgError

    try:
        saved = load_checkpoint(path, "a checkpoint", script.Args())
    except ArgError as e:
        raise SystemExit(f"error: {e}") from None
    if saved["args"]["env_id"] not in MUJOCO_TASKS:
        raise SystemExit(f"error: {path} plays {saved['args']['env_id']}, which envpool lacks; pass agents of its MuJoCo "
                         f"tasks ({', '.join(MUJOCO_TASKS)})")  # fmt: skip
    return saved


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="agent.pt files of ppo_continuous_action.py or its batched script")
    parser.add_argument("--episodes", type=int, default=30, help="episodes each agent plays on each backend")
    parser.add_argument("--seed", type=int, default=1, help="the evaluation's seed, the same on both backends")
    args = parser.parse_args(argv)
    if args.episodes < 2:
        raise SystemExit("error: --episodes must be at least 2, for a standard error; pass --episodes 30, say")
    script = load_script("ppo_continuous_action.py")
    checkpoints = {path: loaded(path, script) for path in args.checkpoints}  # all checked before any plays
    print(f"{args.episodes} episodes per agent and backend, seed {args.seed}; mean return ± its standard error\n")
    print("| checkpoint | gymnasium | envpool | envpool - gymnasium |\n| --- | ---: | ---: | ---: |")
    for path, saved in checkpoints.items():
        scores = []
        for backend in BACKENDS:
            returns = [float(r) for r in play(saved, backend, args.episodes, args.seed, script)]
            scores.append((statistics.mean(returns), statistics.stdev(returns) / len(returns) ** 0.5))
        (gym_mean, gym_se), (pool_mean, pool_se) = scores
        difference = f"{pool_mean - gym_mean:+.1f} ± {(gym_se**2 + pool_se**2) ** 0.5:.1f}"
        print(f"| {path} | {gym_mean:.1f} ± {gym_se:.1f} | {pool_mean:.1f} ± {pool_se:.1f} | {difference} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
