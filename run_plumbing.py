"""The run plumbing the three PPO scripts share, and none of PPO itself: a reader of the algorithm can skip this file.

- `Run`: one training run's life cycle around the algorithm: --resume, flag checks, torchrun (X2), TensorBoard,
  wandb, videos, episode statistics, the NaN guard, stop signals (SIGINT, SIGTERM) and checkpoints.
- `main`: the scripts' command line: training or evaluation, signals in, one-line errors out.
- `check_args`: the flags and the env id, checked from what the script's Args says it accepts.
- torchrun (X2): `distributed_setup`, `all_ranks_mean`, `average_gradients`.
- `evaluate`: --eval-checkpoint.
- envs: `NormalizeObservation` (M1, M2 under SAME_STEP autoreset), the env statistics saved in checkpoints,
  CartPoleNoVelocity-v1 (a small task that needs memory, for ppo_rnn.py) and `EnvpoolVectorEnv` (G10's envpool backend).
- `compiled_backward`: --compile.
"""

import os
import random
import shutil
import signal
import sys
import time
from collections import deque
from dataclasses import asdict, fields, replace
from glob import glob

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.utils import RunningMeanStd
from torch.utils.tensorboard import SummaryWriter


class ArgError(ValueError):
    """A bad command line: the message names the flag and the fix."""


class NonFiniteError(RuntimeError):
    """Training produced a NaN or infinity: the message names the update and the last good checkpoint."""


def main(args, train, make_envs, Agent):
    """A script's `__main__`: trains, or with --eval-checkpoint evaluates a saved agent. While training, SIGINT and
    SIGTERM ask train() to stop with a checkpoint (stop_on_signals); while evaluating they stop it at once. A bad
    command line or a NaN ends with one line on stderr (printed by rank 0 alone under torchrun) instead of a traceback."""
    try:
        evaluate(args, make_envs, Agent) if args.eval_checkpoint else train(args, stop_on_signals())
    except (ArgError, NonFiniteError) as e:
        if int(os.environ.get("RANK", 0)) == 0:
            print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C while evaluating
        sys.exit(130)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        # X2: the run is done and its process group closed, but torch's gloo backend sometimes aborts the interpreter's
        # teardown ("terminate called without an active exception", in about 1 run of 4 on a busy 2-core machine),
        # which would fail the torchrun job: a worker whose run has ended leaves without that teardown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def stop_on_signals():
    """Makes SIGINT and SIGTERM append their number to the returned list, which train() checks after each env step to
    stop with a checkpoint. A second Ctrl-C exits at once without one (exit code 130); a SIGINT within a second of the
    first counts as the same request, since torchrun forwards the terminal's Ctrl-C to its workers, who get two."""
    stop_signals, first_time = [], []

    def on_signal(signum, frame):
        rank0 = int(os.environ.get("RANK", 0)) == 0
        if signum == signal.SIGINT and first_time and time.monotonic() - first_time[0] > 1.0:
            if rank0:
                os.write(2, b"\nsecond Ctrl-C: exiting without a checkpoint (the last one written stays as it was)\n")
            os._exit(130)
        if not first_time:
            first_time.append(time.monotonic())
            if rank0:  # os.write: print() is not safe inside a signal handler
                os.write(2, b"\nstopping: saving the last finished update (Ctrl-C again to exit without saving)\n")
        stop_signals.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    return stop_signals


def seed_everything(seed, torch_deterministic=True):
    """Seeds python, numpy and torch; sets `torch.backends.cudnn.deterministic`."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic


def rank_seed(seed, rank):
    """X2: the seed of rank `rank`'s python, numpy and torch generators (its env i gets this + i). Rank 0 keeps --seed, so
    a single process is unchanged; rank r > 0 takes a number numpy's SeedSequence derives from (seed, r), so that
    neighbouring seeds share no stream (with seed + r, seed 1 rank 1 would be seed 2 rank 0)."""
    return seed if rank == 0 else int(np.random.SeedSequence([seed, rank]).generate_state(1)[0] % 2**31)


class LossModule(torch.nn.Module):
    """loss_fn(agent, ...) as a module's forward: the form torch.func.functional_call differentiates."""

    def __init__(self, loss_fn, agent):
        super().__init__()
        self.loss_fn, self.agent = loss_fn, agent

    def forward(self, *args):
        return self.loss_fn(self.agent, *args)


def compiled_backward(loss_fn, agent, device):
    """--compile (on by default): a function that does for `agent` what `loss, stats = loss_fn(agent, *args);
    loss.backward(); return stats` does, as one torch.compile'd graph. torch.func.grad traces the forward and the backward
    together, which spares the autograd engine's per-op work (ppo_continuous_action.py's update runs ~2.3x faster); the
    gradients are added to the parameters' .grad, as backward() adds them. The plain backward runs instead where dynamo
    cannot trace the agent (nn.LSTM and nn.GRU: ppo_rnn.py) and, with a warning, where inductor has nothing to build
    with (no C++ compiler on a CPU)."""
    module = LossModule(loss_fn, agent)
    params = dict(module.named_parameters())

    def plain(agent_, *args):
        loss, stats = loss_fn(agent_, *args)
        loss.backward()
        return stats

    if any(isinstance(m, torch.nn.RNNBase) for m in agent.modules()):
        return plain
    if device.type == "cpu" and shutil.which(os.environ.get("CXX", "g++")) is None:
        if int(os.environ.get("RANK", 0)) == 0:  # X2: said once
            print("warning: --compile needs a C++ compiler (g++) on a CPU; running eagerly (slower)", file=sys.stderr)
        return plain

    # tie_weights=False: a shared body (M7) is one module object under two names, which the substituted parameters serve
    # as they are; tie_weights' bookkeeping of it trips AOTAutograd
    @torch.compile
    def grads_and_stats(detached, *args):
        return torch.func.grad(lambda p: torch.func.functional_call(module, p, args, tie_weights=False), has_aux=True)(
            detached
        )

    def backward(agent_, *args):
        assert agent_ is agent, "compiled_backward serves the agent it was built for"
        # floats (clip_coef, kl_beta) go in as tensors: the graph would be rebuilt for each new value of an annealed one
        args = [torch.tensor(a, device=device) if isinstance(a, float) else a for a in args]
        grads, stats = grads_and_stats({name: p.detach() for name, p in params.items()}, *args)
        for name, p in params.items():
            p.grad = grads[name] if p.grad is None else p.grad + grads[name]
        return stats

    return backward


# ---------------------------------------------------------------------------------------------------------------------
# torchrun (X2)


def distributed_setup(cuda):
    """X2: under torchrun (which sets RANK, WORLD_SIZE and LOCAL_RANK) joins the process group, gloo on CPUs, NCCL on
    GPUs with rank r on GPU LOCAL_RANK of its node; a plain run is rank 0 of 1. Returns (rank, world_size, device)."""
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    use_cuda = torch.cuda.is_available() and cuda
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', 0)}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if use_cuda else "gloo"
        try:
            dist.init_process_group(backend, rank=rank, world_size=world_size)
        except Exception as e:
            raise ArgError(
                f"torchrun: the {backend} backend did not start ({type(e).__name__}: {e}); check --nnodes, --node-rank and "
                "--rdzv-endpoint"
            ) from None
    return rank, world_size, device


def all_ranks_mean(tensor, world_size):
    """X2: the mean of `tensor` over all ranks, in place; a single process keeps it as it is."""
    if world_size > 1:
        dist.all_reduce(tensor)
        tensor /= world_size
    return tensor


def average_gradients(parameters, world_size):
    """X2: replaces each gradient by its mean over all ranks (one all-reduce for all of them), so that every rank takes
    the same optimizer step; a single process keeps its gradients."""
    if world_size > 1:
        grads = [p.grad for p in parameters if p.grad is not None]
        averaged = all_ranks_mean(torch.cat([g.flatten() for g in grads]), world_size)
        for g, mean in zip(grads, averaged.split([g.numel() for g in grads])):
            g.copy_(mean.view_as(g))


# ---------------------------------------------------------------------------------------------------------------------
# flag checks

# the smallest value each flag may take, where a script has it: (minimum, what the message adds)
FLAG_MINIMUMS = {
    "num_envs": (1, "must be positive"),
    "num_steps": (1, "must be positive"),
    "num_minibatches": (1, "must be positive"),
    "update_epochs": (1, "must be positive"),
    "total_timesteps": (1, "must be positive"),
    "eval_episodes": (1, "must be positive"),
    "rnn_hidden_size": (1, "must be positive"),
    "frame_skip": (1, "must be at least 1 (1 turns it off)"),
    "frame_stack": (1, "must be at least 1 (1 turns it off)"),
    "noop_max": (0, "must be 0 (off) or more"),
}
ENV_KINDS = {  # what check_args tells apart: (description, example id, the script that trains on it)
    "continuous": ("an env with continuous (Box) actions", "Hopper-v5", "ppo_continuous_action.py"),
    "atari": ("an Atari game", "BreakoutNoFrameskip-v4", "ppo_atari.py or ppo_rnn.py"),
    "discrete-vector": ("an env with vector observations and discrete actions", "CartPole-v1", "ppo_rnn.py"),
}


def env_kind(env_id):
    """Which of ENV_KINDS the registered `env_id` is, and the type of its action space; ArgError if it is none of them
    or cannot be made."""
    if gym.spec(env_id).entry_point == "ale_py.env:AtariEnv":
        return "atari", "Discrete"
    try:
        env = gym.make(env_id)
    except gym.error.Error as e:
        raise ArgError(f"--env-id {env_id} cannot be created: {e}") from None
    observation_space, action_space = env.observation_space, env.action_space
    env.close()
    if isinstance(action_space, gym.spaces.Box):
        return "continuous", "Box"
    if isinstance(action_space, gym.spaces.Discrete) and len(observation_space.shape) == 1:
        return "discrete-vector", "Discrete"
    raise ArgError(
        f"--env-id {env_id} has {type(observation_space).__name__} observations and a {type(action_space).__name__} "
        "action space, which none of the scripts trains on"
    )


def check_args(args, world_size=1) -> None:
    """Validates the flags and the env id before anything starts; raises ArgError with a one-line message. What a
    script accepts comes from its Args: `env_kinds` (keys of ENV_KINDS) and `minibatch_unit` ("batch_size": any split
    of the batch; "num_envs": minibatches of whole env sequences). world_size: the processes under torchrun (X2), each
    collecting a batch of its own."""
    for flag, (minimum, requirement) in FLAG_MINIMUMS.items():
        if getattr(args, flag, minimum) < minimum:
            raise ArgError(f"--{flag.replace('_', '-')} {requirement}, got {getattr(args, flag)}")
    if getattr(args, args.minibatch_unit) % args.num_minibatches:
        whole = getattr(args, args.minibatch_unit)
        of = f"--num-envs {whole} (minibatches are made of whole env sequences)"
        if args.minibatch_unit == "batch_size":
            of = f"the batch of --num-envs {args.num_envs} x --num-steps {args.num_steps} = {whole}"
        raise ArgError(f"--num-minibatches {args.num_minibatches} does not divide {of}; choose a divisor of {whole}")
    if args.total_timesteps < args.batch_size * world_size:
        batch = f"one batch ({args.batch_size})"
        if world_size > 1:
            batch = f"one update of {world_size} processes ({world_size} x {args.batch_size} = {args.batch_size * world_size})"
        raise ArgError(f"--total-timesteps {args.total_timesteps} is less than {batch}; raise it")
    if args.torch_threads < 0:
        raise ArgError(f"--torch-threads {args.torch_threads}: pass a positive count, or 0 for torch's default")
    if not (0 <= args.gamma <= 1 and 0 <= args.gae_lambda <= 1):
        raise ArgError("--gamma and --gae-lambda must lie in [0, 1]")
    if args.vector_env == "envpool" and args.capture_video:
        raise ArgError("--capture-video needs frames that envpool does not render; add --vector-env sync")
    if args.vector_env == "envpool" and getattr(args, "noop_max", 1) == 0:
        raise ArgError("envpool cannot turn A1 off (--noop-max 0); add --vector-env sync")

    accepted = " or ".join(ENV_KINDS[kind][0] for kind in args.env_kinds)
    try:
        spec = gym.spec(args.env_id)
    except gym.error.Error:
        hint = f"this script takes {accepted}, e.g. {ENV_KINDS[args.env_kinds[0]][1]}"
        if "atari" not in args.env_kinds and ("NoFrameskip" in args.env_id or args.env_id.startswith("ALE/")):
            hint = "it is an Atari game: use ppo_atari.py"
        raise ArgError(f"--env-id {args.env_id} is not a registered gymnasium environment; {hint}") from None
    kind, action_space = env_kind(args.env_id)
    if kind not in args.env_kinds:
        what = "it is an Atari game" if kind == "atari" else f"it has a {action_space} action space"
        raise ArgError(f"--env-id {args.env_id} is not {accepted}: {what}; use {ENV_KINDS[kind][2]}")
    if kind == "atari" and spec.kwargs.get("frameskip", 1) != 1:
        raise ArgError(
            f"--env-id {args.env_id} skips frames itself; use the NoFrameskip-v4 id of the game so that A4 "
            "(--frame-skip) does the skipping"
        )
    if kind != "atari" and args.vector_env == "envpool":
        raise ArgError("--vector-env envpool runs Atari games only; add --vector-env sync")


# ---------------------------------------------------------------------------------------------------------------------
# the run


class Run:
    """One training run's plumbing, created first thing in train(). It reads --resume (the run then continues with the
    checkpoint's flags: use `run.args`), checks the flags, joins torchrun's process group (X2), names the run, opens
    TensorBoard (and wandb with --track) on rank 0. Then, in the order train() calls them: `start` (restores a resumed
    run's state), `record_episodes` and `should_stop` (each env step), `check_finite`, `log` and `checkpoint` (each
    update), `finish`."""

    def __init__(self, args, stop_signals=()):
        world_size = int(os.environ.get("WORLD_SIZE", 1))  # X2: torchrun's processes
        self.resumed = load_checkpoint(args.resume, "--resume", args) if args.resume else None
        if self.resumed is not None:
            default = type(args)()
            changed = [
                f"--{key.replace('_', '-')}"
                for key, value in asdict(args).items()
                if key != "resume" and value != getattr(default, key)
            ]
            if changed:
                raise ArgError(f"--resume continues the run with its own flags; drop {' '.join(changed)}")
            saved = self.resumed.get("world_size", 1), self.resumed.get("local_world_size", 1)
            if saved[0] != world_size:  # the schedules and the step budget are counted in updates of all processes
                processes = f"{saved[0]} process{'es' if saved[0] > 1 else ''}"
                raise ArgError(
                    f"--resume {args.resume} continues a run of {processes}, not {world_size}; continue it with: "
                    + resume_command(args.script, args.resume, *saved)
                )
            args = replace(type(args)(**self.resumed["args"]), resume=args.resume)  # the run continues with its own flags
        check_args(args, world_size)
        self.rank, self.world_size, self.device = distributed_setup(args.cuda)  # X2
        if args.torch_threads > 0:
            torch.set_num_threads(args.torch_threads)
        name = self.resumed["run_name"] if self.resumed else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
        if self.world_size > 1:
            shared = [name]
            dist.broadcast_object_list(shared, src=0)  # X2: rank 0's run name everywhere
            name = shared[0]
        self.args, self.name, self.stop_signals = args, name, stop_signals
        self.track = args.track and self.rank == 0  # X2: only rank 0 logs, records videos and writes checkpoints
        self.num_iterations = args.total_timesteps // (args.batch_size * self.world_size)
        self.last_step = self.num_iterations * args.batch_size * self.world_size
        self.checkpoint_path = f"runs/{name}/agent.pt"
        self.checkpoint_interval = args.checkpoint_interval if args.checkpoint_interval is not None else 100 * args.save_model
        self.wandb_id = None
        if self.track:
            import wandb

            wandb.init(
                project=args.wandb_project_name,
                entity=args.wandb_entity,
                sync_tensorboard=True,
                config=asdict(args),
                name=name,
                save_code=True,
                id=self.resumed["wandb_id"] if self.resumed else None,
                resume="allow",
            )
            self.wandb_id = wandb.run.id
        self.writer = None
        if self.rank == 0:
            # on resume, TensorBoard hides what the interrupted run logged after its checkpoint: no step appears twice
            self.writer = SummaryWriter(f"runs/{name}", purge_step=self.resumed["global_step"] + 1 if self.resumed else None)
            if self.resumed is None:
                table = "\n".join([f"|{key}|{value}|" for key, value in asdict(args).items()])
                self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
        self.episodes, self.episodic_returns, self.recent_returns, self.videos_logged = [], [], deque(maxlen=20), set()
        self.stopping, self.sps = False, 0

    def start(self, agent, optimizer, envs):
        """Takes what the checkpoints save; restores it from the checkpoint of a resumed run (X2: all ranks then start
        from rank 0's parameters). Returns the first iteration, the global step and the KL coefficient to go on with."""
        self.agent, self.optimizer, self.envs = agent, optimizer, envs
        iteration, global_step, self.kl_beta = 1, 0, self.args.kl_beta
        if self.resumed is not None:
            agent.load_state_dict(self.resumed["model"])
            optimizer.load_state_dict(self.resumed["optimizer"])
            set_env_statistics(envs, self.resumed["env_stats"])
            set_rng_state(self.resumed["rng"])  # rank 0's; the other ranks draw their own numbers
            if self.rank > 0:
                seed = rank_seed(self.args.seed + self.resumed["global_step"], self.rank)
                seed_everything(seed, self.args.torch_deterministic)
            iteration, global_step = self.resumed["iteration"] + 1, self.resumed["global_step"]
            self.kl_beta = self.resumed["kl_beta"]
            if self.rank == 0:
                print(f"resumed {self.name} after update {iteration - 1} (step {global_step}); the envs start new episodes")
        if self.world_size > 1:
            for param in agent.parameters():
                dist.broadcast(param.data, src=0)  # X2: all ranks start from rank 0's parameters
        self.start_time = self.last_print = time.time()
        self.start_step, self.done_iteration, self.done_step = global_step, iteration - 1, global_step
        self.episode_steps = np.zeros(envs.num_envs, dtype=np.int64)
        self.keep_state()
        return iteration, global_step, self.kl_beta

    def record_episodes(self, infos, global_step):
        """Keeps the return and length of the episodes that ended in this env step, for the next log(). The length
        counts the agent's steps only, not those the Atari wrappers take at a reset (A2's FIRE presses, A3's no-op)."""
        self.episode_steps += 1
        for i, episodic_return in finished_episodes(infos):
            self.episodes.append((global_step, episodic_return, int(self.episode_steps[i])))
            self.episode_steps[i] = 0

    def should_stop(self, last_step_of_rollout):
        """Whether SIGINT or SIGTERM has come (to any rank: X2 ranks agree once per rollout, not every step)."""
        if self.world_size == 1:
            self.stopping = bool(self.stop_signals)
        elif last_step_of_rollout:
            stop = torch.tensor(float(bool(self.stop_signals)), device=self.device)
            self.stopping = all_ranks_mean(stop, self.world_size).item() > 0  # device sync
        return self.stopping

    def check_finite(self, stats, iteration, global_step):
        """The NaN guard: stops the run before a NaN or infinite statistic or parameter reaches a checkpoint."""
        values = [v for v in stats.values() if isinstance(v, torch.Tensor)] + list(self.agent.parameters())
        if not all(torch.isfinite(v).all() for v in values):  # device sync
            self.envs.close()
            if self.writer is not None:
                self.writer.close()
            last_good = self.checkpoint_path if os.path.exists(self.checkpoint_path) else "none written yet"
            raise NonFiniteError(
                f"a loss or a parameter became NaN or infinite in update {iteration} (step {global_step}); training stopped "
                f"and wrote no checkpoint; the last good one: {last_good}"
            )

    def log(self, global_step, scalars):
        """Writes the update's scalars, the episodes that ended since the last call (of all ranks) and the SPS; prints
        a progress line every 10 s; sends finished videos to wandb."""
        episodes, self.episodes = self.episodes, []
        if self.world_size > 1:
            gathered = [None] * self.world_size
            dist.all_gather_object(gathered, episodes)  # X2: rank 0 logs the episodes of every rank
            episodes = sorted(episode for rank_episodes in gathered for episode in rank_episodes)
        self.episodic_returns += [r for _, r, _ in episodes]
        self.recent_returns.extend(r for _, r, _ in episodes)
        self.sps = int((global_step - self.start_step) / (time.time() - self.start_time))  # over all ranks
        if self.rank != 0:
            return
        for step_of_end, episodic_return, episodic_length in episodes:
            self.writer.add_scalar("charts/episodic_return", episodic_return, step_of_end)
            self.writer.add_scalar("charts/episodic_length", episodic_length, step_of_end)
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, global_step)
        self.writer.add_scalar("charts/SPS", self.sps, global_step)
        if time.time() - self.last_print > 10 or global_step == self.last_step:
            self.last_print = time.time()
            mean_return = f"{np.mean(self.recent_returns):.1f}" if self.recent_returns else "n/a"
            print(
                f"step {global_step}/{self.args.total_timesteps}  SPS {self.sps}  mean return (last {len(self.recent_returns)}) {mean_return}"
            )
        if self.track and self.args.capture_video:
            self.videos_logged = log_videos(self.name, self.videos_logged)

    def checkpoint(self, iteration, global_step, kl_beta):
        """Marks an update as finished (X2: the ranks agree on their env statistics); writes the checkpoint every
        --checkpoint-interval updates."""
        self.done_iteration, self.done_step, self.kl_beta = iteration, global_step, kl_beta
        if self.world_size > 1:
            average_env_statistics(self.envs, self.world_size, self.device)
        self.keep_state()
        if self.rank == 0 and self.checkpoint_interval and iteration % self.checkpoint_interval == 0:
            self.save()

    def keep_state(self):
        """The RNG states, env statistics and learning rates at the end of the last finished update: a checkpoint
        written after a stop signal saves these, not what the dropped rollout has since made of them."""
        if self.rank == 0:
            learning_rates = [group["lr"] for group in self.optimizer.param_groups]
            self.kept = {"rng": rng_state(), "env_stats": env_statistics(self.envs), "lr": learning_rates}

    def save(self):
        optimizer = self.optimizer.state_dict()  # its param_groups are copies
        for group, lr in zip(optimizer["param_groups"], self.kept["lr"]):
            group["lr"] = lr  # G6 may have annealed it for the rollout the stop dropped
        save_checkpoint(
            self.checkpoint_path,
            {
                "script": self.args.script,
                "model": self.agent.state_dict(),
                "optimizer": optimizer,
                "env_stats": self.kept["env_stats"],
                "rng": self.kept["rng"],
                "args": asdict(self.args),
                "run_name": self.name,
                "iteration": self.done_iteration,
                "global_step": self.done_step,
                "kl_beta": self.kl_beta,
                "wandb_id": self.wandb_id,
                "world_size": self.world_size,  # X2: a resumed run must have as many processes
                "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
            },
        )

    def finish(self):
        """The checkpoint of the last finished update (with --save-model, a checkpoint interval or after a stop
        signal), then closes the envs, the logs and the process group."""
        if self.rank == 0 and (self.stopping or self.args.save_model or self.checkpoint_interval):
            self.save()
            print(f"saved the agent after update {self.done_iteration} (step {self.done_step}) to {self.checkpoint_path}")
        if self.rank == 0 and self.stopping:
            local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
            command = resume_command(self.args.script, self.checkpoint_path, self.world_size, local_world_size)
            print(f"stopped by a signal; continue with: {command}")
        self.envs.close()
        if self.track and self.args.capture_video:
            log_videos(self.name, self.videos_logged)
        if self.writer is not None:
            self.writer.close()
        if self.track:
            import wandb

            wandb.finish()
        if self.world_size > 1:
            dist.barrier()  # no rank leaves while another still talks to it
            dist.destroy_process_group()


def finished_episodes(infos):
    """(env index, return) of each episode that ended in this step: with SAME_STEP autoreset its statistics are in
    infos["final_info"]."""
    final_info = infos.get("final_info", {})
    if "episode" not in final_info:
        return []
    ended = np.flatnonzero(final_info["_episode"])
    return list(zip(ended.tolist(), final_info["episode"]["r"][ended].tolist()))


def resume_command(script, path, world_size, local_world_size):
    """The command that continues a run of `world_size` processes, `local_world_size` of them on each machine (X2)."""
    if world_size == 1:
        return f"python {script} --resume {path}"
    nodes = world_size // local_world_size
    if nodes == 1:
        return f"torchrun --nproc-per-node {world_size} {script} --resume {path}"
    return (
        f"torchrun --nnodes {nodes} --nproc-per-node {local_world_size} --rdzv-backend c10d --rdzv-endpoint HOST:29400 "
        f"{script} --resume {path} (on each machine; HOST: the first one)"
    )


def log_videos(run_name, logged):
    """Sends the finished videos of env 0 to wandb (gymnasium's RecordVideo and wandb's monitor_gym do not mix)."""
    import wandb

    for path in sorted(glob(f"videos/{run_name}/*.mp4")):
        if path not in logged:
            wandb.log({"videos": wandb.Video(path, format="mp4")})
            logged = logged | {path}
    return logged


# ---------------------------------------------------------------------------------------------------------------------
# checkpoints


def rng_state():
    """The state of every random number generator the run draws from: python, numpy, torch (and CUDA)."""
    name, keys, *rest = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), *rest),  # plain types and tensors only (weights_only)
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state):
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


CHECKPOINT_KEYS = {
    "script",
    "model",
    "optimizer",
    "env_stats",
    "rng",
    "args",
    "run_name",
    "iteration",
    "global_step",
    "kl_beta",
    "wandb_id",
}  # and "world_size", "local_world_size" (X2), which older checkpoints lack (read as 1)


def save_checkpoint(path, checkpoint):
    """Writes `checkpoint` (a dict with CHECKPOINT_KEYS) durably: to a temporary file, flushed to disk, renamed over
    `path`, then the rename flushed too, so that a crash or a power cut at any point leaves the old checkpoint or the
    new one, never a torn file."""
    with open(path + ".tmp", "wb") as f:
        torch.save(checkpoint, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename is an entry of the folder
    finally:
        os.close(folder)


def load_checkpoint(path, flag, args):
    """A checkpoint save_checkpoint wrote, loaded without executing code (weights_only); ArgError naming `flag` if the
    file is missing, truncated or written by another script than args.script."""
    if not os.path.isfile(path):
        raise ArgError(f"{flag} {path}: no such file; pass an agent.pt written under runs/ by --save-model or a checkpoint")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ArgError(f"{flag} {path} is not a readable checkpoint ({type(e).__name__}); use another one") from None
    if not isinstance(checkpoint, dict) or not CHECKPOINT_KEYS <= checkpoint.keys():
        raise ArgError(f"{flag} {path} was not written by {args.script}")
    if checkpoint["script"] != args.script:
        raise ArgError(f"{flag} {path} was written by {checkpoint['script']}; load it with that script")
    unknown = sorted(set(checkpoint["args"]) - {field.name for field in fields(args)})
    if unknown:
        names = " ".join(f"--{key.replace('_', '-')}" for key in unknown)
        raise ArgError(
            f"{flag} {path} was written by another version of {args.script}, with flags this one does not have "
            f"({names}); load it with the version that wrote it"
        )
    return checkpoint


# ---------------------------------------------------------------------------------------------------------------------
# --eval-checkpoint


def evaluate(args, make_envs, Agent):
    """--eval-checkpoint: the saved agent plays --eval-episodes episodes in one env made with the flags that trained it,
    its actions sampled as in training, the env statistics frozen at their saved values; videos and the seed come from
    `args`. A recurrent agent (one with initial_state) carries its state from step to step (B3). Prints and returns the
    episodic returns."""
    checkpoint = load_checkpoint(args.eval_checkpoint, "--eval-checkpoint", args)
    print(f"evaluating {args.eval_checkpoint} over {args.eval_episodes} episodes", flush=True)
    train_args = replace(
        type(args)(**checkpoint["args"]), num_envs=1, num_minibatches=1, capture_video=args.capture_video, seed=args.seed
    )
    check_args(train_args)
    torch.manual_seed(args.seed)
    envs = make_envs(train_args, f"{train_args.env_id}__{args.exp_name}-eval__{args.seed}__{int(time.time())}")
    agent = Agent(envs, train_args)
    agent.load_state_dict(checkpoint["model"])
    set_env_statistics(envs, checkpoint["env_stats"], frozen=True)

    episodic_returns = []
    next_obs, _ = envs.reset(seed=args.seed)
    next_done, state = torch.zeros(1), agent.initial_state(1) if hasattr(agent, "initial_state") else None
    while len(episodic_returns) < args.eval_episodes:
        obs = torch.as_tensor(next_obs, dtype=torch.uint8 if next_obs.dtype == np.uint8 else torch.float32)
        with torch.inference_mode():
            if state is None:
                action = agent.get_action_and_value(obs)[0]
            else:
                action, _, _, _, state = agent.get_action_and_value(obs, state, next_done)
        next_obs, _, terminations, truncations, infos = envs.step(action.numpy())
        next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32)
        episodic_returns += [episodic_return for _, episodic_return in finished_episodes(infos)]
    envs.close()
    print(
        f"eval {args.eval_checkpoint}: mean return {np.mean(episodic_returns):.1f} +- {np.std(episodic_returns):.1f} over {len(episodic_returns)} episodes"
    )
    return episodic_returns


# ---------------------------------------------------------------------------------------------------------------------
# env adapters


class NormalizeObservation(gym.vector.VectorWrapper):
    """M1 and M2 as the reference's VecNormalize does them: one running mean/variance shared by all envs, updated with
    each batch of observations the agent sees, then clipping. gymnasium's own vector NormalizeObservation refuses the
    SAME_STEP autoreset used here, and would leave infos["final_obs"] unnormalized: this one normalizes it with the
    same statistics (without counting it, as the reference never sees it), so that B1 bootstraps from what the value
    network was trained on."""

    def __init__(self, env: gym.vector.VectorEnv, clip: float, epsilon: float = 1e-8):
        super().__init__(env)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, env.single_observation_space.shape, np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, env.num_envs)
        self.obs_rms = RunningMeanStd(shape=env.single_observation_space.shape)
        self.clip, self.epsilon, self.update_running_mean = clip, epsilon, True

    def normalize(self, obs):
        obs = (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)
        return (np.clip(obs, -self.clip, self.clip) if self.clip > 0 else obs).astype(np.float32)  # M2

    def reset(self, **kwargs):
        obs, infos = self.env.reset(**kwargs)
        if self.update_running_mean:
            self.obs_rms.update(obs)
        return self.normalize(obs), infos

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        if self.update_running_mean:
            self.obs_rms.update(obs)
        if "final_obs" in infos:
            final_obs = infos["final_obs"].copy()
            for i in np.flatnonzero(infos["_final_obs"]):
                final_obs[i] = self.normalize(final_obs[i])
            infos["final_obs"] = final_obs
        return self.normalize(obs), rewards, terminations, truncations, infos


def env_statistics(envs):
    """The running statistics of the normalization wrappers (M1: obs_rms, M3: return_rms), saved with the agent: a
    normalized observation means nothing without them. None where the env has no such wrapper."""
    stats = {"obs_rms": None, "return_rms": None}
    while isinstance(envs, gym.vector.VectorWrapper):
        for key in stats:
            if hasattr(envs, key) and stats[key] is None:
                rms = getattr(envs, key)  # copied: the wrapper goes on updating its own
                stats[key] = {"mean": torch.tensor(rms.mean), "var": torch.tensor(rms.var), "count": float(rms.count)}
        envs = envs.env
    return stats


def average_env_statistics(envs, world_size, device):
    """X2: replaces each rank's normalization statistics (M1, M3) by those of all ranks' values together: the mean of
    the ranks' means, and the mean of each rank's variance plus its mean's squared distance from that mean. Since the
    ranks agreed last, each has counted equally many values, so this is what one process seeing every rank's values
    would hold (with the count of one rank, which keeps the weight of later values the same)."""
    stats = env_statistics(envs)
    for rms in stats.values():
        if rms is not None:
            mean = all_ranks_mean(rms["mean"].to(device, torch.float64, copy=True), world_size)  # in place: a copy
            var = all_ranks_mean(rms["var"].to(device, torch.float64) + (rms["mean"].to(device) - mean) ** 2, world_size)
            rms["mean"], rms["var"] = mean.cpu(), var.cpu()
    set_env_statistics(envs, stats)


def set_env_statistics(envs, stats, frozen=False):
    """Restores env_statistics(); frozen: they stop updating (for evaluation)."""
    while isinstance(envs, gym.vector.VectorWrapper):
        for key in ("obs_rms", "return_rms"):
            if hasattr(envs, key) and stats.get(key) is not None:
                rms = getattr(envs, key)
                rms.mean, rms.var, rms.count = stats[key]["mean"].numpy(), stats[key]["var"].numpy(), stats[key]["count"]
                envs.update_running_mean = not frozen
        envs = envs.env


def cartpole_no_velocity(**kwargs):
    """CartPole-v1 that observes only the cart position and the pole angle, each divided by the bound at which the
    episode terminates (so both lie in [-1, 1] while it runs): the velocities must be inferred from memory."""
    env = gym.make("CartPole-v1", **kwargs)
    bounds = env.observation_space.high[[0, 2]] / 2  # 2.4 and 12 degrees
    space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    return gym.wrappers.TransformObservation(env, lambda obs: (obs[[0, 2]] / bounds).astype(np.float32), space)


gym.register("CartPoleNoVelocity-v1", entry_point=cartpole_no_velocity, disable_env_checker=True)


class EnvpoolVectorEnv(gym.vector.VectorEnv):
    """G10's envpool backend for Atari games behind the interface of the gymnasium ones. envpool runs the game and
    A1-A7 in C++ (set from the same flags) but autoresets on the step after an episode ends; here a done env is reset
    at once by a step of that env alone, so that, as with SAME_STEP, every step is a transition and the last observation
    is in infos["final_obs"], and the frame stack (A6) of an env that lost a life starts afresh, as the gymnasium
    wrappers' does. Frames come as ([stack,] H, W, C), and the real game's return (raw rewards, all lives) and length in
    infos["final_info"]["episode"], as RecordEpisodeStatistics gives them. reset(seed=s) seeds env i with s + i (envpool
    takes seeds when it is made, so a new seed makes the pool again)."""

    def __init__(self, args):
        self.args, self.seed = args, args.seed
        self.envs = self.make_pool(args.seed)
        self.num_envs, self.frame_stack = args.num_envs, args.frame_stack
        self.channels = 1 if args.warp_frame else 3
        shape = self.envs.observation_space.shape[1:]  # (stack * channels, H, W)
        shape = shape + (self.channels,) if args.frame_stack == 1 else (args.frame_stack,) + shape + (self.channels,)
        self.single_observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = self.envs.action_space
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.episode_returns = np.zeros(self.num_envs)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int64)

    def make_pool(self, seed):
        import envpool

        args, spec = self.args, gym.spec(self.args.env_id)
        task_id = "".join(word.capitalize() for word in spec.kwargs["game"].split("_")) + "-v5"
        return envpool.make(
            task_id,
            env_type="gymnasium",
            num_envs=args.num_envs,
            seed=seed % 2**31,  # a C++ int
            noop_max=args.noop_max,  # A1
            use_fire_reset=args.fire_reset,  # A2
            episodic_life=args.episodic_life,  # A3
            frame_skip=args.frame_skip,  # A4
            img_height=84 if args.warp_frame else 210,  # A5
            img_width=84 if args.warp_frame else 160,
            gray_scale=args.warp_frame,
            stack_num=args.frame_stack,  # A6
            reward_clip=args.clip_reward_sign,  # A7
            repeat_action_probability=spec.kwargs.get("repeat_action_probability", 0.0),
            max_episode_steps=spec.kwargs.get("max_num_frames_per_episode", 108_000) // args.frame_skip,
        )

    def frames(self, obs):
        """(N, stack * C, H, W) -> (N, [stack,] H, W, C), the layout of the gymnasium backends."""
        obs = obs.reshape((len(obs), self.frame_stack, self.channels) + obs.shape[-2:]).transpose(0, 1, 3, 4, 2)
        return obs[:, 0] if self.frame_stack == 1 else obs

    def reset(self, *, seed=None, options=None):
        if seed is not None and seed != self.seed:
            self.envs.close()
            self.envs, self.seed = self.make_pool(seed), seed
        obs, _ = self.envs.reset()
        self.episode_returns[:], self.episode_lengths[:] = 0, 0
        return self.frames(obs), {}

    def step(self, actions):
        obs, rewards, terminations, truncations, info = self.envs.step(actions)
        self.episode_returns += info["reward"]  # the raw reward, before A7
        self.episode_lengths += 1
        dones = terminations | truncations
        infos = {}
        if dones.any():
            game_over = dones & (info["terminated"].astype(bool) | truncations)  # with A3 a lost life is not the end
            infos["final_obs"], infos["_final_obs"] = np.empty(self.num_envs, dtype=object), dones
            infos["final_obs"][:] = list(self.frames(obs))
            episode = {"r": self.episode_returns.copy(), "l": self.episode_lengths.copy()}
            infos["final_info"] = {"episode": episode, "_episode": game_over}
            self.episode_returns[game_over], self.episode_lengths[game_over] = 0, 0
            ids = np.flatnonzero(dones)
            reset_obs, _, _, _, reset_info = self.envs.step(np.zeros(len(ids), dtype=np.int32), ids)
            obs = obs.copy()
            obs[reset_info["env_id"]] = reset_obs
            # A6: a new episode's stack holds its first frame only; envpool keeps the lost life's frames in it
            stacks = obs.reshape((len(obs), self.frame_stack, -1) + obs.shape[-2:])  # a view of obs
            stacks[ids] = stacks[ids, -1:]
        return self.frames(obs), rewards, terminations, truncations, infos

    def close(self, **kwargs):
        self.envs.close()
