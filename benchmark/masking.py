"""What invalid-action masking buys (issue 72, D1): sb3-contrib's MaskablePPO as benchmark/run.py's peer of
ppo_masked.py, on envpool's Jumanji tasks seen through the same flattened observation and action mask, and the
measurements around the training runs: the random policy's scores, the masked agent played with its mask removed,
the share of invalid actions, and the wall time of both implementations side by side.

    python benchmark/masking.py --env-id Knapsack-v1 --seed 1 --total-timesteps 100000   # MaskablePPO (the peer)
    python benchmark/masking.py random --output benchmark/results/masking/data/random_policy.csv
    python benchmark/masking.py unmasked benchmark/runs/masking --output benchmark/results/masking/data/unmasked.csv
    python benchmark/masking.py wall-time --env-id Knapsack-v1 --total-timesteps 100000 --rounds 3 \\
        --out benchmark/runs/masking-wall-time --output benchmark/results/masking/data/wall_time.csv
    python benchmark/masking.py report benchmark/results/masking   # report.py's README, with the masking tables first

With no command it trains MaskablePPO, as benchmark/run.py --peer runs it (--env-id, --seed, --total-timesteps only),
writing TensorBoard events to runs/<env>__maskable_ppo__<seed>__<time>/ with ppo_masked.py's tags
(charts/episodic_return, charts/episodic_length, charts/SPS, losses/<name> on its scale), so that benchmark/report.py
reads both alike. It takes ppo_masked.py's flags that MaskablePPO has (PEER_FLAGS, under ours' names and defaults);
settings() gives what it makes of them, settings_note() what differs.
"""

import argparse
import csv
import glob
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from speed import load_script  # beside this file; importing it loads ppo_utils/ from the project's folder

from ppo_utils.envpool_backend import EnvpoolTasks  # noqa: E402  (loaded by speed)

ROOT = Path(__file__).resolve().parent.parent
ppo_masked = load_script("ppo_masked.py")

TASKS = ["Knapsack-v1", "Cleaner-v0", "Game2048-v1", "TSP-v1", "JobShop-v0"]  # the tables' order
MAX_STEPS = 2000  # play(): an episode this long is cut (none of TASKS' runs near it: at most a few hundred steps)
EXP_NAME = "maskable_ppo"
# The flags of ppo_masked.py that the peer takes too, with ppo_masked.py's defaults (--peer 'maskable-ppo=benchmark/masking.py
# --gamma 1' gives both the same settings).
PEER_FLAGS = ["num_envs", "num_steps", "num_minibatches", "update_epochs", "learning_rate", "gamma", "gae_lambda", "ent_coef"]


def settings(options):
    """MaskablePPO's settings for ours' flags (options: PEER_FLAGS' values). The rest at ours' defaults: Adam (eps 1e-5:
    SB3's for PPO) annealed linearly to 0 (learning_rate() below, on ours' schedule), clip 0.2, gradient norm 0.5,
    advantages normalized per minibatch, two 64-unit tanh layers each for pi and vf (no shared layer), orthogonal init
    with ours' gains (SB3's default)."""
    batch = options.num_envs * options.num_steps
    return {
        "n_steps": options.num_steps,
        "batch_size": batch // options.num_minibatches,
        "n_epochs": options.update_epochs,
        "clip_range": 0.2,
        "clip_range_vf": None,  # SB3's default: no value clipping (ours clips, G4; SB3's clipping is not ours' max of the two)
        "ent_coef": options.ent_coef,
        "vf_coef": 0.25,  # on SB3's mean squared error = ours' 0.5 on half the squared error: the same loss
        "max_grad_norm": 0.5,
        "gae_lambda": options.gae_lambda,
        "gamma": options.gamma,
        "normalize_advantage": True,
    }


def settings_note(options):
    return (
        f"MaskablePPO (sb3-contrib 2.9.2) at ppo_masked.py's settings: {options.num_envs} envs x {options.num_steps} "
        f"steps, {options.num_minibatches} minibatches per epoch, {options.update_epochs} epochs, Adam eps 1e-5, "
        f"learning rate {options.learning_rate:g} annealed linearly to 0 on ours' schedule, clip 0.2, entropy "
        f"{options.ent_coef:g}, GAE {options.gae_lambda:g}, gamma {options.gamma:g}, gradient norm 0.5, per-minibatch "
        "advantage normalization, separate pi and vf MLPs of two 64-unit tanh layers, orthogonal init, the same flattened "
        "observation (ppo_masked.observe) and mask. Differences: no value-loss clipping (SB3's default; ours clips, G4); "
        "vf_coef 0.25 on SB3's mean squared error, which is ours' 0.5 on half the squared error (the same loss); SB3 "
        "samples through its own distribution classes and seeds its own RNGs (the env instances of a seed are the same: "
        "env i is seeded with seed + i on both sides); no torch.compile and PyTorch's default Adam (ours: compiled "
        "minibatch step, fused Adam); time-limit cuts are not bootstrapped on either side (ours: B1 off; here no "
        "TimeLimit.truncated is passed to SB3)."
    )


def nvec_of(space):
    """D2: the choices of each component (Discrete(n): one component of n)."""
    return [int(space.n)] if isinstance(space, gym.spaces.Discrete) else [int(n) for n in space.nvec]


def action_shares(mask, nvec):
    """Per env (rows of a (N, sum(nvec)) bool mask): the share of the sum(nvec) choices masked, and the probability that
    an action drawn uniformly over all actions is invalid, 1 - prod_k (valid choices of k / choices of k)."""
    masked = 1.0 - mask.mean(axis=1)
    valid = np.stack([part.mean(axis=1) for part in np.split(mask, np.cumsum(nvec)[:-1], axis=1)], axis=1)
    return masked, 1.0 - valid.prod(axis=1)


def invalid(actions, mask, nvec):
    """Per env, whether its action (one column per component) picks a choice the mask forbids."""
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
    return ~mask[np.arange(len(mask))[:, None], offsets + actions].all(axis=1)


# ---------------------------------------------------------------------------------------------------------------------
# MaskablePPO: a stable_baselines3 VecEnv over EnvpoolTasks


def masked_vec_env(env_id, num_envs, seed):
    """MaskedVecEnv (below) over EnvpoolTasks(env_id, num_envs, seed); stable_baselines3 is imported here, on use."""
    from stable_baselines3.common.vec_env import VecEnv

    class MaskedVecEnv(VecEnv):
        """A thin stable_baselines3 VecEnv over ppo_masked.py's EnvpoolTasks: the observations flattened by
        ppo_masked.observe (D3, as ours sees them), each env's action mask from env_method("action_masks") (what
        sb3_contrib's get_action_masks asks), SAME_STEP autoreset (SB3's own), the finished episodes' return and length
        in their info's "episode" (from EnvpoolTasks' infos["final_info"]["episode"], as ours records them) and the last
        observation in "terminal_observation". reset() seeds env i with seed + i, as ours does."""

        def __init__(self):
            self.envs = EnvpoolTasks(env_id, num_envs=num_envs, seed=seed)
            self.nvec = nvec_of(self.envs.single_action_space)
            dim = gym.spaces.flatdim(ppo_masked.observed_space(self.envs))
            space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
            self.masks, self.actions, self.start = np.ones((num_envs, sum(self.nvec)), bool), None, time.time()
            super().__init__(num_envs, space, self.envs.single_action_space)
            self.seed(seed)

        def observe(self, obs):
            flat, self.masks = ppo_masked.observe(self.envs, obs, self.nvec, True)
            return flat

        def reset(self):
            obs, _ = self.envs.reset(seed=self._seeds[0])
            self._reset_seeds()
            self._reset_options()
            return self.observe(obs)

        def step_async(self, actions):
            self.actions = np.asarray(actions).reshape(self.envs.action_space.shape)

        def step_wait(self):
            obs, rewards, terminations, truncations, infos = self.envs.step(self.actions)
            dones = terminations | truncations
            out = [{} for _ in range(self.num_envs)]
            if dones.any():
                episode = infos["final_info"]["episode"]
                for i in np.flatnonzero(dones):
                    final = {key: value[None] for key, value in infos["final_obs"][i].items()}
                    out[i]["terminal_observation"] = ppo_masked.observe(self.envs, final, self.nvec, False)[0][0]
                    seconds = round(time.time() - self.start, 6)
                    out[i]["episode"] = {"r": float(episode["r"][i]), "l": int(episode["l"][i]), "t": seconds}
            return self.observe(obs), np.asarray(rewards, np.float32), dones, out

        def action_masks(self):
            return self.masks

        def indices(self, indices):
            return range(self.num_envs) if indices is None else [indices] if isinstance(indices, int) else indices

        def env_method(self, method_name, *method_args, indices=None, **method_kwargs):
            if method_name != "action_masks":
                raise AttributeError(f"MaskedVecEnv has no method {method_name} per env")
            return [self.masks[i] for i in self.indices(indices)]

        def get_attr(self, attr_name, indices=None):
            if attr_name == "action_masks":
                return [self.action_masks for _ in self.indices(indices)]
            if attr_name == "render_mode":
                return [None for _ in self.indices(indices)]
            raise AttributeError(f"MaskedVecEnv has no attribute {attr_name} per env")

        def set_attr(self, attr_name, value, indices=None):
            raise AttributeError(f"MaskedVecEnv sets no attribute ({attr_name})")

        def env_is_wrapped(self, wrapper_class, indices=None):
            return [False for _ in self.indices(indices)]

        def close(self):
            self.envs.close()

    return MaskedVecEnv()


def learning_rate(total_timesteps, lr, batch):
    """ours' G6 for SB3: SB3 calls the schedule after a rollout with 1 - steps so far / total, where ours uses the
    fraction left before the rollout, 1 - (iteration - 1) / iterations: one batch more."""
    return lambda progress_remaining: lr * min(1.0, progress_remaining + batch / total_timesteps)


def train_maskable(env_id, seed, total_timesteps, options, folder="runs", threads=1):
    """MaskablePPO on env_id for total_timesteps (down to whole batches, as ours) with settings(options), TensorBoard
    events in folder/<env>__maskable_ppo__<seed>__<time>/ with ours' tags. Returns the run folder."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback
    from torch.utils.tensorboard import SummaryWriter

    torch.set_num_threads(threads)
    name = f"{env_id}__{EXP_NAME}__{seed}__{int(time.time())}"
    run_folder = os.path.join(folder, name)
    writer = SummaryWriter(run_folder)
    writer.add_text("hyperparameters", settings_note(options))
    start = time.time()

    class LoggedMaskablePPO(MaskablePPO):
        def train(self):  # each update's statistics under ours' names and on ours' scale, at the step it ends
            super().train()
            values = self.logger.name_to_value
            stats = {
                "policy_loss": values["train/policy_gradient_loss"],
                "value_loss": values["train/value_loss"] / 2,  # ours logs half the squared error
                "entropy": -values["train/entropy_loss"],
                "approx_kl": values["train/approx_kl"],
                "clipfrac": values["train/clip_fraction"],
                "explained_variance": values["train/explained_variance"],
            }
            for key, value in stats.items():
                writer.add_scalar(f"losses/{key}", value, self.num_timesteps)
            writer.add_scalar("charts/learning_rate", self.policy.optimizer.param_groups[0]["lr"], self.num_timesteps)
            writer.add_scalar("charts/SPS", int(self.num_timesteps / (time.time() - start)), self.num_timesteps)

    class Episodes(BaseCallback):
        def _on_step(self):
            for info in self.locals["infos"]:
                if "episode" in info:
                    writer.add_scalar("charts/episodic_return", info["episode"]["r"], self.num_timesteps)
                    writer.add_scalar("charts/episodic_length", info["episode"]["l"], self.num_timesteps)
            return True

    env = masked_vec_env(env_id, options.num_envs, seed)
    batch = options.num_envs * options.num_steps
    steps = total_timesteps // batch * batch  # whole batches, as ours' num_iterations
    policy_kwargs = {"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": torch.nn.Tanh}
    model = LoggedMaskablePPO(
        "MlpPolicy", env, learning_rate=learning_rate(steps, options.learning_rate, batch), policy_kwargs=policy_kwargs,
        seed=seed, device="cpu", verbose=0, **settings(options),
    )  # fmt: skip
    model.learn(steps, callback=Episodes(), log_interval=None)
    writer.close()
    env.close()
    print(f"MaskablePPO on {env_id}, seed {seed}: {steps} steps in {time.time() - start:.1f} s; logs: {run_folder}")
    return run_folder


# ---------------------------------------------------------------------------------------------------------------------
# the random policy, the masked agent without its mask


def play(env_id, seed, episodes, choose, max_steps=MAX_STEPS):
    """`episodes` episodes in one env of EnvpoolTasks(env_id, seed): choose(flat obs (1, D), mask (1, sum(nvec)), nvec)
    gives the action (1, components). Per episode: return, length, whether it ended on an invalid action, whether it was
    cut at max_steps steps (then the env is reset: Game2048-v1 takes an invalid move as a no-op, and an agent that keeps
    choosing one never ends its episode), the mean over its steps of the share of choices masked and of the probability
    that a uniform action is invalid."""
    envs = EnvpoolTasks(env_id, num_envs=1, seed=seed)
    nvec = nvec_of(envs.single_action_space)
    obs, _ = envs.reset(seed=seed)
    rows, masked, joint, bad, total = [], [], [], False, 0.0
    while len(rows) < episodes:
        if len(masked) == max_steps:  # cut: the next episode starts from a reset
            ended = total, max_steps, True, 1
            obs, _ = envs.reset()
        else:
            flat, mask = ppo_masked.observe(envs, obs, nvec, True)
            shares = action_shares(mask, nvec)
            masked.append(shares[0][0])
            joint.append(shares[1][0])
            action = np.asarray(choose(flat, mask, nvec)).reshape(1, len(nvec))
            bad = bool(invalid(action, mask, nvec)[0])
            obs, reward, terminations, truncations, infos = envs.step(action.reshape(envs.action_space.shape))
            total += float(reward[0])
            if not (terminations[0] or truncations[0]):
                continue
            episode = infos["final_info"]["episode"]
            ended = float(episode["r"][0]), int(episode["l"][0]), truncations[0] and not terminations[0], 0
        ret, length, truncated, capped = ended
        values = ret, length, int(bad), int(truncated), capped, float(np.mean(masked)), float(np.mean(joint))
        rows.append(dict(zip(FIELDS, values)))
        masked, joint, total = [], [], 0.0
    envs.close()
    return rows


def random_choice(policy, rng):
    """The random policy: uniform over each component's valid choices ("valid") or over all of them ("all")."""

    def choose(flat, mask, nvec):
        if policy == "all":
            return np.array([[rng.integers(n) for n in nvec]])
        parts = np.split(mask, np.cumsum(nvec)[:-1], axis=1)  # the argmax of uniform numbers on the valid choices
        return np.stack([np.argmax(rng.random(part.shape) * part, axis=1) for part in parts], axis=1)

    return choose


def agent_choice(agent, mask_actions):
    """ppo_masked.py's agent sampling its actions as in training, with its mask or with an all-True one (its mask
    removed): an invalid action then goes to the env, whose rule ends the episode."""
    import torch

    def choose(flat, mask, nvec):
        shown = mask if mask_actions else np.ones_like(mask)
        with torch.inference_mode():
            return agent.get_action_and_value(torch.as_tensor(flat), torch.as_tensor(shown))[0].numpy()

    return choose


def load_agent(path):
    """ppo_masked.py's Agent with the weights of a checkpoint (agent.pt), and the run's flags."""
    import torch

    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    args = ppo_masked.Args(**checkpoint["args"])
    envs = EnvpoolTasks(args.env_id, num_envs=1, seed=args.seed)
    agent = ppo_masked.Agent(envs, args)
    agent.load_state_dict(checkpoint["model"])
    envs.close()
    return agent.eval(), args


FIELDS = ["return", "length", "ended_invalid", "truncated", "capped", "masked_share", "joint_invalid"]


def write_rows(path, header, rows):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({key: f"{value:.6g}" if isinstance(value, float) else value for key, value in row.items()})


def random_scores(env_ids, seeds, episodes):
    """The random policy's episodes: per task, policy (valid, all) and seed; numpy's generator seeded with the seed."""
    rows = []
    for env_id in env_ids:
        for policy in ["valid", "all"]:
            for seed in seeds:
                played = play(env_id, seed, episodes, random_choice(policy, np.random.default_rng(seed)))
                rows += [{"env_id": env_id, "policy": policy, "seed": seed, "episode": i} | r for i, r in enumerate(played)]
                mean = np.mean([r["return"] for r in played])
                print(f"{env_id} random {policy} seed {seed}: mean return {mean:.2f} over {episodes} episodes", flush=True)
    return rows


def checkpoints(runs, variant):
    """(env id, seed, agent.pt) of each finished run of `variant` in a benchmark/run.py folder (the newest agent.pt)."""
    found = []
    for folder in sorted(Path(runs).glob(f"*/{variant}/seed*")):
        agents = sorted(glob.glob(str(folder / "runs" / "*" / "agent.pt")))
        if (folder / "done.json").exists() and agents:
            found.append((folder.parts[-3], int(folder.name[len("seed") :]), agents[-1]))
    return found


def unmasked_scores(runs, variant, episodes, eval_seed):
    """The masked runs' final agents, each played for `episodes` episodes with its mask ("masked") and without
    ("unmasked"), from the env seed eval_seed + the run's seed (instances the run did not train on)."""
    import torch

    torch.set_num_threads(1)
    rows = []
    for env_id, seed, path in checkpoints(runs, variant):
        agent, args = load_agent(path)
        if not args.mask_actions:
            raise SystemExit(f"error: {path} was trained with --no-mask-actions; pass the masked runs' variant")
        for mode in ["masked", "unmasked"]:
            torch.manual_seed(seed)
            played = play(env_id, eval_seed + seed, episodes, agent_choice(agent, mode == "masked"))
            rows += [{"env_id": env_id, "mode": mode, "seed": seed, "episode": i} | r for i, r in enumerate(played)]
            mean, ended = np.mean([r["return"] for r in played]), np.mean([r["ended_invalid"] for r in played])
            print(f"{env_id} seed {seed} {mode}: mean return {mean:.2f}, {ended:.0%} ended by an invalid action", flush=True)
    if not rows:
        raise SystemExit(f"error: no finished run of {variant} with an agent.pt in {runs}")
    return rows


# ---------------------------------------------------------------------------------------------------------------------
# wall time: ours and MaskablePPO alternating


def others_running():
    """Whether a pytest process (the project's tests) runs now: the machine is shared with them."""
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if b"pytest" in Path(cmdline).read_bytes():
                return True
        except OSError:
            continue
    return False


def wall_time(env_id, total_timesteps, rounds, seed, out, flags=()):
    """`rounds` rounds of ours (ppo_masked.py) then MaskablePPO (this file), the same steps, seed and flags (of
    PEER_FLAGS; none: ours' defaults), one at a time with one thread (OMP_NUM_THREADS=1), each in its own folder under
    `out`: the process's wall time, the SPS logged last, the load average around it and whether the tests were running
    at its start or end."""
    from report_data import read_run  # beside this file

    commands = {
        "ours": [sys.executable, str(ROOT / "ppo_masked.py")],
        "maskable-ppo": [sys.executable, str(Path(__file__).resolve())],
    }
    rows = []
    for k in range(1, rounds + 1):
        for name, command in commands.items():
            folder = Path(out) / f"round{k}" / name
            folder.mkdir(parents=True, exist_ok=True)
            full = command + ["--env-id", env_id, "--seed", str(seed), "--total-timesteps", str(total_timesteps), *flags]
            busy, load = others_running(), os.getloadavg()[0]
            start = time.time()
            with open(folder / "output.log", "w") as log:
                env = {**os.environ, "OMP_NUM_THREADS": "1"}
                subprocess.run(full, cwd=folder, stdout=log, stderr=subprocess.STDOUT, env=env, check=True)
            seconds = time.time() - start
            busy, load = busy or others_running(), max(load, os.getloadavg()[0])
            _, _, sps, last_step, _ = read_run(folder)
            rows.append({
                "env_id": env_id, "round": k, "implementation": name, "steps": int(last_step), "seconds": round(seconds, 1),
                "sps": float(sps), "load_average": round(load, 2), "tests_running": int(busy),
            })  # fmt: skip
            print(f"round {k} {name}: {seconds:.1f} s, SPS {sps:.0f}, load {load:.2f}, tests running: {busy}", flush=True)
    return rows


# ---------------------------------------------------------------------------------------------------------------------
# the report: benchmark/report.py's, with the masking tables first


def mean_std(values):
    values = np.asarray(values, float)
    std = np.std(values, ddof=1) if len(values) > 1 else np.nan
    return f"{np.mean(values):.2f} ± {std:.2f}"


def masking_tables(data: Path, last: int):
    """The section of the masking report: the table of scores (per task, mean ± sample std over seeds of each seed's
    mean), the share of invalid actions, the wall times, from the CSVs in data/."""
    import pandas as pd
    from report_data import read_data, summarize

    runs = summarize(read_data(data), last)  # each run's score, report.py's
    scores = runs.set_index(["env_id", "variant", "seed"])["score"]
    random = pd.read_csv(data / "random_policy.csv")
    unmasked = pd.read_csv(data / "unmasked.csv")
    columns = {  # name: per-seed scores of each task
        "ours masked": scores.xs("default", level="variant"),
        "ours unmasked": scores.xs("no-mask", level="variant"),
        "MaskablePPO": scores.xs("maskable-ppo", level="variant"),
        "random valid": random[random["policy"] == "valid"].groupby(["env_id", "seed"])["return"].mean(),
        "random all": random[random["policy"] == "all"].groupby(["env_id", "seed"])["return"].mean(),
        "masked agent, mask on": unmasked[unmasked["mode"] == "masked"].groupby(["env_id", "seed"])["return"].mean(),
        "masked agent, mask removed": unmasked[unmasked["mode"] == "unmasked"].groupby(["env_id", "seed"])["return"].mean(),
    }
    env_ids = [env_id for env_id in TASKS if env_id in set(runs["env_id"])]
    lines = ["| task | " + " | ".join(columns) + " |", "| --- |" + " ---: |" * len(columns)]
    for env_id in env_ids:
        cells = [mean_std(series.xs(env_id, level="env_id")) for series in columns.values()]
        lines.append(f"| {env_id} | " + " | ".join(cells) + " |")
    score_table = "\n".join(lines)

    header = (
        "| task | actions | share of choices masked | P(uniform action invalid) | random all: episodes ended by an invalid "
        "action | masked agent, mask removed: episodes ended by an invalid action | masked - unmasked (ours) | "
        "(masked - unmasked) / (masked - random all) |"
    )
    lines = [header, "| --- | --- |" + " ---: |" * 6]
    for env_id in env_ids:
        valid = random[(random["policy"] == "valid") & (random["env_id"] == env_id)]
        allr = random[(random["policy"] == "all") & (random["env_id"] == env_id)]
        removed = unmasked[(unmasked["mode"] == "unmasked") & (unmasked["env_id"] == env_id)]
        # per step, weighted by the episodes' lengths: the mean over all steps the random valid policy took
        share = np.average(valid["masked_share"], weights=valid["length"])
        joint = np.average(valid["joint_invalid"], weights=valid["length"])
        masked_scores = columns["ours masked"].xs(env_id, level="env_id")
        gap = masked_scores.mean() - columns["ours unmasked"].xs(env_id, level="env_id").mean()
        span = masked_scores.mean() - columns["random all"].xs(env_id, level="env_id").mean()
        space = EnvpoolTasks(env_id, num_envs=1, seed=1)
        nvec = nvec_of(space.single_action_space)
        space.close()
        actions = f"Discrete({nvec[0]})" if len(nvec) == 1 else f"MultiDiscrete({len(nvec)} x {nvec[0]})"
        lines.append(f"| {env_id} | {actions} | {share:.1%} | {joint:.1%} | {allr['ended_invalid'].mean():.0%} | "
                     f"{removed['ended_invalid'].mean():.0%} | {gap:+.2f} | {gap / span:.2f} |")  # fmt: skip
    share_table = "\n".join(lines)

    wall = pd.read_csv(data / "wall_time.csv")
    lines = ["| round | implementation | steps | wall time (s) | SPS (logged last) | load average | tests running |",
             "| ---: | --- | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for row in wall.itertuples():
        lines.append(f"| {row.round} | {row.implementation} | {row.steps} | {row.seconds:.1f} | {row.sps:.0f} | "
                     f"{row.load_average:.2f} | {'yes' if row.tests_running else 'no'} |")  # fmt: skip
    for name, group in wall.groupby("implementation", sort=False):
        lines.append(f"| mean | {name} | | {mean_std(group['seconds'])} | {mean_std(group['sps'])} | | |")
    wall_table = "\n".join(lines)
    return score_table, share_table, wall_table, wall


def report(results: Path, last: int):
    """benchmark/report.py's README of `results` (rebuilt from its data/), with the section that data/masking.md
    (hand-written, with {scores}, {shares} and {wall_time} where the tables go) makes of the CSVs put first."""
    import report as report_py  # beside this file

    data = results / "data"
    score_table, share_table, wall_table, _ = masking_tables(data, last)
    note = settings_note(peer_options(data / "commands.txt"))
    text = (data / "masking.md").read_text().format(last=last, scores=score_table, shares=share_table,
                                                    wall_time=wall_table, settings=note)  # fmt: skip
    report_py.main([str(results), "--last", str(last)])
    readme = (results / "README.md").read_text()
    head, sep, rest = readme.partition("\n## Scores\n")
    (results / "README.md").write_text(head + "\n" + text.strip() + "\n" + sep + rest)
    print(f"wrote {results / 'README.md'} with the masking section")


# ---------------------------------------------------------------------------------------------------------------------


COMMANDS = ["random", "unmasked", "wall-time", "report"]


def peer_parser():
    """MaskablePPO's command line, as benchmark/run.py --peer runs it: --env-id, --seed, --total-timesteps and
    PEER_FLAGS under ppo_masked.py's names and defaults."""
    parser = argparse.ArgumentParser(description="MaskablePPO on an envpool Jumanji task (benchmark/run.py's peer)")
    parser.add_argument("--env-id", default="Knapsack-v1")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--total-timesteps", type=int, default=500_000)
    defaults = ppo_masked.Args()
    for flag in PEER_FLAGS:
        value = getattr(defaults, flag)
        parser.add_argument("--" + flag.replace("_", "-"), type=type(value), default=value, help="as ppo_masked.py's")
    return parser


def peer_options(commands: Path):
    """The peer's options in the benchmark/run.py line of commands.txt (--peer 'maskable-ppo=benchmark/masking.py
    FLAGS'): what its runs were given."""
    for line in commands.read_text().splitlines():
        words = shlex.split(line)
        for flag, word in zip(words, words[1:]):
            name, _, spec = word.partition("=")
            if flag == "--peer" and name == "maskable-ppo":
                return peer_parser().parse_args(shlex.split(spec)[1:])
    raise SystemExit(f"error: {commands} has no benchmark/run.py line with --peer maskable-ppo=...")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:  # MaskablePPO, as benchmark/run.py --peer runs it
        options = peer_parser().parse_args(argv)
        train_maskable(options.env_id, options.seed, options.total_timesteps, options)
        return
    command, argv = argv[0], argv[1:]
    parser = argparse.ArgumentParser(prog=f"masking.py {command}", description=__doc__.split("\n\n")[0])
    if command == "random":
        parser.add_argument("--env-ids", nargs="+", default=TASKS)
        parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
        parser.add_argument("--episodes", type=int, default=100)
        parser.add_argument("--output", required=True, help="CSV: env_id, policy, seed, episode, " + ", ".join(FIELDS))
        options = parser.parse_args(argv)
        rows = random_scores(options.env_ids, options.seeds, options.episodes)
        write_rows(options.output, ["env_id", "policy", "seed", "episode"] + FIELDS, rows)
    elif command == "unmasked":
        parser.add_argument("runs", help="the benchmark/run.py folder of the masked runs")
        parser.add_argument("--variant", default="default", help="the masked runs' variant")
        parser.add_argument("--episodes", type=int, default=100)
        parser.add_argument("--eval-seed", type=int, default=1000, help="env seed: this + the run's seed")
        parser.add_argument("--output", required=True, help="CSV: env_id, mode, seed, episode, " + ", ".join(FIELDS))
        options = parser.parse_args(argv)
        rows = unmasked_scores(options.runs, options.variant, options.episodes, options.eval_seed)
        write_rows(options.output, ["env_id", "mode", "seed", "episode"] + FIELDS, rows)
    elif command == "wall-time":
        parser.add_argument("--env-id", default="Knapsack-v1")
        parser.add_argument("--total-timesteps", type=int, required=True)
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--out", required=True, help="folder of the runs")
        parser.add_argument("--output", required=True, help="CSV, one row per run")
        parser.add_argument("--flags", default="", help="flags of both, of ppo_masked.py's that the peer takes too")
        options = parser.parse_args(argv)
        flags = shlex.split(options.flags)
        rows = wall_time(options.env_id, options.total_timesteps, options.rounds, options.seed, options.out, flags)
        write_rows(options.output, list(rows[0]), rows)
    else:
        parser.add_argument("results", help="the results folder (its data/: report.py's files and this file's CSVs)")
        parser.add_argument("--last", type=int, default=100)
        options = parser.parse_args(argv)
        report(Path(options.results), options.last)
    print(f"$ python benchmark/masking.py {shlex.join([command] + argv)}")


if __name__ == "__main__":
    main()
