"""The life cycle of a training run around the algorithm, which the three scripts share: the command line (`main`:
training or evaluation, stop signals in, one-line errors out), `Run` (created first thing in train(): the flags, the
process group, the schedule, then each step's and each update's bookkeeping: the NaN guard, `RunLog`'s TensorBoard,
wandb and progress lines, `Checkpoints`), and --compile's `compiled_backward`. It decides no PPO detail; those that
live outside the scripts are in modules named for them: env_adapters.py (M1/M2's wrapper, envpool's backend of G10),
distributed_x2.py (X2), checkpoints.py (--resume, --eval-checkpoint and B3's state there) and flag_checks.py."""

import os
import shutil
import signal
import sys
import time
from collections import deque
from dataclasses import asdict
from glob import glob

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.tensorboard import SummaryWriter

from checkpoints import CheckpointError, Checkpoints, evaluate, new_run_folder, resume_command, resume_flags
from distributed_x2 import all_ranks_mean, average_env_statistics, distributed_setup
from env_adapters import finished_episodes
from flag_checks import ArgError, check_args, run_name_part


class NonFiniteError(RuntimeError):
    """Training produced a NaN or infinity: the message names the update and the last good checkpoint."""


AGREE_EVERY = 32  # X2: env steps between the ranks' agreements on whether a stop signal has come


def main(args, train, make_envs, Agent):
    """A script's `__main__`: trains, or with --eval-checkpoint evaluates a saved agent. While training, SIGINT and
    SIGTERM ask train() to stop with a checkpoint (stop_on_signals); while evaluating they stop it at once. A bad
    command line or a NaN ends with one line on stderr (printed by rank 0 alone under torchrun) instead of a traceback."""
    try:
        if args.eval_checkpoint:  # Ctrl-C stops it at once, also where a shell started it in the background (SIG_IGN)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        evaluate(args, make_envs, Agent) if args.eval_checkpoint else train(args, stop_on_signals())
    except (ArgError, NonFiniteError, CheckpointError) as e:
        if int(os.environ.get("RANK", 0)) == 0:
            print(f"error: {e}", file=sys.stderr)
        else:  # X2: every rank meets the same error; rank 0 says it, and torchrun stops the group once one rank exits
            time.sleep(3)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C while evaluating
        sys.exit(130)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        # X2: the run is done and its process group closed, but torch's gloo backend sometimes aborts the interpreter's
        # teardown ("terminate called without an active exception"), which would fail the torchrun job: a worker whose
        # run has ended leaves without that teardown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def stop_on_signals():
    """Makes SIGINT and SIGTERM append their number to the returned list, which train() checks after each env step to
    stop with a checkpoint. A second Ctrl-C exits at once without one (exit code 130); a SIGINT within a second of the
    first counts as the same request, since torchrun forwards the terminal's Ctrl-C to its workers, who get two."""
    stop_signals, first_time, trainer = [], [], os.getpid()

    def on_signal(signum, frame):
        if os.getpid() != trainer:  # an env worker of --vector-env async (forked with this handler): the trainer stops it
            return
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
    gradients are added to the parameters' .grad, as backward() adds them. The plain backward runs instead, with a
    warning, where inductor has nothing to build with (no C++ compiler on a CPU) or its build fails (a compiler without
    Python's C headers, say: the first minibatch finds out and takes the plain backward). dynamo cannot trace nn.LSTM and
    nn.GRU, so ppo_rnn.py has no --compile and never calls this."""
    module = LossModule(loss_fn, agent)
    params = dict(module.named_parameters())

    def plain(agent_, *args):
        loss, stats = loss_fn(agent_, *args)
        loss.backward()
        return stats

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

    compiled = [True]  # until inductor fails to build the graph

    def backward(agent_, *args):
        assert agent_ is agent, "compiled_backward serves the agent it was built for"
        if not compiled[0]:
            return plain(agent_, *args)
        # floats (clip_coef, kl_beta) go in as tensors: the graph would be rebuilt for each new value of an annealed one
        tensors = [torch.tensor(a, device=device) if isinstance(a, float) else a for a in args]
        try:
            grads, stats = grads_and_stats({name: p.detach() for name, p in params.items()}, *tensors)
        except Exception as e:  # the compiled graph failed to build (a compiler without Python's C headers, say)
            if not is_build_failure(e):
                raise
            compiled[0] = False
            if int(os.environ.get("RANK", 0)) == 0:
                reason = (str(e).strip().splitlines() or [""])[0][:200]
                print(f"warning: --compile could not build its graph here ({type(e).__name__}: {reason}); running "
                      "eagerly (slower, the same gradients)", file=sys.stderr)  # fmt: skip
            return plain(agent_, *args)
        for name, p in params.items():
            grad = grads[name] if p.grad is None else p.grad + grads[name]
            # laid out as its parameter, as backward() leaves it: CUDA's fused Adam refuses other strides, which inductor's
            # outputs may have (on an H100, Pendulum's one-action agent stopped at an Adam step without this)
            p.grad = grad if grad.stride() == p.stride() else torch.empty_like(p).copy_(grad)
        return stats

    return backward


def is_build_failure(error):
    """Whether `error` is torch.compile failing to build a graph (inductor's C++ compile, a missing header or library),
    not an error of the computation itself."""
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import InductorError

    return isinstance(error, (BackendCompilerFailed, InductorError)) or type(error).__name__ in ("CppCompileError",)


class RunLog:
    """What a run reports, on rank 0 (X2: the other ranks pass their episodes to it): TensorBoard scalars, wandb with
    --track (and its videos), the episodes that ended, the SPS and a progress line every 10 s."""

    def __init__(self, args, folder, video_folder, rank, world_size, resumed=None):
        self.args, self.video_folder, self.rank, self.world_size = args, video_folder, rank, world_size
        self.track = args.track and rank == 0
        self.wandb_id = None
        if self.track:
            self.wandb_id = start_wandb(args, folder, resumed["wandb_id"] if resumed else None)
        self.writer = None
        if rank == 0:
            # on resume, TensorBoard hides what the interrupted run logged after its checkpoint: no step appears twice
            self.writer = SummaryWriter(folder, purge_step=resumed["global_step"] + 1 if resumed else None)
            if resumed is None:
                table = "\n".join([f"|{key}|{value}|" for key, value in asdict(args).items()])
                self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
        self.episodes, self.episodic_returns, self.recent_returns, self.videos_logged = [], [], deque(maxlen=20), set()
        self.sps = 0

    def start(self, num_envs, global_step, last_step):
        """The clock and the step count the SPS are measured from; the step whose log prints the last progress line."""
        self.start_time = self.last_print = time.time()
        self.start_step, self.last_step = global_step, last_step
        self.episode_steps = np.zeros(num_envs, dtype=np.int64)

    def record_episodes(self, infos, global_step):
        """Keeps the return and length of the episodes that ended in this env step, for the next log(). The length
        counts the agent's steps only, not those the Atari wrappers take at a reset (A2's FIRE presses, A3's no-op)."""
        self.episode_steps += 1
        for i, episodic_return in finished_episodes(infos):
            self.episodes.append((global_step, episodic_return, int(self.episode_steps[i])))
            self.episode_steps[i] = 0

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
            recent = f"mean return (last {len(self.recent_returns)}) {mean_return}"
            print(f"step {global_step}/{self.args.total_timesteps}  SPS {self.sps}  {recent}")
        if self.track and self.args.capture_video:
            self.videos_logged = log_videos(self.video_folder, self.videos_logged)

    def close(self):
        if self.track and self.args.capture_video:
            log_videos(self.video_folder, self.videos_logged)
        if self.writer is not None:
            self.writer.close()
        if self.track:
            import wandb

            wandb.finish()


class Run:
    """One training run's plumbing, created first thing in train(): the flags (those of the checkpoint with --resume:
    use `run.args`, checked by check_args), torchrun's process group (X2), the run's name and its schedule
    (`num_iterations`), its `RunLog` and its `Checkpoints`. Then, in the order train() calls them: `start` (restores a
    resumed run's state), `record_episodes` and `should_stop` (each env step), `check_finite`, `log` and `checkpoint`
    (each update), `finish`."""

    def __init__(self, args, stop_signals=()):
        world_size = int(os.environ.get("WORLD_SIZE", 1))  # X2: torchrun's processes
        args, self.resumed = resume_flags(args, world_size)
        check_args(args, world_size)
        self.rank, self.world_size, self.device = distributed_setup(args.cuda)  # X2
        if args.torch_threads > 0:
            torch.set_num_threads(args.torch_threads)
        self.args, self.stop_signals, self.stopping, self.steps_unchecked = args, stop_signals, False, 0
        self.num_iterations = args.total_timesteps // (args.batch_size * self.world_size)
        if self.resumed:  # a resumed run writes on in its checkpoint's folder, wherever it is started from
            folder = os.path.dirname(args.resume) or "."
        else:  # runs/<name>, made by rank 0 for this run alone
            name = f"{run_name_part(args.env_id)}__{args.exp_name}__{args.seed}__{int(time.time())}"
            folder = new_run_folder(name) if self.rank == 0 else None
        if self.world_size > 1:
            shared = [folder]
            dist.broadcast_object_list(shared, src=0)  # X2: rank 0's run folder everywhere
            folder = shared[0]
        self.folder, self.name = folder, os.path.basename(os.path.abspath(folder))
        # videos of env 0; a resumed session's in a folder of their own, so that the first session's stay
        step = self.resumed["global_step"] if self.resumed else 0
        self.video_folder = os.path.join(folder, f"videos-from-step-{step}" if self.resumed else "videos")
        try:
            self.runlog = RunLog(args, folder, self.video_folder, self.rank, self.world_size, self.resumed)
        except ArgError:
            if self.rank == 0 and not self.resumed:
                shutil.rmtree(folder)  # made a moment ago, for this run: nothing else is in it
                if not os.listdir("runs"):
                    os.rmdir("runs")
            raise
        self.checkpoints = Checkpoints(args, folder, self.rank, self.world_size)
        trained = self.num_iterations * args.batch_size * self.world_size
        if self.rank == 0 and trained != args.total_timesteps and not self.resumed:
            print(
                f"note: --total-timesteps {args.total_timesteps} is not a whole number of updates of "
                f"{args.batch_size * self.world_size} steps: the run trains {trained} ({self.num_iterations} updates)",
                file=sys.stderr,
            )

    @property
    def episodic_returns(self):
        return self.runlog.episodic_returns

    @property
    def sps(self):
        return self.runlog.sps

    def start(self, agent, optimizer, envs):
        """Takes what the checkpoints save; restores it from the checkpoint of a resumed run (X2: all ranks then start
        from rank 0's parameters). Returns the first iteration, the global step and the KL coefficient to go on with."""
        self.agent, self.optimizer, self.envs = agent, optimizer, envs
        iteration, global_step, self.kl_beta = 1, 0, self.args.kl_beta
        if self.resumed is not None:
            iteration, global_step, self.kl_beta = self.checkpoints.restore(self.resumed, agent, optimizer, envs)
            if self.rank == 0:
                print(f"resumed {self.name} after update {iteration - 1} (step {global_step}); the envs start new episodes")
        if self.world_size > 1:
            for param in agent.parameters():
                dist.broadcast(param.data, src=0)  # X2: all ranks start from rank 0's parameters
        self.done_iteration, self.done_step = iteration - 1, global_step
        self.runlog.start(envs.num_envs, global_step, self.num_iterations * self.args.batch_size * self.world_size)
        self.checkpoints.keep(optimizer, envs)
        return iteration, global_step, self.kl_beta

    def record_episodes(self, infos, global_step):
        self.runlog.record_episodes(infos, global_step)

    def should_stop(self, last_step_of_rollout):
        """Whether SIGINT or SIGTERM has come (to any rank: X2 ranks agree every AGREE_EVERY steps and at the end of the
        rollout, not every step, so that a stop comes well within torchrun's 30 s between its signal and its kill)."""
        self.steps_unchecked += 1
        if self.world_size == 1:
            self.stopping = bool(self.stop_signals)
        elif last_step_of_rollout or self.steps_unchecked >= AGREE_EVERY:
            self.steps_unchecked = 0
            stop = torch.tensor(float(bool(self.stop_signals)), device=self.device)
            self.stopping = all_ranks_mean(stop, self.world_size).item() > 0  # device sync
        return self.stopping

    def check_finite(self, stats, iteration, global_step):
        """The NaN guard: stops the run before a NaN or infinite statistic or parameter reaches a checkpoint."""
        values = [v for v in stats.values() if isinstance(v, torch.Tensor)] + list(self.agent.parameters())
        if not all(torch.isfinite(v).all() for v in values):  # device sync
            self.envs.close()
            self.runlog.close()
            last_good = self.checkpoints.path if os.path.exists(self.checkpoints.path) else "none written yet"
            raise NonFiniteError(
                f"a loss or a parameter became NaN or infinite in update {iteration} (step {global_step}); training stopped "
                f"and wrote no checkpoint; the last good one: {last_good}"
            )

    def log(self, global_step, scalars):
        self.runlog.log(global_step, scalars)

    def checkpoint(self, iteration, global_step, kl_beta):
        """Marks an update as finished (X2: the ranks agree on their env statistics); writes the checkpoint every
        --checkpoint-interval updates."""
        self.done_iteration, self.done_step, self.kl_beta = iteration, global_step, kl_beta
        if self.world_size > 1:
            average_env_statistics(self.envs, self.world_size, self.device)
        self.checkpoints.keep(self.optimizer, self.envs)
        if self.checkpoints.due(iteration):
            self.save()

    def save(self):
        """Writes the checkpoint of the last finished update. Where the disk refuses, the envs and logs are closed and
        CheckpointError says how to continue from the last good checkpoint."""
        done = self.done_iteration, self.done_step, self.kl_beta, self.runlog.wandb_id
        try:
            self.checkpoints.save(self.agent, self.optimizer, *done)
        except CheckpointError as e:
            self.envs.close()
            self.runlog.close()
            path, local_world_size = self.checkpoints.path, int(os.environ.get("LOCAL_WORLD_SIZE", 1))
            hint = "start the run again once there is room"
            if os.path.exists(path):
                hint = "once there is room, continue with: " + resume_command(self.args.script, path, self.world_size, local_world_size)
            raise CheckpointError(f"{e}; {hint}") from None

    def finish(self):
        """The checkpoint of the last finished update (with --save-model, a checkpoint interval, after a stop signal,
        or over an earlier one: a run folder's agent.pt is its last update or absent), then closes the envs, the logs
        and the process group."""
        saving = self.stopping or self.args.save_model or self.checkpoints.interval or os.path.exists(self.checkpoints.path)
        if self.rank == 0 and saving:
            self.save()
            path = self.checkpoints.path
            print(f"saved the agent after update {self.done_iteration} (step {self.done_step}) to {path}")
        if self.rank == 0 and self.stopping:
            local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
            command = resume_command(self.args.script, self.checkpoints.path, self.world_size, local_world_size)
            print(f"stopped by a signal; continue with: {command}")
        self.envs.close()
        self.runlog.close()
        if self.world_size > 1:
            dist.barrier()  # no rank leaves while another still talks to it
            dist.destroy_process_group()


def start_wandb(args, folder, wandb_id=None):
    """--track: starts wandb's run (a resumed run's own, by its id), keeping its files in the run folder; returns its id.
    ArgError where wandb cannot start (no key and no network, say)."""
    import wandb

    try:
        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=asdict(args),
            name=os.path.basename(os.path.abspath(folder)),
            save_code=True,
            id=wandb_id,
            resume="allow",
            dir=folder,
        )
    except Exception as e:  # wandb's UsageError, CommError, ...: none means a bug of this run
        reason = (str(e).strip().splitlines() or [""])[0]
        raise ArgError(
            f"--track: wandb did not start ({type(e).__name__}: {reason}); log in with `wandb login`, or set "
            "WANDB_MODE=offline to keep wandb's logs in the run folder and `wandb sync` them later"
        ) from None
    return wandb.run.id


def log_videos(video_folder, logged):
    """Sends the finished videos of env 0 to wandb (gymnasium's RecordVideo and wandb's monitor_gym do not mix)."""
    import wandb

    for path in sorted(glob(f"{video_folder}/*.mp4")):
        if path not in logged:
            wandb.log({"videos": wandb.Video(path, format="mp4")})
            logged = logged | {path}
    return logged
