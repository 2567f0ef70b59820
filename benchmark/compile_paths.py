"""What the default --compile path buys over the others: the continuous script's minibatch step through
ppo_utils.compiled.compiled_step (ppo_loss, its torch.func.grad, G8's clipping and Adam traced as one torch.compile'd
graph), the gradients alone as that graph with clipping and Adam eager (the path under torchrun, X2), and
torch.compile(ppo_loss) followed by the visible loss.backward(), side by side in one process on the same batches,
alternating, with one rollout timed beside them for the share of an iteration.

    python benchmark/compile_paths.py [--env-id Hopper-v5] [--rounds 5]

Times are the main thread's CPU seconds (time.thread_time) with one torch thread, so that another process on the
machine moves them less than it moves the wall clock; the first update of each path (its compiling, in wall time) is
reported apart. The batch is random (the update's cost does not depend on its values); the rollout steps the env with the agent."""

import argparse
import time

import numpy as np
import torch

from sps import load_script  # beside this file; importing it loads ppo_utils/ from the project's folder

from ppo_utils.compiled import compiled_backward, compiled_step  # noqa: E402  (loaded by sps)

cont = load_script("ppo_continuous_action.py")


def random_batch(agent, size, obs_dim):
    """A flat batch of `size` samples in the shapes update_policy takes; its log-probabilities near the agent's own."""
    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(size, obs_dim, generator=generator)
    with torch.no_grad():
        actions, logprobs, _, values = agent.get_action_and_value(obs)
    noise = lambda: torch.randn(size, generator=generator)  # noqa: E731
    return {"obs": obs, "actions": actions, "logprobs": logprobs + 0.01 * noise(), "advantages": noise(),
            "returns": noise(), "values": values.flatten()}  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="Hopper-v5", help="a task of ppo_continuous_action.py (its default flags)")
    parser.add_argument("--rounds", type=int, default=5, help="updates timed per path, alternating")
    options = parser.parse_args()
    torch.set_num_threads(1)
    args = cont.Args(env_id=options.env_id)
    envs = cont.make_envs(args, None)
    torch.manual_seed(0)
    agent = cont.Agent(envs, args)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=True)
    batch = random_batch(agent, args.batch_size, envs.single_observation_space.shape[0])

    compiled_loss = torch.compile(cont.ppo_loss)

    def loss_then_backward(agent_, mb, args_, clip_coef, kl_beta):  # floats as tensors, as compiled_backward passes them
        loss, stats = compiled_loss(agent_, mb, args_, torch.tensor(clip_coef), torch.tensor(kl_beta))
        loss.backward()
        return stats

    def with_backward(backward):  # the plain minibatch step (clipping and Adam eager) around a compiled backward
        return lambda *step_args: cont.minibatch_step(*step_args, backward=backward)

    cpu = torch.device("cpu")
    paths = {"one graph: loss, gradients, G8, Adam (default)": compiled_step(cont.ppo_loss, cont.minibatch_step, agent,
                                                                              optimizer, args.max_grad_norm, 1, cpu),
             "func.grad graph, eager G8 and Adam (torchrun's)": with_backward(compiled_backward(cont.ppo_loss, agent, cpu)),
             "compiled loss + backward()": with_backward(loss_then_backward)}  # fmt: skip

    def update(step):
        start = time.thread_time()
        cont.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta, 1, step)
        return time.thread_time() - start

    def rollout():
        start = time.thread_time()
        next_obs, _ = envs.reset(seed=0)
        for _ in range(args.num_steps):
            with torch.inference_mode():
                action, _, _, _ = agent.get_action_and_value(torch.as_tensor(next_obs, dtype=torch.float32))
            next_obs, *_ = envs.step(action.numpy())
        return time.thread_time() - start

    for name, backward in paths.items():  # the wall clock: inductor compiles in worker processes (or reads its cache)
        start = time.perf_counter()
        update(backward)
        print(f"{name}: first update (compiling) {time.perf_counter() - start:.1f} s of wall time", flush=True)
    times = {name: [] for name in paths} | {"rollout": []}
    for round_ in range(options.rounds):
        for name, backward in paths.items():
            times[name].append(update(backward))
        times["rollout"].append(rollout())
        print(f"round {round_ + 1}: " + ", ".join(f"{name} {t[-1]:.3f} s" for name, t in times.items()), flush=True)
    medians = {name: np.median(t) for name, t in times.items()}
    default, rollout_time = medians[next(iter(paths))], medians.pop("rollout")
    print(f"median of {options.rounds}: rollout {rollout_time:.3f} s; " + "; ".join(
        f"{name}: update {m:.3f} s ({(m / default - 1) * 100:+.1f}%, {(m - default) / (default + rollout_time) * 100:+.1f}% "
        "of an iteration)" for name, m in medians.items()))  # fmt: skip

if __name__ == "__main__":
    main()
