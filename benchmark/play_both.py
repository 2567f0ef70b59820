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
from pathlib import Path

import torch

from sps import load_script  # beside this file

BACKENDS = ("sync", "envpool")


def play(checkpoint, backend, episodes, seed, script):
    """The episodic returns of `checkpoint` played by the script's evaluator with its --vector-env set to `backend`."""
    from ppo_utils.evaluation import evaluate  # loaded with the script, from the repository

    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    saved["args"]["vector_env"] = backend
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="agent.pt files of ppo_continuous_action.py or its batched script")
    parser.add_argument("--episodes", type=int, default=30, help="episodes each agent plays on each backend")
    parser.add_argument("--seed", type=int, default=1, help="the evaluation's seed, the same on both backends")
    args = parser.parse_args(argv)
    if args.episodes < 2:
        raise SystemExit("error: --episodes must be at least 2, for a standard error; pass --episodes 30, say")
    missing = [path for path in args.checkpoints if not Path(path).is_file()]
    if missing:
        raise SystemExit(f"error: no checkpoint at {missing[0]}; pass agent.pt files (runs/<run>/agent.pt)")
    script = load_script("ppo_continuous_action.py")
    print(f"{args.episodes} episodes per agent and backend, seed {args.seed}; mean return ± its standard error\n")
    print("| checkpoint | gymnasium | envpool | envpool - gymnasium |\n| --- | ---: | ---: | ---: |")
    for path in args.checkpoints:
        scores = []
        for backend in BACKENDS:
            returns = [float(r) for r in play(path, backend, args.episodes, args.seed, script)]
            scores.append((statistics.mean(returns), statistics.stdev(returns) / len(returns) ** 0.5))
        (gym_mean, gym_se), (pool_mean, pool_se) = scores
        difference = f"{pool_mean - gym_mean:+.1f} ± {(gym_se**2 + pool_se**2) ** 0.5:.1f}"
        print(f"| {path} | {gym_mean:.1f} ± {gym_se:.1f} | {pool_mean:.1f} ± {pool_se:.1f} | {difference} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
