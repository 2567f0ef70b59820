"""Recurrent PPO (LSTM or GRU) for Atari and for vector-observation envs with discrete actions: ppo_atari.py plus
memory (B2) and the recurrent details (B3), and as little else as possible. The encoder is the Nature CNN for frames,
a 64-64 MLP for vectors. Every general (G1-G11), Atari (A1-A10), auxiliary (X1, X3) and truncation (B1) detail is a
flag, as in ppo_atari.py.

    python ppo_rnn.py --env-id BreakoutNoFrameskip-v4 --total-timesteps 10000000
    python ppo_rnn.py --env-id CartPoleNoVelocity-v1 --total-timesteps 500000
"""

import os
import random
import signal
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from glob import glob
from typing import Literal

import ale_py
import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import tyro
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.atari_wrappers import (
    ClipRewardEnv,
    EpisodicLifeEnv,
    FireResetEnv,
    MaxAndSkipEnv,
    NoopResetEnv,
    WarpFrame,
)
from torch.distributions.categorical import Categorical
from torch.utils.tensorboard import SummaryWriter

gym.register_envs(ale_py)  # the ALE ids exist only once ale_py is registered


def cartpole_no_velocity(**kwargs):
    """CartPole-v1 that observes only the cart position and the pole angle, each divided by the bound at which the
    episode terminates (so both lie in [-1, 1] while it runs): the velocities must be inferred from memory."""
    env = gym.make("CartPole-v1", **kwargs)
    bounds = env.observation_space.high[[0, 2]] / 2  # 2.4 and 12 degrees
    space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    return gym.wrappers.TransformObservation(env, lambda obs: (obs[[0, 2]] / bounds).astype(np.float32), space)


gym.register("CartPoleNoVelocity-v1", entry_point=cartpole_no_velocity, disable_env_checker=True)


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment, part of the run name runs/{env_id}__{exp_name}__{seed}__{time}"""
    seed: int = 1
    """seed of python, numpy, torch and the environments (env i gets seed + i)"""
    torch_deterministic: bool = True
    """sets `torch.backends.cudnn.deterministic`"""
    cuda: bool = True
    """use CUDA when a GPU is present (the CPU otherwise)"""
    torch_threads: int = 0
    """CPU threads of torch (torch.set_num_threads); 0: torch's default, one per core, which the CNN's update uses well"""
    track: bool = False
    """log to Weights and Biases as well (config, code, TensorBoard scalars, videos); WANDB_MODE=offline works"""
    wandb_project_name: str = "ppo-details"
    """the wandb project"""
    wandb_entity: str | None = None
    """the wandb entity (team); None: your default entity"""
    capture_video: bool = False
    """record videos of env 0 under videos/{run_name} (not with --vector-env envpool, which does not render)"""
    save_model: bool = False
    """save the agent, with everything needed to act and to continue training, to runs/{run_name}/agent.pt at the end"""
    checkpoint_interval: int | None = None
    """write runs/{run_name}/agent.pt (atomically) every this many updates; None: every 100 with --save-model, else never; 0: never"""
    resume: str | None = None
    """continue the run saved in this agent.pt with its own flags, schedules, step count, statistics and RNG states, logging to the same run; the envs start new episodes"""
    eval_checkpoint: str | None = None
    """instead of training, load this agent.pt (written by --save-model) and report its mean episodic return"""
    eval_episodes: int = 10
    """how many episodes --eval-checkpoint plays"""

    env_id: str = "BreakoutNoFrameskip-v4"
    """an Atari game as a NoFrameskip-v4 id (A4 does the frame skipping), or an env with vector observations and discrete actions such as CartPoleNoVelocity-v1"""
    total_timesteps: int = 10_000_000
    """environment steps of the whole run, summed over the parallel envs"""
    num_envs: int = 8
    """(G10) number of parallel environments"""
    num_steps: int = 128
    """(G10) steps per environment in each rollout (the paper's horizon T)"""
    vector_env: Literal["sync", "async", "envpool"] = "sync"
    """(G10) gymnasium's SyncVectorEnv (one process) or AsyncVectorEnv (one subprocess per env), or envpool (C++ threads, its own A1-A7 set from the same flags, differing in two points: its no-op count 1..noop_max includes the FIRE press, and it takes no-ops again after each lost life)"""

    surrogate: Literal["clip", "unclipped", "kl-fixed", "kl-adaptive"] = "clip"
    """(G1) the policy objective, one of the paper's Table 1 variants: the clipped surrogate; no clipping or penalty; a fixed KL penalty --kl-beta; an adaptive KL penalty whose beta is halved when the KL after an update is below --kl-dtarg/1.5 and doubled when above --kl-dtarg*1.5"""
    clip_coef: float = 0.1
    """(G1, G4) the clip range epsilon of the surrogate and of the value loss"""
    kl_beta: float = 1.0
    """(G1) the KL penalty coefficient beta (the initial one for kl-adaptive)"""
    kl_dtarg: float = 0.01
    """(G1) the target KL d_targ of kl-adaptive"""
    gae: bool = True
    """(G2) generalized advantage estimation; off: n-step returns bootstrapped at the rollout's end, advantage = return - value"""
    gamma: float = 0.99
    """(G2) the discount factor gamma"""
    gae_lambda: float = 0.95
    """(G2) the GAE lambda"""
    norm_adv: bool = True
    """(G3) normalize the advantages of each minibatch to mean 0 and std 1; off: use them as computed"""
    clip_vloss: bool = True
    """(G4) clip the value loss around the rollout's values, as the surrogate is clipped; off: plain squared error"""
    ent_coef: float = 0.01
    """(G5) the coefficient of the entropy bonus in the loss"""
    vf_coef: float = 0.5
    """(G5) the coefficient of the value loss in the loss"""
    anneal_lr: bool = True
    """(G6) anneal the learning rate linearly to 0 over the run; off: constant"""
    learning_rate: float = 2.5e-4
    """(G6) the Adam learning rate (at the start of the run)"""
    num_minibatches: int = 4
    """(G7) minibatches per epoch, each of whole env sequences: it must divide --num-envs; 1 = the full batch"""
    update_epochs: int = 4
    """(G7) epochs over each rollout"""
    max_grad_norm: float = 0.5
    """(G8) clip the global L2 norm of all gradients to this value; 0 turns it off"""
    ortho_init: bool = True
    """(G9) orthogonal weights (gain sqrt(2) hidden, 0.01 policy output, 1 value output) and zero biases; off: PyTorch's default init"""
    adam_eps: float = 1e-5
    """(G11) the epsilon of Adam (PyTorch's default is 1e-8)"""

    noop_max: int = 30
    """(A1) on reset, take a random number of no-ops in 1..noop_max; 0 turns it off"""
    fire_reset: bool = True
    """(A2) press FIRE on reset, in games whose actions include FIRE; off: the agent must learn to start the game"""
    episodic_life: bool = True
    """(A3) a lost life ends the episode for the agent; the game resets only when it is over; off: episodes are whole games"""
    frame_skip: int = 4
    """(A4) repeat each action this many frames, sum their rewards and max-pool the last two frames; 1 turns it off"""
    warp_frame: bool = True
    """(A5) turn frames into 84x84 grayscale; off: the raw 210x160 RGB frames"""
    frame_stack: int = 1
    """(A6) stack this many last frames into one observation (newest last); 1 turns it off"""
    clip_reward_sign: bool = True
    """(A7) replace each reward by its sign (-1, 0, 1); off: raw game rewards"""
    scale_obs: bool = True
    """(A8) divide pixels by 255 inside the network; off: raw 0-255 values"""
    activation: Literal["relu", "tanh"] = "relu"
    """(A9) the activation of the encoder's hidden layers"""
    shared_network: bool = True
    """(A10) policy and value share the encoder and the recurrent layer; off: two separate networks, each with its own memory"""

    anneal_clip_coef: bool = False
    """(X1) anneal --clip-coef linearly to 0 with the same schedule as the learning rate"""
    target_kl: float | None = None
    """(X3) stop the epochs of an update when the approximate KL of an epoch's last minibatch exceeds this; None: off"""

    bootstrap_truncated: bool = False
    """(B1) when the time limit truncates an episode, add gamma * V(final observation) to its last reward; off (the reference): truncation is treated as termination"""

    rnn: Literal["lstm", "gru"] = "lstm"
    """(B2) the recurrent layer between the encoder and the policy and value heads"""
    rnn_hidden_size: int = 128
    """(B2) the size of the recurrent layer's state"""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.batch_size


class ArgError(ValueError):
    """A bad command line: the message names the flag and the fix."""


class NonFiniteError(RuntimeError):
    """Training produced a NaN or infinity: the message names the update and the last good checkpoint."""


def distributed_setup(args: Args):
    """X2: under torchrun (which sets RANK, WORLD_SIZE and LOCAL_RANK) joins the process group, gloo on CPUs, NCCL on
    GPUs with rank r on GPU LOCAL_RANK of its node; a plain run is rank 0 of 1. Returns (rank, world_size, device)."""
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    use_cuda = torch.cuda.is_available() and args.cuda
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


def stop_requested(stop_signals, world_size, device):
    """Whether any rank has received SIGINT or SIGTERM, so that all ranks stop at the same step."""
    if world_size == 1:
        return bool(stop_signals)
    return all_ranks_mean(torch.tensor(float(bool(stop_signals)), device=device), world_size).item() > 0  # device sync


def check_args(args: Args) -> None:
    """Validates the flags and the env id before anything starts; raises ArgError with a one-line message."""
    for flag in (
        "num_envs",
        "num_steps",
        "num_minibatches",
        "update_epochs",
        "total_timesteps",
        "eval_episodes",
        "rnn_hidden_size",
    ):
        if getattr(args, flag) <= 0:
            raise ArgError(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    if args.num_envs % args.num_minibatches:
        raise ArgError(
            f"--num-minibatches {args.num_minibatches} does not divide --num-envs {args.num_envs} (minibatches are made of "
            f"whole env sequences); choose a divisor of {args.num_envs}"
        )
    if args.total_timesteps < args.batch_size:
        raise ArgError(f"--total-timesteps {args.total_timesteps} is less than one batch ({args.batch_size}); raise it")
    if args.torch_threads < 0:
        raise ArgError(f"--torch-threads {args.torch_threads}: pass a positive count, or 0 for torch's default")
    if not (0 <= args.gamma <= 1 and 0 <= args.gae_lambda <= 1):
        raise ArgError("--gamma and --gae-lambda must lie in [0, 1]")
    for flag in ("frame_skip", "frame_stack"):
        if getattr(args, flag) < 1:
            raise ArgError(f"--{flag.replace('_', '-')} must be at least 1 (1 turns it off), got {getattr(args, flag)}")
    if args.noop_max < 0:
        raise ArgError(f"--noop-max must be 0 (off) or more, got {args.noop_max}")
    if args.capture_video and args.vector_env == "envpool":
        raise ArgError("--capture-video needs frames that envpool does not render; add --vector-env sync")
    if args.noop_max == 0 and args.vector_env == "envpool":
        raise ArgError("envpool cannot turn A1 off (--noop-max 0); add --vector-env sync")
    try:
        spec = gym.spec(args.env_id)
    except gym.error.Error:
        raise ArgError(
            f"--env-id {args.env_id} is not a registered gymnasium environment; Atari games look like BreakoutNoFrameskip-v4"
        ) from None
    if not is_atari(args.env_id):
        env = gym.make(args.env_id)
        spaces = env.observation_space, env.action_space
        env.close()
        if not isinstance(spaces[1], gym.spaces.Discrete) or len(spaces[0].shape) != 1:
            raise ArgError(
                f"--env-id {args.env_id} is neither an Atari game nor an env with vector observations and discrete actions; "
                "use ppo_continuous_action.py for continuous actions"
            )
        if args.vector_env == "envpool":
            raise ArgError("--vector-env envpool runs Atari games only; add --vector-env sync")
    elif spec.kwargs.get("frameskip", 1) != 1:
        raise ArgError(
            f"--env-id {args.env_id} skips frames itself; use the NoFrameskip-v4 id of the game so that A4 "
            "(--frame-skip) does the skipping"
        )


def is_atari(env_id):
    return gym.spec(env_id).entry_point == "ale_py.env:AtariEnv"


def make_env(args: Args, idx: int, run_name: str):
    def thunk():
        if args.capture_video and idx == 0:
            env = gym.make(args.env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(args.env_id)
        if not is_atari(args.env_id):
            return gym.wrappers.RecordEpisodeStatistics(env)  # vector observations: the Atari wrappers do not apply
        if args.noop_max > 0:
            env = NoopResetEnv(env, noop_max=args.noop_max)  # A1
        if args.frame_skip > 1:
            env = MaxAndSkipEnv(env, skip=args.frame_skip)  # A4
        env = gym.wrappers.RecordEpisodeStatistics(env)  # the real game's return and length: all lives, raw rewards
        if args.episodic_life:
            env = EpisodicLifeEnv(env)  # A3
        if args.fire_reset and "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)  # A2
        if args.clip_reward_sign:
            env = ClipRewardEnv(env)  # A7
        if args.warp_frame:
            env = WarpFrame(env, width=84, height=84)  # A5
        if args.frame_stack > 1:
            env = gym.wrappers.FrameStackObservation(env, args.frame_stack)  # A6
        return env

    return thunk


class EnvpoolVectorEnv(gym.vector.VectorEnv):
    """G10's envpool backend behind the interface of the gymnasium ones. envpool runs the game and A1-A7 in C++ (set
    from the same flags) but autoresets on the step after an episode ends; here a done env is reset at once by a step
    of that env alone, so that, as with SAME_STEP, every step is a transition and the last observation is in
    infos["final_obs"]. Frames come as ([stack,] H, W, C), and the real game's return (raw rewards, all lives) and
    length in infos["final_info"]["episode"], as RecordEpisodeStatistics gives them."""

    def __init__(self, args: Args):
        import envpool

        spec = gym.spec(args.env_id)
        task_id = "".join(word.capitalize() for word in spec.kwargs["game"].split("_")) + "-v5"
        self.envs = envpool.make(
            task_id,
            env_type="gymnasium",
            num_envs=args.num_envs,
            seed=args.seed,
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

    def frames(self, obs):
        """(N, stack * C, H, W) -> (N, [stack,] H, W, C), the layout of the gymnasium backends."""
        obs = obs.reshape((len(obs), self.frame_stack, self.channels) + obs.shape[-2:]).transpose(0, 1, 3, 4, 2)
        return obs[:, 0] if self.frame_stack == 1 else obs

    def reset(self, *, seed=None, options=None):
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
        return self.frames(obs), rewards, terminations, truncations, infos

    def close(self, **kwargs):
        self.envs.close()


def make_envs(args: Args, run_name: str) -> gym.vector.VectorEnv:
    """The parallel envs (G10), each wrapped by make_env, or envpool's."""
    if args.vector_env == "envpool":
        return EnvpoolVectorEnv(args)
    thunks = [make_env(args, i, run_name) for i in range(args.num_envs)]
    vector_env = gym.vector.SyncVectorEnv if args.vector_env == "sync" else gym.vector.AsyncVectorEnv
    # SAME_STEP autoreset, as the reference's VecEnv: a step that ends an episode already returns the next episode's
    # first observation (its last one is in infos["final_obs"]), so every stored step is a real transition.
    return vector_env(thunks, autoreset_mode=AutoresetMode.SAME_STEP)


def env_statistics(envs):
    """The running statistics of the env wrappers, saved with the agent: the Atari wrappers keep none."""
    return {}


def set_env_statistics(envs, stats, frozen=False):
    """Restores env_statistics(): nothing to restore here."""


def layer_init(layer, std=np.sqrt(2), bias_const=0.0, ortho=True):
    """G9: orthogonal weights scaled by `std` and constant biases; ortho=False keeps PyTorch's default init."""
    if ortho:
        torch.nn.init.orthogonal_(layer.weight, std)
        torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs, args: Args):
        super().__init__()
        obs_shape = envs.single_observation_space.shape  # ([stack,] H, W, C) uint8 frames, or (obs_dim,) vectors
        n_actions = envs.single_action_space.n
        activation = {"tanh": nn.Tanh, "relu": nn.ReLU}[args.activation]  # A9
        ortho = args.ortho_init
        self.pixels = len(obs_shape) >= 3

        def body():  # the Nature CNN for frames (three conv layers, then 512 units), two layers of 64 for vectors
            if not self.pixels:
                return nn.Sequential(
                    layer_init(nn.Linear(obs_shape[0], 64), ortho=ortho),
                    activation(),
                    layer_init(nn.Linear(64, 64), ortho=ortho),
                    activation(),
                )
            *_, height, width, channels = obs_shape
            in_channels = int(np.prod(obs_shape)) // (height * width)
            cnn = nn.Sequential(
                layer_init(nn.Conv2d(in_channels, 32, 8, stride=4), ortho=ortho),
                activation(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2), ortho=ortho),
                activation(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1), ortho=ortho),
                activation(),
                nn.Flatten(),
            )
            n_flat = cnn(torch.zeros(1, in_channels, height, width)).shape[1]  # 3136 for 84x84
            return nn.Sequential(*cnn, layer_init(nn.Linear(n_flat, 512), ortho=ortho), activation())

        def rnn():  # B3: orthogonal weights (gain 1), zero biases
            cell = {"lstm": nn.LSTM, "gru": nn.GRU}[args.rnn](512 if self.pixels else 64, args.rnn_hidden_size)
            for name, param in cell.named_parameters():
                if ortho and "bias" in name:
                    nn.init.constant_(param, 0)
                elif ortho and "weight" in name:
                    nn.init.orthogonal_(param, 1.0)
            return cell

        self.shared_network = args.shared_network
        self.critic_body, self.critic_rnn = body(), rnn()
        self.actor_body = self.critic_body if args.shared_network else body()  # A10
        self.actor_rnn = self.critic_rnn if args.shared_network else rnn()
        self.critic = layer_init(nn.Linear(args.rnn_hidden_size, 1), std=1.0, ortho=ortho)
        self.actor = layer_init(nn.Linear(args.rnn_hidden_size, n_actions), std=0.01, ortho=ortho)
        self.scale_obs = args.scale_obs
        # the recurrent state is one tensor (cells, num_envs, hidden): h (and c for an LSTM), the actor's then the critic's
        self.cells = 2 if args.rnn == "lstm" else 1
        self.state_shape = (self.cells * (1 if args.shared_network else 2), args.rnn_hidden_size)

    def initial_state(self, num_envs, device=None):
        """B3: the recurrent state starts at zero."""
        return torch.zeros((self.state_shape[0], num_envs, self.state_shape[1]), device=device)

    def preprocess(self, x):
        """uint8 frames (N, [stack,] H, W, C) -> float (N, stack * C, H, W), scaled to [0, 1] by A8; vectors as they are."""
        if not self.pixels:
            return x.float()
        x = x.movedim(-1, -3)
        x = x.reshape((x.shape[0], -1) + x.shape[-2:]).float()
        return x / 255.0 if self.scale_obs else x  # A8

    def recur(self, body, rnn, x, state, done):
        """B3: runs the sequence x (time-major: T * N observations of N envs) through the encoder and the recurrent
        layer, from `state`; where done[t] is 1 (x[t] starts a new episode) the state is reset to zero before step t.
        The sequence is cut at the steps where any env resets and each piece runs through the layer in one call, which
        computes exactly what a step-by-step loop would. Returns the T * N outputs and the state after the last step."""
        hidden = body(x)
        hidden = hidden.reshape((-1, state.shape[1]) + hidden.shape[1:])
        done = done.reshape((-1, state.shape[1]))
        cuts = [0] + (torch.nonzero(done[1:].any(1)).flatten() + 1).tolist() + [len(done)]  # device sync
        outputs = []
        for start, end in zip(cuts[:-1], cuts[1:]):
            state = state * (1.0 - done[start]).view(1, -1, 1)
            if self.cells == 2:
                out, (hx, cx) = rnn(hidden[start:end], (state[:1].contiguous(), state[1:].contiguous()))
                state = torch.cat([hx, cx])
            else:
                out, state = rnn(hidden[start:end], state.contiguous())
            outputs.append(out)
        return torch.cat(outputs).flatten(0, 1), state

    def get_value(self, x, state, done):
        critic_state = state if self.shared_network else state[self.cells :]
        hidden, _ = self.recur(self.critic_body, self.critic_rnn, self.preprocess(x), critic_state, done)
        return self.critic(hidden)

    def get_action_and_value(self, x, state, done, action=None):
        x = self.preprocess(x)
        hidden, actor_state = self.recur(self.actor_body, self.actor_rnn, x, state[: self.cells], done)
        probs = Categorical(logits=self.actor(hidden), validate_args=False)  # a NaN goes on to the guard in train()
        if action is None:
            action = probs.sample()
        if self.shared_network:
            return action, probs.log_prob(action), probs.entropy(), self.critic(hidden), actor_state
        critic_hidden, critic_state = self.recur(self.critic_body, self.critic_rnn, x, state[self.cells :], done)
        return (
            action,
            probs.log_prob(action),
            probs.entropy(),
            self.critic(critic_hidden),
            torch.cat([actor_state, critic_state]),
        )


def compute_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda, gae=True):
    """G2: advantages and returns of a rollout shaped (num_steps, num_envs). dones[t] is 1 where obs[t] is the first
    observation of a new episode (step t-1 ended one); next_done is the same for the observation after the rollout,
    whose value next_value bootstraps the segment. gae=False: n-step returns, advantages = returns - values."""
    num_steps = rewards.shape[0]
    if gae:
        advantages = torch.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(num_steps)):
            nextnonterminal = 1.0 - (next_done if t == num_steps - 1 else dones[t + 1])
            nextvalues = next_value if t == num_steps - 1 else values[t + 1]
            delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
        returns = advantages + values
    else:
        returns = torch.zeros_like(rewards)
        next_return = next_value
        for t in reversed(range(num_steps)):
            nextnonterminal = 1.0 - (next_done if t == num_steps - 1 else dones[t + 1])
            returns[t] = next_return = rewards[t] + gamma * nextnonterminal * next_return
        advantages = returns - values
    return advantages, returns


def normalize_advantages(advantages):
    """G3, applied to each minibatch."""
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def policy_loss(newlogprob, oldlogprob, advantages, surrogate, clip_coef, kl_beta):
    """G1: the negated surrogate objective of the paper's Table 1 variant `surrogate`. The KL penalty uses the
    estimate (r - 1) - log r of KL[pi_old, pi] on the rollout's actions: non-negative, unbiased, with the exact KL's
    gradient in expectation."""
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    pg_loss = -advantages * ratio
    if surrogate == "clip":
        return torch.max(pg_loss, -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean()
    if surrogate == "unclipped":
        return pg_loss.mean()
    return pg_loss.mean() + kl_beta * ((ratio - 1) - logratio).mean()


def value_loss(newvalue, oldvalue, returns, clip_coef, clip_vloss):
    """G4: half the squared error, with clip_vloss the larger of the plain and the clipped-around-oldvalue errors."""
    v_loss = (newvalue - returns) ** 2
    if clip_vloss:
        v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -clip_coef, clip_coef)
        v_loss = torch.max(v_loss, (v_clipped - returns) ** 2)
    return 0.5 * v_loss.mean()


def adapt_kl_beta(kl_beta, kl, kl_dtarg):
    """G1 kl-adaptive: the paper's rule, applied once per update with the KL measured after it."""
    if kl < kl_dtarg / 1.5:
        return kl_beta / 2
    if kl > kl_dtarg * 1.5:
        return kl_beta * 2
    return kl_beta


def ppo_loss(agent, mb, args: Args, clip_coef, kl_beta):
    """G1, G3, G4, G5: the loss of one minibatch (a dict with the keys of the flat batch) and its logged statistics;
    KL estimates and clip fraction carry no gradient."""
    _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(  # B3: states recomputed through the sequence
        mb["obs"], mb["initial_state"], mb["dones"], mb["actions"]
    )
    logratio = newlogprob - mb["logprobs"]
    with torch.no_grad():
        ratio = logratio.exp()
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    mb_advantages = normalize_advantages(mb["advantages"]) if args.norm_adv else mb["advantages"]  # G3
    pg_loss = policy_loss(newlogprob, mb["logprobs"], mb_advantages, args.surrogate, clip_coef, kl_beta)
    v_loss = value_loss(newvalue.view(-1), mb["values"], mb["returns"], clip_coef, args.clip_vloss)
    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef  # G5
    return loss, (pg_loss.detach(), v_loss.detach(), entropy_loss.detach(), old_approx_kl, approx_kl, clipfrac)


def env_minibatches(num_steps, num_envs, num_minibatches):
    """B3: minibatches of whole env sequences: the envs are shuffled and split, each minibatch takes all steps of its
    envs. Yields (env indices, flat batch indices in time-major order)."""
    env_inds = np.arange(num_envs)
    np.random.shuffle(env_inds)
    flat_inds = np.arange(num_steps * num_envs).reshape(num_steps, num_envs)
    for mb_env_inds in np.split(env_inds, num_minibatches):
        yield mb_env_inds, flat_inds[:, mb_env_inds].ravel()


def update_policy(agent, optimizer, batch, args: Args, clip_coef, kl_beta, world_size=1, loss_fn=ppo_loss):
    """G7: `update_epochs` epochs of minibatch steps on the flat batch dict (obs, actions, logprobs, advantages,
    returns, values, dones, and initial_state, the recurrent state at the rollout's start). loss_fn: ppo_loss. Returns
    the logged statistics as tensors (no device sync here, except for X3)."""
    clipfracs = []
    for epoch in range(args.update_epochs):
        for mb_env_inds, mb_inds in env_minibatches(args.num_steps, args.num_envs, args.num_minibatches):
            mb = {key: value[mb_inds] for key, value in batch.items() if key != "initial_state"}
            mb["initial_state"] = batch["initial_state"][:, mb_env_inds]
            loss, (pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac) = loss_fn(
                agent, mb, args, clip_coef, kl_beta
            )
            clipfracs.append(clipfrac)

            optimizer.zero_grad()
            loss.backward()
            if world_size > 1:  # X2: every rank steps with the gradient averaged over all ranks' minibatches
                grads = [p.grad for p in agent.parameters() if p.grad is not None]
                averaged = all_ranks_mean(torch.cat([g.flatten() for g in grads]), world_size)
                for g, mean in zip(grads, averaged.split([g.numel() for g in grads])):
                    g.copy_(mean.view_as(g))
            if args.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # G8
            optimizer.step()

        if args.target_kl is not None and all_ranks_mean(approx_kl.clone(), world_size) > args.target_kl:  # X3 (device sync)
            break
    return {
        "value_loss": v_loss,
        "policy_loss": pg_loss,
        "entropy": entropy_loss,
        "old_approx_kl": old_approx_kl,
        "approx_kl": approx_kl,
        "clipfrac": torch.stack(clipfracs).mean(),
        "epochs": epoch + 1,
    }


def batch_kl(agent, batch):
    """The estimate of KL[pi_old, pi] over the whole batch, measured after an update (for kl-adaptive)."""
    with torch.no_grad():
        _, newlogprob, _, _, _ = agent.get_action_and_value(
            batch["obs"], batch["initial_state"], batch["dones"], batch["actions"]
        )
        logratio = newlogprob - batch["logprobs"]
        return ((logratio.exp() - 1) - logratio).mean()


def truncation_bootstrap(agent, state, infos, terminations, truncations, gamma, device):
    """B1: gamma * V(final observation) for the envs whose episode the time limit cut short, 0 for the others; the
    final observation continues the episode, from the state after its last step."""
    cut = truncations & ~terminations
    bonus = np.zeros(len(cut), dtype=np.float32)
    if cut.any():
        final_obs = torch.as_tensor(np.stack(infos["final_obs"][cut]), device=device)
        with torch.inference_mode():
            no_reset = torch.zeros(int(cut.sum()), device=device)
            bonus[cut] = gamma * agent.get_value(final_obs, state[:, cut], no_reset).flatten().cpu().numpy()  # device sync
    return bonus


def finished_episodes(infos):
    """(return, length) of each episode that ended in this step: with SAME_STEP autoreset its statistics are in
    infos["final_info"]."""
    final_info = infos.get("final_info", {})
    if "episode" not in final_info:
        return []
    done = final_info["_episode"]
    return list(zip(final_info["episode"]["r"][done].tolist(), final_info["episode"]["l"][done].tolist()))


def train(args: Args, stop_signals=()):
    """The whole run; returns the agent, the episodic returns seen and the last rollout (for tests and notebooks).
    Once `stop_signals` is non-empty (the script's SIGINT and SIGTERM handlers append to it) the run finishes the
    current env step, saves a checkpoint, closes everything and returns."""
    checkpoint = load_checkpoint(args.resume, "--resume") if args.resume else None
    if checkpoint is not None:
        changed = [
            f"--{key.replace('_', '-')}"
            for key, value in asdict(args).items()
            if key != "resume" and value != getattr(Args(), key)
        ]
        if changed:
            raise ArgError(f"--resume continues the run with its own flags; drop {' '.join(changed)}")
        args = replace(Args(**checkpoint["args"]), resume=args.resume)  # the run continues with its own flags
    check_args(args)
    rank, world_size, device = distributed_setup(args)  # X2
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    run_name = checkpoint["run_name"] if checkpoint else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    if world_size > 1:
        shared = [run_name]
        dist.broadcast_object_list(shared, src=0)  # X2: rank 0's run name everywhere
        run_name = shared[0]
    track = args.track and rank == 0  # X2: only rank 0 logs, records videos and writes checkpoints
    num_iterations = args.total_timesteps // (args.batch_size * world_size)
    checkpoint_path = f"runs/{run_name}/agent.pt"
    checkpoint_interval = args.checkpoint_interval if args.checkpoint_interval is not None else 100 * args.save_model
    if track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=asdict(args),
            name=run_name,
            save_code=True,
            id=checkpoint["wandb_id"] if checkpoint else None,
            resume="allow",
        )
    # on resume, TensorBoard hides whatever the interrupted run logged after its checkpoint, so no step appears twice
    writer = (
        SummaryWriter(f"runs/{run_name}", purge_step=checkpoint["global_step"] + 1 if checkpoint else None)
        if rank == 0
        else None
    )
    if checkpoint is None and rank == 0:
        writer.add_text(
            "hyperparameters",
            "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in asdict(args).items()])),
        )

    random.seed(args.seed + rank)  # X2: each rank draws its own numbers
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed + rank)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    envs = make_envs(replace(args, capture_video=args.capture_video and rank == 0), run_name)
    agent = Agent(envs, args).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=True)  # G11
    start_iteration, global_step, kl_beta = 1, 0, args.kl_beta
    if checkpoint is not None:
        agent.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        set_env_statistics(envs, checkpoint["env_stats"])
        set_rng_state(checkpoint["rng"])  # rank 0's; the other ranks draw their own numbers
        if rank > 0:
            random.seed(args.seed + rank + checkpoint["global_step"])
            np.random.seed(args.seed + rank + checkpoint["global_step"])
            torch.manual_seed(args.seed + rank + checkpoint["global_step"])
        start_iteration, global_step, kl_beta = checkpoint["iteration"] + 1, checkpoint["global_step"], checkpoint["kl_beta"]
        print(f"resumed {run_name} after update {checkpoint['iteration']} (step {global_step}); the envs start new episodes")
    if world_size > 1:
        for param in agent.parameters():
            dist.broadcast(param.data, src=0)  # X2: all ranks start from rank 0's parameters

    # storage; dones[t] = 1 where obs[t] is the first observation of a new episode (step t-1 ended one)
    obs_dtype = torch.uint8 if envs.single_observation_space.dtype == np.uint8 else torch.float32  # frames stay bytes
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=obs_dtype, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    dones = torch.zeros((args.num_steps, args.num_envs), device=device)
    values = torch.zeros((args.num_steps, args.num_envs), device=device)

    start_time = last_print = time.time()
    sps = 0  # env steps per second since the start (or the resume), over all ranks
    start_step, done_iteration, done_step = global_step, start_iteration - 1, global_step  # done_*: the last finished update
    episodic_returns, recent_returns, videos_logged = [], deque(maxlen=20), set()
    wandb_id = wandb.run.id if track else None
    stopping = False  # whether a rank received SIGINT or SIGTERM
    next_obs, _ = envs.reset(seed=args.seed + rank * args.num_envs + global_step)  # env i of rank r: seed + r * num_envs + i
    next_obs = torch.as_tensor(next_obs, device=device)
    next_done = torch.zeros(args.num_envs, device=device)
    next_state = initial_state = agent.initial_state(args.num_envs, device)  # B3

    for iteration in range(start_iteration, num_iterations + 1):
        frac = 1.0 - (iteration - 1.0) / num_iterations
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate  # G6
        clip_coef = frac * args.clip_coef if args.anneal_clip_coef else args.clip_coef  # X1
        initial_state = next_state.clone()  # B3: training recomputes the states from here

        episodes, stopping = [], False  # (global_step, return, length) of the episodes that end in this rollout
        for step in range(args.num_steps):
            global_step += args.num_envs * world_size  # X2: the steps of all ranks
            obs[step] = next_obs
            dones[step] = next_done
            with torch.inference_mode():
                action, logprob, _, value, next_state = agent.get_action_and_value(next_obs, next_state, next_done)
            values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())  # device sync
            if args.bootstrap_truncated:
                reward = reward + truncation_bootstrap(
                    agent, next_state, infos, terminations, truncations, args.gamma, device
                )  # B1
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device)
            next_obs = torch.as_tensor(next_obs, device=device)  # uint8: a quarter of float32's memory
            next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32, device=device)
            episodes += [(global_step, r, length) for r, length in finished_episodes(infos)]
            if world_size == 1 or step == args.num_steps - 1:  # X2: ranks agree once per rollout, not every step
                stopping = stop_requested(stop_signals, world_size, device)
            if stopping:
                break
        if stopping:
            break  # the unfinished rollout is dropped; the checkpoint below is the last finished update

        with torch.no_grad():
            next_value = agent.get_value(next_obs, next_state, next_done).reshape(1, -1)
            advantages, returns = compute_gae(
                rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda, args.gae
            )

        batch = {
            "obs": obs.reshape((-1,) + envs.single_observation_space.shape),
            "actions": actions.reshape(-1),
            "logprobs": logprobs.reshape(-1),
            "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1),
            "values": values.reshape(-1),
            "dones": dones.reshape(-1),
            "initial_state": initial_state,
        }
        stats = update_policy(agent, optimizer, batch, args, clip_coef, kl_beta, world_size)
        losses = torch.stack([stats["value_loss"], stats["policy_loss"], stats["entropy"]])
        if not (torch.isfinite(losses).all() and all(torch.isfinite(p).all() for p in agent.parameters())):  # device sync
            envs.close()
            if writer is not None:
                writer.close()
            last_good = checkpoint_path if os.path.exists(checkpoint_path) else "none written yet"
            raise NonFiniteError(
                f"a loss or a parameter became NaN or infinite in update {iteration} (step {global_step}); training stopped "
                f"and wrote no checkpoint; the last good one: {last_good}"
            )
        if args.surrogate == "kl-adaptive":
            kl_beta = adapt_kl_beta(kl_beta, all_ranks_mean(batch_kl(agent, batch), world_size).item(), args.kl_dtarg)  # G1

        if world_size > 1:
            gathered = [None] * world_size
            dist.all_gather_object(gathered, episodes)  # X2: rank 0 logs the episodes of every rank
            episodes = sorted(episode for rank_episodes in gathered for episode in rank_episodes)
        episodic_returns += [r for _, r, _ in episodes]
        recent_returns.extend(r for _, r, _ in episodes)
        y_pred, y_true = batch["values"].cpu().numpy(), batch["returns"].cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        sps = int((global_step - start_step) / (time.time() - start_time))
        if rank == 0:
            for step_of_end, episodic_return, episodic_length in episodes:
                writer.add_scalar("charts/episodic_return", episodic_return, step_of_end)
                writer.add_scalar("charts/episodic_length", episodic_length, step_of_end)
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("charts/clip_coef", clip_coef, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            if args.surrogate in ("kl-fixed", "kl-adaptive"):
                writer.add_scalar("charts/kl_beta", kl_beta, global_step)
            for key in ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac"):
                writer.add_scalar(f"losses/{key}", stats[key].item(), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)
            if time.time() - last_print > 10 or iteration == num_iterations:
                last_print = time.time()
                mean_return = f"{np.mean(recent_returns):.1f}" if recent_returns else "n/a"
                print(
                    f"step {global_step}/{args.total_timesteps}  SPS {sps}  mean return (last {len(recent_returns)}) {mean_return}"
                )
            if track and args.capture_video:
                videos_logged = log_videos(run_name, videos_logged)
        done_iteration, done_step = iteration, global_step
        if rank == 0 and checkpoint_interval and iteration % checkpoint_interval == 0:
            save_checkpoint(checkpoint_path, agent, optimizer, envs, args, run_name, iteration, global_step, kl_beta, wandb_id)

    if rank == 0 and (stopping or args.save_model or checkpoint_interval):
        save_checkpoint(checkpoint_path, agent, optimizer, envs, args, run_name, done_iteration, done_step, kl_beta, wandb_id)
        print(f"saved the agent after update {done_iteration} (step {done_step}) to {checkpoint_path}")
    if rank == 0 and stopping:
        print(f"stopped by a signal; continue with: python {os.path.basename(__file__)} --resume {checkpoint_path}")
    envs.close()
    if track and args.capture_video:
        log_videos(run_name, videos_logged)
    if writer is not None:
        writer.close()
    if track:
        wandb.finish()
    if world_size > 1:
        dist.barrier()  # no rank leaves while another still talks to it
        dist.destroy_process_group()
    rollout = {"obs": obs, "actions": actions, "logprobs": logprobs, "rewards": rewards, "dones": dones, "values": values}
    rollout["initial_state"] = initial_state
    return {"agent": agent, "run_name": run_name, "episodic_returns": episodic_returns, "rollout": rollout, "sps": sps}


def log_videos(run_name, logged):
    """Sends the finished videos of env 0 to wandb (gymnasium's RecordVideo and wandb's monitor_gym do not mix)."""
    import wandb

    for path in sorted(glob(f"videos/{run_name}/*.mp4")):
        if path not in logged:
            wandb.log({"videos": wandb.Video(path, format="mp4")})
            logged = logged | {path}
    return logged


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
}


def save_checkpoint(path, agent, optimizer, envs, args, run_name, iteration, global_step, kl_beta, wandb_id):
    """Everything needed to act and to continue training, written to a temporary file and renamed: an interrupted
    write leaves the previous checkpoint whole."""
    checkpoint = {
        "script": os.path.basename(__file__),
        "model": agent.state_dict(),
        "optimizer": optimizer.state_dict(),
        "env_stats": env_statistics(envs),
        "rng": rng_state(),
        "args": asdict(args),
        "run_name": run_name,
        "iteration": iteration,
        "global_step": global_step,
        "kl_beta": kl_beta,
        "wandb_id": wandb_id,
    }
    torch.save(checkpoint, path + ".tmp")
    os.replace(path + ".tmp", path)


def load_checkpoint(path, flag):
    """A checkpoint save_checkpoint wrote, loaded without executing code (weights_only); ArgError naming `flag` if the
    file is missing, truncated or foreign."""
    if not os.path.isfile(path):
        raise ArgError(f"{flag} {path}: no such file; pass an agent.pt written under runs/ by --save-model or a checkpoint")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ArgError(f"{flag} {path} is not a readable checkpoint ({type(e).__name__}); use another one") from None
    if not isinstance(checkpoint, dict) or not CHECKPOINT_KEYS <= checkpoint.keys():
        raise ArgError(f"{flag} {path} was not written by {os.path.basename(__file__)}")
    if checkpoint["script"] != os.path.basename(__file__):
        raise ArgError(f"{flag} {path} was written by {checkpoint['script']}; load it with that script")
    return checkpoint


def evaluate(args: Args):
    """Plays --eval-episodes whole games with the saved agent (actions sampled, as in training); returns their
    returns."""
    checkpoint = load_checkpoint(args.eval_checkpoint, "--eval-checkpoint")
    train_args = replace(
        Args(**checkpoint["args"]), num_envs=1, num_minibatches=1, capture_video=args.capture_video, seed=args.seed
    )
    check_args(train_args)
    run_name = f"{train_args.env_id}__{args.exp_name}-eval__{args.seed}__{int(time.time())}"
    torch.manual_seed(args.seed)
    envs = make_envs(train_args, run_name)
    agent = Agent(envs, train_args)
    agent.load_state_dict(checkpoint["model"])
    set_env_statistics(envs, checkpoint["env_stats"], frozen=True)

    episodic_returns = []
    next_obs, _ = envs.reset(seed=args.seed)
    next_state, next_done = agent.initial_state(1), torch.zeros(1)
    while len(episodic_returns) < args.eval_episodes:
        with torch.inference_mode():
            action, _, _, _, next_state = agent.get_action_and_value(torch.as_tensor(next_obs), next_state, next_done)
        next_obs, _, terminations, truncations, infos = envs.step(action.numpy())
        next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32)
        episodic_returns += [episodic_return for episodic_return, _ in finished_episodes(infos)]
    envs.close()
    print(
        f"eval {args.eval_checkpoint}: mean return {np.mean(episodic_returns):.1f} +- {np.std(episodic_returns):.1f} over {len(episodic_returns)} episodes"
    )
    return episodic_returns


if __name__ == "__main__":
    args = tyro.cli(Args)
    stop_signals = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: stop_signals.append(signum))
    try:
        evaluate(args) if args.eval_checkpoint else train(args, stop_signals)
    except (ArgError, NonFiniteError) as e:
        sys.exit(f"error: {e}")
