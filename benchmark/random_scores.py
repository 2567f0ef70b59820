"""The random policy's score on each task: uniformly random actions for a number of episodes on the same env ids and
time limits the runs use, seeded, written as a CSV (one row per episode) for benchmark/report.py's normalization (the
PPO paper's Table 1 scores each task so that the random policy is 0 and the best setting 1).

    python benchmark/random_scores.py --output benchmark/results/table1/data/random.csv   # the 7 MuJoCo tasks, 100 episodes

Episode i of a task resets with seed + i; the action space is seeded with the seed once per task.
"""

import argparse
import csv
import statistics
import sys

import gymnasium as gym
import numpy as np

from run import MUJOCO_TASKS  # beside this file


def episode_returns(env_id, episodes, seed, envpool=False):
    """The undiscounted return and the length of each episode of uniformly random actions; envpool: of envpool's task
    (what --vector-env envpool steps), episode i in a pool of one env seeded seed + i, whose reset step never comes."""
    if envpool:
        import envpool as pools

        space = pools.make_spec(env_id).action_space
        start = lambda i: pools.make_gymnasium(env_id, num_envs=1, env_seed=[seed + i])  # noqa: E731
        sample = lambda: space.sample()[None]  # noqa: E731  # a batch of one
    else:
        env = gym.make(env_id)  # the registered time limit, as the training runs have it
        space, start, sample = env.action_space, lambda i: env, env.action_space.sample
    space.seed(seed)
    rows = []
    for i in range(episodes):
        episode = start(i)
        episode.reset(**({} if envpool else {"seed": seed + i}))
        total, length, done = 0.0, 0, False
        while not done:
            _, reward, terminated, truncated, _ = episode.step(sample())
            total, length, done = total + float(np.sum(reward)), length + 1, bool(np.any(terminated | truncated))
        rows.append((total, length))
        episode.close()  # gymnasium's env resets after a close as before it (a close frees its renderer)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-ids", nargs="+", default=MUJOCO_TASKS, help="tasks (default: the PPO paper's seven)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--envpool", action="store_true", help="envpool's tasks (--vector-env envpool) instead of gymnasium's")
    parser.add_argument("--output", required=True, help="the CSV to write: env_id, episode, return, length")
    options = parser.parse_args(argv)
    if options.episodes < 1:
        parser.error(f"--episodes {options.episodes}: pass 1 or more")
    unknown = [env_id for env_id in options.env_ids if env_id not in gym.registry]
    if unknown:
        parser.error(f"--env-ids: {', '.join(unknown)} not registered in gymnasium (e.g. Hopper-v5)")
    if options.envpool:
        import envpool

        missing = [env_id for env_id in options.env_ids if env_id not in envpool.list_all_envs()]
        if missing:
            parser.error(f"--env-ids: envpool has no {', '.join(missing)}; drop --envpool, or pass its tasks (e.g. Hopper-v5)")
    with open(options.output, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_id", "episode", "return", "length"])
        for env_id in options.env_ids:
            rows = episode_returns(env_id, options.episodes, options.seed, options.envpool)
            writer.writerows((env_id, i, f"{total:.6g}", length) for i, (total, length) in enumerate(rows))
            mean = statistics.mean(r[0] for r in rows)
            print(f"{env_id}: mean return {mean:.1f} over {len(rows)} episodes", file=sys.stderr)


if __name__ == "__main__":
    main()
