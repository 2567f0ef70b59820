"""Steps per second of each script against the ceiling its environments set: first the vector env of the run alone,
stepped with random actions, then training with the same flags, in this one process. Prints a Markdown table.

    python benchmark/sps.py                                   # the four scripts on their benchmark envs, 3 runs each
    python benchmark/sps.py ppo_atari.py --runs 1 -- --vector-env envpool
    python benchmark/sps.py --output benchmark/results/sps.md

The env-only figure is what the rollout would reach if the agent cost nothing; training SPS / env-only SPS is the
share of that ceiling the script keeps (the rest goes to the network, the update and the bookkeeping). The update
columns time one update_policy call alone on a batch of the run's size, count its floating-point work with torch's
FlopCounterMode (every matmul and convolution, forward and backward), and set its GFLOP/s beside those of one large
float32 matmul on the same threads: the compute this machine gives a well-shaped problem (on the run's device: the GPU
with --cuda where one is present). The split columns take an iteration of the training run apart: the env steps (their
mean per iteration), one update_policy call (the median, timed between two device syncs; the first call, which builds
the compiled graph, is left out of the median), the rollout's policy calls (get_action_and_value under inference
mode, their sum per iteration) and the rest (the copies, the bookkeeping, GAE and the logging), from the median
iteration after the first; steady SPS is the batch over that median iteration, where the
training SPS (the run's own charts/SPS) counts the start, torch.compile's build included.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch.utils.flop_counter import FlopCounterMode

from project import load_package, load_script  # beside this file
from versus import machine

ROOT = Path(__file__).resolve().parent.parent


load_package("ppo_utils")
from ppo_utils import compiled  # noqa: E402  (loaded just above)
from ppo_utils.flag_checks import ArgError, check_args  # noqa: E402

BENCHMARK_ENVS = {  # script: (env id, training steps per run)
    "ppo.py": ("CartPole-v1", 61440),
    "ppo_continuous_action.py": ("Hopper-v5", 61440),
    "ppo_atari.py": ("BreakoutNoFrameskip-v4", 20480),
    "ppo_rnn.py": ("BreakoutNoFrameskip-v4", 20480),
}


def env_only_sps(envs, seed, steps):
    """Steps/s of a script's vector env `envs` (all its wrappers, all its envs) under random actions; closes it."""
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    actions = [envs.action_space.sample() for _ in range(steps)]  # drawn up front: only the env is timed
    start = time.perf_counter()
    for action in actions:
        envs.step(action)
    elapsed = time.perf_counter() - start
    envs.close()
    return steps * envs.num_envs / elapsed


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_device(args):
    return torch.device("cuda" if getattr(args, "cuda", False) and torch.cuda.is_available() else "cpu")


def timed_training(module, args):
    """module.train(args) with its env steps, the rollout's policy calls and update_policy calls timed. Returns (the
    run's SPS, env seconds per iteration, policy seconds per iteration, the median update's seconds, the median
    iteration's seconds after the first)."""
    device, env_seconds, policy_seconds, updates, ends = run_device(args), [0.0], [0.0], [], []
    make_envs, update_policy, Agent = module.make_envs, module.update_policy, module.Agent

    def timed_make_envs(*a, **k):
        envs = make_envs(*a, **k)
        step = envs.step

        def timed_step(action):
            start = time.perf_counter()
            result = step(action)
            env_seconds[0] += time.perf_counter() - start
            return result

        envs.step = timed_step
        return envs

    class TimedAgent(Agent):
        def get_action_and_value(self, *a, **k):
            if torch.compiler.is_compiling() or not torch.is_inference_mode_enabled():  # the update's calls
                return super().get_action_and_value(*a, **k)
            start = time.perf_counter()
            result = super().get_action_and_value(*a, **k)
            policy_seconds[0] += time.perf_counter() - start
            return result

    def timed_update(*a, **k):
        sync(device)
        start = time.perf_counter()
        result = update_policy(*a, **k)
        sync(device)
        ends.append(time.perf_counter())
        updates.append(ends[-1] - start)
        return result

    module.make_envs, module.update_policy, module.Agent = timed_make_envs, timed_update, TimedAgent
    try:
        sps = module.train(args)["sps"]
    finally:
        module.make_envs, module.update_policy, module.Agent = make_envs, update_policy, Agent
    iterations = [b - a for a, b in zip(ends, ends[1:])]  # end of update i to end of update i + 1
    update = statistics.median(updates[1:] or updates)
    iteration = statistics.median(iterations) if iterations else float("nan")
    return sps, env_seconds[0] / len(updates), policy_seconds[0] / len(updates), update, iteration


def random_batch(envs, agent, args):
    """A flat batch of the run's size with the keys update_policy reads: random observations and actions of the env's
    spaces, random advantages and returns; old log-probs and values of 0 (the update's work does not depend on them)."""
    n, g = args.batch_size, torch.Generator().manual_seed(0)
    space, action_space = envs.single_observation_space, envs.single_action_space
    if space.dtype == np.uint8:
        obs = torch.randint(0, 256, (n,) + space.shape, dtype=torch.uint8, generator=g)
    else:
        obs = torch.randn((n,) + space.shape, generator=g)
    if isinstance(action_space, gym.spaces.Discrete):
        actions = torch.randint(0, int(action_space.n), (n,), generator=g)
    else:
        actions = torch.randn((n,) + action_space.shape, generator=g)
    batch = {"obs": obs, "actions": actions, "logprobs": torch.zeros(n), "values": torch.zeros(n)}
    batch |= {"advantages": torch.randn(n, generator=g), "returns": torch.randn(n, generator=g)}
    if hasattr(agent, "initial_state"):  # ppo_rnn.py: sequences from a zero state, no episode ends
        batch |= {"dones": torch.zeros(n), "state": agent.initial_state(args.num_envs)}
    return batch


def update_compute(module, args):
    """(seconds of one update: the median of 3 after a warm-up, its GFLOP, GFLOP/s of a 2048 x 2048 float32 matmul), on
    the run's threads and device."""
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    device = run_device(args)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = getattr(args, "tf32", False)  # as train()
    envs = module.make_envs(args, "sps")
    torch.manual_seed(args.seed)
    agent = module.Agent(envs, args).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=True)
    batch = {key: value.to(device) for key, value in random_batch(envs, agent, args).items()}
    envs.close()
    with FlopCounterMode(display=False) as counter:  # counted on the plain backward: compiled kernels bypass the counter
        module.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta)
    # timed with the step the run takes (--compile on a run long enough: the compiled one, built by this warm-up call)
    step = update_step(module, agent, optimizer, args, device)
    module.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta, 1, step)
    calls = []
    for _ in range(3):
        sync(device)
        start = time.perf_counter()
        module.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta, 1, step)
        sync(device)
        calls.append(time.perf_counter() - start)
    seconds = statistics.median(calls)
    a = torch.randn(2048, 2048, device=device)
    a @ a
    sync(device)
    start = time.perf_counter()
    for _ in range(10):
        a @ a
    sync(device)
    matmul = 10 * 2 * 2048**3 / (time.perf_counter() - start) / 1e9
    return seconds, counter.get_total_flops() / 1e9, matmul


def update_step(module, agent, optimizer, args, device):
    """What train() hands update_policy: its minibatch step, compiled where --compile is on and the run long enough;
    for a script from before the compiled step (update_policy took the backward), its backward, compiled by --compile."""
    if not hasattr(module, "minibatch_step"):  # the scripts before issue 99, for the split before and after
        return compiled.compiled_backward(module.ppo_loss, agent, device) if args.compile else module.ppo_backward
    steps = args.num_iterations * args.update_epochs * args.num_minibatches
    pays_after = compiled.PAYS_AFTER_CNN if module.__name__.startswith("ppo_atari") else compiled.PAYS_AFTER  # as train()
    if getattr(args, "compile", False) and steps >= pays_after:  # ppo_rnn.py has no --compile
        return compiled.compiled_step(module.ppo_loss, module.minibatch_step, agent, optimizer, args.max_grad_norm, 1, device)
    return module.minibatch_step


def script_args(script, env_id, total_timesteps, flags):
    """The script and its Args (the batched script's: its SeedsArgs) for a measurement; a bad flag or env id ends here
    with the script's own one-line error (tyro's for an unknown flag, ppo_utils' check_args for the rest)."""
    module = load_script(script)
    flags = ["--env-id", env_id, "--total-timesteps", str(total_timesteps), *flags]
    args = tyro.cli(getattr(module, "SeedsArgs", module.Args), args=flags)
    try:
        check_args(args)
    except ArgError as e:
        raise SystemExit(f"error: {script}: {e}") from None
    return module, args


def measure(script, env_id, total_timesteps, env_steps, runs, flags):
    """Runs in a fresh process per script (measure_in_a_process), so that one script's torch settings (threads) stay
    its own."""
    module, args = script_args(script, env_id, total_timesteps, flags)
    rows = []
    for run in range(runs):
        env_sps = env_only_sps(module.make_envs(args, "sps"), args.seed, env_steps // args.num_envs)
        train_sps, env_s, policy_s, update_s, iteration_s = timed_training(module, args)
        rows.append((env_sps, train_sps, env_s, policy_s, update_s, iteration_s))
        print(f"{script} run {run + 1}/{runs}: env only {env_sps:.0f}, training {train_sps:.0f} SPS; an iteration "
              f"{1e3 * iteration_s:.0f} ms: env {1e3 * env_s:.0f}, policy {1e3 * policy_s:.0f}, update "
              f"{1e3 * update_s:.0f}", file=sys.stderr)  # fmt: skip
    env_sps, train_sps, env_s, policy_s, update_s, iteration_s = (statistics.median(r[i] for r in rows) for i in range(6))
    rest_s = iteration_s - env_s - policy_s - update_s
    updates = [update_compute(module, args) for _ in range(runs)]
    alone_s, gflop, matmul = (statistics.median(u[i] for u in updates) for i in range(3))
    return {
        "device": run_device(args).type,
        "steady_sps": args.batch_size / iteration_s,
        "split_ms": tuple(1e3 * s for s in (iteration_s, env_s, policy_s, update_s, rest_s)),
        "update_s": alone_s,
        "gflop": gflop,
        "update_gflops": gflop / alone_s,
        "matmul_gflops": matmul,
        "update_share": alone_s / (args.batch_size / train_sps),  # of an iteration at the training SPS
        "script": script,
        "env_id": env_id,
        "flags": " ".join(flags),
        "env_sps": env_sps,
        "train_sps": train_sps,
        "ratio": train_sps / env_sps,
        "runs": ", ".join(f"{r[1]:.0f}" for r in rows),
    }


def measure_in_a_process(job, scratch):
    """measure(*job) in a fresh Python process, in the scratch folder (the runs' logs go there), with the repository's
    root and benchmark/ first on its PYTHONPATH: --vector-env async's env processes, where they are spawned rather than
    forked, import the script's env makers by module name (ppo_atari.make_env...), and take the path from it."""
    result = Path(scratch) / "measured.json"
    path = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "benchmark"), os.environ.get("PYTHONPATH")]))
    code = "import json, sys, sps; json.dump(sps.measure(*json.loads(sys.argv[1])), open(sys.argv[2], 'w'), default=float)"
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(job), str(result)], cwd=scratch, env={**os.environ, "PYTHONPATH": path}
    )
    if done.returncode != 0:
        raise SystemExit(f"error: measuring {job[0]} stopped with exit status {done.returncode} (its error is above)")
    return json.loads(result.read_text())


def table(results):
    lines = [
        "| script | env | flags | env-only SPS | training SPS | training / env-only | training SPS of each run "
        "| steady SPS | steady / env-only | iteration ms: env + policy + update + rest | device | update s | update GFLOP "
        "| update GFLOP/s | matmul GFLOP/s | update / iteration |",
        "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        split = "{:.0f}: {:.0f} + {:.0f} + {:.0f} + {:.0f}".format(*r["split_ms"])
        lines.append(
            f"| {r['script']} | {r['env_id']} | {r['flags'] or '(defaults)'} | {r['env_sps']:.0f} | {r['train_sps']:.0f} "
            f"| {r['ratio']:.0%} | {r['runs']} | {r['steady_sps']:.0f} | {r['steady_sps'] / r['env_sps']:.0%} | {split} "
            f"| {r['device']} | {r['update_s']:.2f} | {r['gflop']:.1f} | {r['update_gflops']:.1f} "
            f"| {r['matmul_gflops']:.0f} | {r['update_share']:.0%} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("scripts", nargs="*", default=list(BENCHMARK_ENVS), help="scripts to measure (default: all four)")
    parser.add_argument("--env-id", help="override each script's benchmark env")
    parser.add_argument("--total-timesteps", type=int, help="training steps per run (default: per script, see BENCHMARK_ENVS)")
    parser.add_argument("--env-steps", type=int, default=20480, help="env-only steps per run, summed over the envs")
    parser.add_argument("--runs", type=int, default=3, help="runs per script; the table shows the medians")
    parser.add_argument("--output", help="also write the table, with the command and the machine, to this Markdown file")
    parser.epilog = "Flags after -- go to every script, e.g. -- --vector-env envpool"
    argv = sys.argv[1:] if argv is None else argv
    own, flags = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    options = parser.parse_args(own)
    for script in options.scripts:
        if script not in BENCHMARK_ENVS:
            parser.error(f"unknown script {script}; choose from {', '.join(BENCHMARK_ENVS)}")
    for flag in ("runs", "env_steps"):
        if getattr(options, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} {getattr(options, flag)}: pass 1 or more")
    jobs = []
    for script in options.scripts:  # flags checked here, before any measurement, so a mistake costs no waiting
        env_id, steps = BENCHMARK_ENVS[script]
        job = (script, options.env_id or env_id, options.total_timesteps or steps)
        script_args(*job, flags)
        jobs.append(job + (options.env_steps, options.runs, flags))

    with tempfile.TemporaryDirectory() as scratch:  # the runs' logs go to a scratch folder
        results = [measure_in_a_process(job, scratch) for job in jobs]
    report = table(results)
    print(report)
    if options.output:
        command = "python benchmark/sps.py " + " ".join(argv)
        Path(options.output).write_text(f"`{command}`\n\n{machine()}; medians of {options.runs} runs.\n\n{report}\n")


if __name__ == "__main__":
    main()
