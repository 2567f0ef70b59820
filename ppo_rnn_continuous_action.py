"""Recurrent PPO for continuous actions (LSTM or GRU): ppo_continuous_action.py plus memory (B2) and the
recurrent details (B3) of ppo_rnn.py, and nothing else: every general, MuJoCo, auxiliary and truncation detail
keeps its flag and meaning. B3 makes minibatches of whole env sequences, so the batch comes from 32 envs of 64
steps (the feed-forward script's 2048 steps and 32 minibatches of 64). What is not PPO is in the package
ppo_utils/ beside it (the run's life cycle, checkpoints, flag checks); of the details it carries only X2's
averaging, called from train().

    python ppo_rnn_continuous_action.py --env-id Hopper-v5 --mask-velocity --total-timesteps 1000000
"""

import os
import random
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import tyro
from gymnasium.vector import AutoresetMode
from torch.distributions.beta import Beta
from torch.distributions.normal import Normal

from ppo_utils.checkpoints import Update, restore, resume_flags
from ppo_utils.command_line import main
from ppo_utils.distributed import (
    all_ranks_mean,
    average_env_statistics,
    average_gradients,
    broadcast_parameters,
)
from ppo_utils.distributed import distributed_setup, launched_processes, rank_seed
from ppo_utils.envpool_backend import EnvpoolMujoco
from ppo_utils.flag_checks import ArgError, check_args, check_envpool
from ppo_utils.lean import RunningMeanStd, forward
from ppo_utils.run import Run


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]  # in runs/{env_id}__{exp_name}__{seed}__{time}
    seed: int = 1  # seed of python, numpy, torch and the envs (env i gets seed + i), in 0 .. 2**32 - 1
    torch_deterministic: bool = True  # sets `torch.backends.cudnn.deterministic`
    cuda: bool = True  # use CUDA when a GPU is present (the CPU otherwise)
    torch_threads: int = 1  # torch's CPU threads; 0: one per core (1 suits these small MLPs best)
    tf32: bool = False  # GPU matmuls, convolutions in TensorFloat-32 (10-bit mantissa, faster); off: float32
    fused_adam: bool = True  # Adam's fused kernel (the same steps up to rounding); off: PyTorch's default
    track: bool = False  # log to wandb too (config, code, scalars, videos); WANDB_MODE=offline works
    wandb_project_name: str = "ppo-details"  # the wandb project
    wandb_entity: str | None = None  # the wandb entity (team); None: your default entity
    capture_video: bool = False  # videos of env 0 in runs/{run_name}/videos (MUJOCO_GL=egl; not with envpool)
    save_model: bool = True  # save runs/{run_name}/agent.pt at the end: the agent, all it needs to train on
    checkpoint_interval: int | None = None  # updates per checkpoint, 0: none; None: 100 if --save-model, or 0
    resume: str | None = None  # continue this agent.pt's run (its flags, schedules, statistics, RNG states)
    eval_checkpoint: str | None = None  # play this agent.pt instead of training and report its mean return
    eval_episodes: int = 10  # how many episodes --eval-checkpoint plays

    env_id: str = "Hopper-v5"  # a gymnasium environment with a continuous (Box) action space
    mask_velocity: bool = False  # observe positions only, no velocities (v5 MuJoCo tasks, Pendulum-v1)
    total_timesteps: int = 1_000_000  # environment steps of the whole run, summed over the parallel envs
    num_envs: int = 32  # (G10) number of parallel environments
    num_steps: int = 64  # (G10) steps per environment in each rollout (the paper's horizon T)
    vector_env: Literal["sync", "async", "envpool"] = "sync"  # (G10) gymnasium sync, async, or envpool (C++)

    surrogate: Literal["clip", "unclipped", "kl-fixed", "kl-adaptive", "spo"] = "clip"  # (G1) Table 1, SPO
    clip_coef: float = 0.2  # (G1, G4) the clip range epsilon of the surrogate (SPO's too) and value loss, > 0
    kl_beta: float = 1.0  # (G1) the KL penalty coefficient beta, > 0 (the initial one for kl-adaptive)
    kl_dtarg: float = 0.01  # (G1) the target KL d_targ of kl-adaptive
    gae: bool = True  # (G2) generalized advantage estimation; off: n-step returns bootstrapped at rollout end
    gamma: float = 0.99  # (G2) the discount factor gamma, in [0, 1]
    gae_lambda: float = 0.95  # (G2) the GAE lambda, in [0, 1]
    norm_adv: bool = True  # (G3) normalize each minibatch's advantages to mean 0, std 1; off: as computed
    clip_vloss: bool = True  # (G4) clip the value loss around the rollout's values; off: plain squared error
    ent_coef: float = 0.0  # (G5) the coefficient of the entropy bonus in the loss; 0 turns it off
    vf_coef: float = 0.5  # (G5) the coefficient of the value loss in the loss
    anneal_lr: bool = True  # (G6) anneal the learning rate linearly to 0 over the run; off: constant
    learning_rate: float = 3e-4  # (G6) the Adam learning rate (at the start of the run)
    num_minibatches: int = 32  # (G7) minibatches per epoch; 1 = the full batch
    update_epochs: int = 10  # (G7) epochs over each rollout
    max_grad_norm: float = 0.5  # (G8) clip the global L2 norm of all gradients to this value; 0 turns it off
    ortho_init: bool = True  # (G9) orthogonal init (gain sqrt(2), policy 0.01, value 1); off: PyTorch's init
    adam_eps: float = 1e-5  # (G11) the epsilon of Adam (PyTorch's default is 1e-8)

    norm_obs: bool = True  # (M1) normalize observations by running statistics of all envs and ranks; off: raw
    clip_obs: float = 10.0  # (M2) clip normalized observations to +-clip_obs; 0 (or --no-norm-obs): off
    norm_reward: bool = True  # (M3) divide rewards by the running std of a discounted return; off: raw
    clip_reward: float = 10.0  # (M4) clip scaled rewards to +-clip_reward; 0 (or --no-norm-reward): off
    norm_per_env: bool = False  # (M1, M3) statistics per env (gymnasium's wrappers, as CleanRL); off: shared
    state_dependent_std: bool = False  # (M5) the log-std from a network head; off: a state-independent one
    log_std_init: float = 0.0  # (M5) the initial log-std (the bias of the head with --state-dependent-std)
    activation: Literal["tanh", "relu"] = "tanh"  # (M6) the activation of the hidden layers
    shared_network: bool = False  # (M7) policy and value share hidden layers; off (reference): two networks
    clip_action: bool = True  # (M8) clip the env's actions to its space (the raw sample stored); off: raw
    action_dist: Literal["gaussian", "tanh-gaussian", "beta"] = "gaussian"  # (M9) the last two bounded

    anneal_clip_coef: bool = False  # (X1) anneal --clip-coef linearly to 0 like --anneal-lr; off: constant
    target_kl: float | None = None  # (X3) end the update when an epoch's last approx KL exceeds it; None: off
    kl_adaptive_lr: bool = False  # (X4) set the learning rate by each epoch's mean approx KL, not by G6
    desired_kl: float = 0.008  # (X4) above twice this KL the rate is divided by 1.5, below half multiplied
    min_lr: float = 1e-6  # (X4) the learning rate's lower bound
    max_lr: float = 1e-2  # (X4) the learning rate's upper bound
    norm_value: bool = False  # (X5) the critic learns returns standardized by running statistics; off: raw

    bootstrap_truncated: bool = False  # (B1) truncated: reward + gamma * V(final obs); off: as terminations

    rnn: Literal["lstm", "gru"] = "lstm"  # (B2) the recurrent layer, between the encoder and the two heads
    rnn_hidden_size: int = 128  # (B2) the size of the recurrent layer's state

    # what ppo_utils reads besides the flags (ppo_utils/contract.py)
    script: ClassVar[str] = os.path.basename(__file__)
    env_kinds: ClassVar[tuple] = ("continuous",)
    eval_flags: ClassVar[dict] = {"num_envs": 1, "num_minibatches": 1, "norm_adv": False}
    flag_rules: ClassVar[dict] = {
        "clip_obs": (lambda v: v >= 0, "pass a bound > 0, or 0 to turn M2 off"),
        "clip_reward": (lambda v: v >= 0, "pass a bound > 0, or 0 to turn M4 off"),
        "desired_kl": (lambda v: v > 0, "pass a target KL > 0"),
        "min_lr": (lambda v: v > 0, "pass a learning rate > 0"),
        "max_lr": (lambda v: v > 0, "pass a learning rate > 0"),
        "rnn_hidden_size": (lambda v: v >= 1, "pass a positive size"),
    }
    observation_flags: ClassVar[dict] = {"mask_velocity": "velocities hidden"}

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_iterations(self) -> int:
        """the run's updates: the step budget over the batches of all processes (X2: one per torchrun rank)"""
        return self.total_timesteps // (self.batch_size * launched_processes())

    def check(self, world_size: int, kind: str):
        """How this script's flags fit together, for `world_size` processes (X2) on an env of `kind`; ArgError
        for the first misfit (flag_checks.check_args calls it, then checks every script's batch)."""
        if self.num_envs % self.num_minibatches:  # B3
            raise ArgError(
                f"--num-minibatches {self.num_minibatches} does not divide "
                f"--num-envs {self.num_envs} (minibatches are made "
                f"of whole env sequences); choose a divisor of {self.num_envs}"
            )
        if self.mask_velocity and self.env_id not in POSITIONS:
            raise ArgError(
                f"--mask-velocity knows the positions of {', '.join(POSITIONS)}; "
                f"leave it off for {self.env_id}"
            )
        if self.vector_env == "envpool":  # G10
            check_envpool(self.env_id, kind, self.capture_video)
        if self.norm_per_env and self.vector_env != "sync":
            raise ArgError(
                "--norm-per-env keeps the statistics in each env, where checkpoints reach them "
                "with --vector-env sync only; add --vector-env sync"
            )
        if self.norm_per_env and world_size > 1:
            raise ArgError(
                "--norm-per-env keeps statistics per env, which torchrun's ranks (X2) "
                "do not merge; drop one of them"
            )
        if self.kl_adaptive_lr and self.anneal_lr:
            raise ArgError("--kl-adaptive-lr (X4) sets the learning rate itself; add --no-anneal-lr (G6)")
        if self.kl_adaptive_lr and self.min_lr > self.max_lr:
            raise ArgError(f"--min-lr {self.min_lr} is above --max-lr {self.max_lr}; pass a lower --min-lr")
        if self.action_dist == "beta" and (self.state_dependent_std or self.log_std_init != 0.0):
            raise ArgError(
                "--action-dist beta (M9) has no log-std; drop --state-dependent-std and --log-std-init"
            )


# --mask-velocity: the entries of each task's observation that are positions (a v5 MuJoCo task's qpos part:
# coordinates and joint angles), the rest (velocities, and Ant's and Humanoid's forces) dropped
POSITIONS = {
    "Pendulum-v1": range(2),  # of 3: the cosine and sine of the angle
    "HalfCheetah-v5": range(8),  # of 17
    "Hopper-v5": range(5),  # of 11
    "Walker2d-v5": range(8),  # of 17
    "Swimmer-v5": range(3),  # of 8
    "Ant-v5": range(13),  # of 105
    "Humanoid-v5": range(22),  # of 348
    "HumanoidStandup-v5": range(22),  # of 348
    "InvertedPendulum-v5": range(2),  # of 4
    "InvertedDoublePendulum-v5": range(5),  # of 9: the cart, the two angles' sines and cosines
    "Reacher-v5": [0, 1, 2, 3, 4, 5, 8, 9],  # of 10: angle cosines, sines, target, fingertip offset
    "Pusher-v5": [*range(7), *range(14, 23)],  # of 23: joint angles, fingertip, object, goal
}


def make_env(args: Args, idx: int, video_folder: str | None):
    def thunk():
        if args.capture_video and idx == 0:
            os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering
            env = gym.make(args.env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_folder)
        else:
            env = gym.make(args.env_id)
        if args.mask_velocity:
            keep, space = list(POSITIONS[args.env_id]), env.observation_space
            space = gym.spaces.Box(space.low[keep], space.high[keep], dtype=space.dtype)
            env = gym.wrappers.TransformObservation(env, lambda obs: obs[keep], space)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # the episode's return, before any scaling
        if args.norm_per_env and args.norm_obs:  # M1, M2 per env (CleanRL's placement)
            env = gym.wrappers.NormalizeObservation(env)
            if args.clip_obs > 0:
                clip = lambda obs: np.clip(obs, -args.clip_obs, args.clip_obs)
                env = gym.wrappers.TransformObservation(env, clip, env.observation_space)
        if args.norm_per_env and args.norm_reward:  # M3, M4 per env
            env = gym.wrappers.NormalizeReward(env, gamma=args.gamma)
            env = (
                gym.wrappers.ClipReward(env, -args.clip_reward, args.clip_reward)
                if args.clip_reward > 0
                else env
            )
        return env

    return thunk


def make_envs(args: Args, video_folder: str | None = None) -> gym.vector.VectorEnv:
    """The parallel envs (G10) and the reference's vector-level wrappers, in the reference's order. Autoreset
    is SAME_STEP, as the reference's VecEnv: a step that ends an episode returns the next one's first
    observation (its last one is in infos["final_obs"]), so every stored step is a real transition."""
    if args.vector_env == "envpool":
        envs = EnvpoolMujoco(
            args.env_id, args.num_envs, list(POSITIONS[args.env_id]) if args.mask_velocity else None
        )
    else:
        thunks = [make_env(args, i, video_folder) for i in range(args.num_envs)]
        vector_env = gym.vector.SyncVectorEnv if args.vector_env == "sync" else gym.vector.AsyncVectorEnv
        envs = vector_env(thunks, autoreset_mode=AutoresetMode.SAME_STEP)
    if args.action_dist != "gaussian":  # M9: a bounded sample ([0, 1] a Beta's), rescaled to the env's bounds
        low = np.float32(0.0 if args.action_dist == "beta" else -1.0)
        envs = gym.wrappers.vector.RescaleAction(envs, low, np.float32(1.0))
    if args.clip_action:
        envs = gym.wrappers.vector.ClipAction(envs)  # M8
    if args.action_dist == "tanh-gaussian":
        envs = gym.wrappers.vector.TransformAction(envs, np.tanh)  # M9: the env gets tanh of the sample
    if args.norm_per_env:
        return envs  # M1-M4 are in each env (make_env)
    if args.norm_obs:
        envs = NormalizeObservation(envs, clip=args.clip_obs)  # M1, M2
    if args.norm_reward:
        # M3 as gymnasium does it, unlike the reference at a termination only: the discounted return restarts
        # before the terminating step's reward counts, the reference's after it (time-limit ends are the same)
        envs = gym.wrappers.vector.NormalizeReward(envs, gamma=args.gamma)
        envs.return_rms = RunningMeanStd(shape=())  # updated faster (ppo_utils/lean.py)
    if args.norm_reward and args.clip_reward > 0:
        envs = gym.wrappers.vector.ClipReward(envs, -args.clip_reward, args.clip_reward)  # M4
    return envs


class NormalizeObservation(gym.vector.VectorWrapper):
    """M1 and M2 as the reference's VecNormalize does them: one running mean/variance shared by all envs,
    updated with each batch of observations the agent sees, then clipping. gymnasium's own vector
    NormalizeObservation refuses the SAME_STEP autoreset used here, and would leave infos["final_obs"]
    unnormalized: this one normalizes it with the same statistics (without counting it, as the reference never
    sees it), so that B1 bootstraps from what the value network was trained on."""

    def __init__(self, env: gym.vector.VectorEnv, clip: float, epsilon: float = 1e-8):
        super().__init__(env)
        self.single_observation_space = gym.spaces.Box(
            -np.inf, np.inf, env.single_observation_space.shape, np.float32
        )
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, env.num_envs)
        self.obs_rms = RunningMeanStd(shape=env.single_observation_space.shape)
        self.clip, self.epsilon, self.update_running_mean = clip, epsilon, True

    def normalize(self, obs):
        obs = (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)
        return (np.clip(obs, -self.clip, self.clip) if self.clip > 0 else obs).astype(np.float32)

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


def layer_init(layer, std=np.sqrt(2), bias_const=0.0, ortho=True):
    """G9: orthogonal weights scaled by `std`, constant biases; ortho=False keeps PyTorch's default init."""
    if ortho:
        torch.nn.init.orthogonal_(layer.weight, std)
        torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class ValueNorm(nn.Module):
    """X5: the running mean and variance of the returns the critic learns (gymnasium's RunningMeanStd, in
    buffers that the agent's checkpoint holds); the critic outputs values standardized by them, which
    forward(x, inverse=True) turns into the rewards' units. Only train() updates them: an evaluated
    checkpoint keeps its own. skrl's RunningStandardScaler also counts the rollout's values and clips at 5."""

    def __init__(self, epsilon=1e-8):
        super().__init__()
        self.epsilon = epsilon
        self.register_buffer("mean", torch.zeros(()))
        self.register_buffer("var", torch.ones(()))
        self.register_buffer("count", torch.tensor(1e-4))

    def update(self, returns, world_size=1):
        """Adds the returns of every rank (X2: each rank gets the same statistics)."""
        batch_mean = all_ranks_mean(returns.mean(), world_size)
        batch_var = all_ranks_mean((returns - batch_mean).square().mean(), world_size)
        batch_count = returns.numel() * world_size
        delta, total = batch_mean - self.mean, self.count + batch_count
        m2 = self.var * self.count + batch_var * batch_count
        m2 = m2 + delta.square() * self.count * batch_count / total
        self.mean += delta * batch_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, x, inverse=False):
        std = torch.sqrt(self.var + self.epsilon)
        return x * std + self.mean if inverse else (x - self.mean) / std


class Agent(nn.Module):
    def __init__(self, envs, args: Args):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        act_dim = int(np.prod(envs.single_action_space.shape))
        activation = {"tanh": nn.Tanh, "relu": nn.ReLU}[args.activation]  # M6
        ortho = args.ortho_init

        def body():
            return nn.Sequential(
                layer_init(nn.Linear(obs_dim, 64), ortho=ortho),
                activation(),
                layer_init(nn.Linear(64, 64), ortho=ortho),
                activation(),
            )

        def rnn():  # B2, B3: orthogonal (gain 1), zero biases, --no-ortho-init (G9) too
            cell = {"lstm": nn.LSTM, "gru": nn.GRU}[args.rnn](64, args.rnn_hidden_size)
            for name, param in cell.named_parameters():
                if "bias" in name:
                    nn.init.constant_(param, 0)
                elif "weight" in name:
                    nn.init.orthogonal_(param, 1.0)
            return cell

        # ppo_continuous_action.py's build order (the critic whole, then the actor), each body before its LSTM
        self.shared_network = args.shared_network
        self.critic_body, self.critic_rnn = body(), rnn()
        self.critic = layer_init(nn.Linear(args.rnn_hidden_size, 1), std=1.0, ortho=ortho)
        self.actor_body = self.critic_body if args.shared_network else body()  # M7
        self.actor_rnn = self.critic_rnn if args.shared_network else rnn()
        self.action_dist = args.action_dist
        heads = 2 if args.action_dist == "beta" else 1  # M9: a Beta's two parameters from the mean's head
        self.actor_mean = layer_init(nn.Linear(args.rnn_hidden_size, heads * act_dim), std=0.01, ortho=ortho)
        self.state_dependent_std = args.state_dependent_std
        if args.state_dependent_std:  # M5 ablation
            self.actor_logstd = layer_init(
                nn.Linear(args.rnn_hidden_size, act_dim), std=0.01, bias_const=args.log_std_init, ortho=ortho
            )
        elif args.action_dist != "beta":  # M5
            self.actor_logstd = nn.Parameter(torch.full((1, act_dim), args.log_std_init))
        self.value_norm = ValueNorm() if args.norm_value else None  # X5
        self.num_state_tensors = 2 if args.rnn == "lstm" else 1  # rows per network: h (and c)
        rows = self.num_state_tensors * (1 if args.shared_network else 2)  # actor, then critic
        self.state_shape = (rows, args.rnn_hidden_size)

    def initial_state(self, num_envs, device=None):
        """B3: the recurrent state starts at zero."""
        return torch.zeros((self.state_shape[0], num_envs, self.state_shape[1]), device=device)

    def recur(self, body, rnn, x, state, done):
        """B3: runs x (T * N observations of N envs, time-major) through the encoder and the recurrent layer
        from `state`, which is reset to zero before each step t where done[t] is 1. Cut at the steps where any
        env resets, each piece runs in one call: exactly what a step-by-step loop computes. Returns the T * N
        outputs and the last state."""
        hidden = body(x)
        hidden = hidden.reshape((-1, state.shape[1]) + hidden.shape[1:])
        done = done.reshape((-1, state.shape[1]))
        cuts = [0] + (torch.nonzero(done[1:].any(1)).flatten() + 1).tolist() + [len(done)]
        outputs = []
        for start, end in zip(cuts[:-1], cuts[1:]):
            state = state * (1.0 - done[start]).view(1, -1, 1)
            if self.num_state_tensors == 2:
                out, (hx, cx) = rnn(hidden[start:end], (state[:1].contiguous(), state[1:].contiguous()))
                state = torch.cat([hx, cx])
            else:
                out, state = rnn(hidden[start:end], state.contiguous())
            outputs.append(out)
        return torch.cat(outputs).flatten(0, 1), state

    def get_value(self, x, state, done):
        hidden, _ = self.recur(self.critic_body, self.critic_rnn, x, state[-self.num_state_tensors :], done)
        value = self.critic(hidden)
        return value if self.value_norm is None else self.value_norm(value, inverse=True)  # X5

    def get_action_and_value(self, x, state, done, action=None):
        hidden, next_state = self.recur(
            self.actor_body, self.actor_rnn, x, state[: self.num_state_tensors], done
        )
        action_mean = forward(self.actor_mean, hidden)
        if not self.shared_network:
            critic_hidden, critic_state = self.recur(
                self.critic_body, self.critic_rnn, x, state[self.num_state_tensors :], done
            )
            next_state = torch.cat([next_state, critic_state])  # the actor's rows first
        value = self.critic(hidden if self.shared_network else critic_hidden)
        if self.value_norm is not None:
            value = self.value_norm(value, inverse=True)  # X5: in the rewards' units
        if self.action_dist == "beta":  # M9: both parameters above 1, a density with one mode
            alpha, beta = (nn.functional.softplus(action_mean) + 1).chunk(2, -1)
            probs = Beta(alpha, beta, validate_args=False)
            if action is None:
                action = probs.sample()
            logprob = probs.log_prob(action.clamp(1e-6, 1 - 1e-6)).sum(1)
            return action, logprob, probs.entropy().sum(1), value, next_state
        if self.state_dependent_std:
            action_logstd = forward(self.actor_logstd, hidden)
        else:
            action_logstd = self.actor_logstd.expand_as(action_mean)
        # a NaN goes on to train()'s guard
        probs = Normal(action_mean, action_logstd.exp(), validate_args=False)
        if action is None:  # probs.sample()'s draw: the same standard normals, scaled and shifted
            action = action_mean + probs.scale * torch.randn_like(action_mean)
        logprob = probs.log_prob(action).sum(1)
        if self.action_dist == "tanh-gaussian":  # M9: tanh's change of variables; no closed-form entropy
            logprob = logprob - torch.log(1 - torch.tanh(action).square() + 1e-6).sum(1)
            return action, logprob, -logprob, value, next_state
        return action, logprob, probs.entropy().sum(1), value, next_state


def compute_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda, gae=True):
    """G2: advantages and returns of a rollout shaped (num_steps, num_envs). dones[t] is 1 where obs[t] is the
    first observation of a new episode (step t-1 ended one); next_done is the same for the observation after
    the rollout, whose value next_value bootstraps the segment. gae=False: n-step returns, and advantages the
    returns minus the values. The scan runs in numpy on the host (a torch op per step costs 5x as much; the
    float32 arithmetic is the same)."""
    device = values.device
    rewards, values, dones, next_value, next_done = (
        x.cpu().numpy() for x in (rewards, values, dones, next_value, next_done)
    )
    num_steps = rewards.shape[0]
    if gae:
        advantages = np.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(num_steps)):
            nextnonterminal = 1.0 - (next_done if t == num_steps - 1 else dones[t + 1])
            nextvalues = next_value if t == num_steps - 1 else values[t + 1]
            delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
        returns = advantages + values
    else:
        returns = np.zeros_like(rewards)
        next_return = next_value
        for t in reversed(range(num_steps)):
            nextnonterminal = 1.0 - (next_done if t == num_steps - 1 else dones[t + 1])
            returns[t] = next_return = rewards[t] + gamma * nextnonterminal * next_return
        advantages = returns - values
    return torch.as_tensor(advantages, device=device), torch.as_tensor(returns, device=device)


def normalize_advantages(advantages):
    """G3, applied to each minibatch (its last axis). torch's std() divides by n - 1 (ddof=1, as CleanRL); the
    reference's numpy std divides by n, which makes its advantages larger by sqrt(n / (n - 1)): 0.8% for 64
    samples, 0.2% for 256."""
    return (advantages - advantages.mean(-1, keepdim=True)) / (advantages.std(-1, keepdim=True) + 1e-8)


def policy_loss(newlogprob, oldlogprob, advantages, surrogate, clip_coef, kl_beta):
    """G1: the negated surrogate objective of the paper's Table 1 variant `surrogate`, the mean over the last
    axis. The KL penalty uses the estimate (r - 1) - log r of KL[pi_old, pi] on the rollout's actions:
    non-negative, unbiased, with the exact KL's gradient in expectation."""
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    pg_loss = -advantages * ratio
    if surrogate == "clip":
        return torch.max(pg_loss, -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean(-1)
    if surrogate == "unclipped":
        return pg_loss.mean(-1)
    if surrogate == "spo":  # Xie et al. 2025's objective: r A - |A| (r - 1)^2 / (2 eps)
        return (pg_loss + advantages.abs() * (ratio - 1).square() / (2 * clip_coef)).mean(-1)
    return pg_loss.mean(-1) + kl_beta * ((ratio - 1) - logratio).mean(-1)


def value_loss(newvalue, oldvalue, returns, clip_coef, clip_vloss):
    """G4: half the squared error (mean over the last axis); clip_vloss: the larger of plain and clipped."""
    v_loss = (newvalue - returns) ** 2
    if clip_vloss:
        v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -clip_coef, clip_coef)
        v_loss = torch.max(v_loss, (v_clipped - returns) ** 2)
    return 0.5 * v_loss.mean(-1)


def adapt_kl_beta(kl_beta, kl, kl_dtarg):
    """G1 kl-adaptive: the paper's rule, applied once per update with the KL measured after it."""
    if kl < kl_dtarg / 1.5:
        return kl_beta / 2
    if kl > kl_dtarg * 1.5:
        return kl_beta * 2
    return kl_beta


def adapt_learning_rate(optimizer, kl, args: Args):
    """X4: skrl's KLAdaptiveLR (rl_games' and rsl_rl's rule too), after each epoch on the mean approx KL of
    its minibatches: the rate divided by 1.5 above twice --desired-kl, multiplied by 1.5 below half of it,
    kept within [--min-lr, --max-lr]."""
    for group in optimizer.param_groups:
        if kl > 2 * args.desired_kl:
            group["lr"] = max(group["lr"] / 1.5, args.min_lr)
        elif kl < args.desired_kl / 2:
            group["lr"] = min(group["lr"] * 1.5, args.max_lr)


def ppo_loss(agent, mb, args: Args, clip_coef, kl_beta):
    """G1, G3, G4, G5: the loss of one minibatch (a dict with the keys of the flat batch) and its logged
    statistics; KL estimates and clip fraction carry no gradient."""
    _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(
        mb["obs"], mb["state"], mb["dones"], mb["actions"]
    )
    logratio = newlogprob - mb["logprobs"]
    with torch.no_grad():
        ratio = logratio.exp()
        old_approx_kl = (-logratio).mean(-1)
        approx_kl = ((ratio - 1) - logratio).mean(-1)
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean(-1)
    mb_advantages = normalize_advantages(mb["advantages"]) if args.norm_adv else mb["advantages"]
    pg_loss = policy_loss(newlogprob, mb["logprobs"], mb_advantages, args.surrogate, clip_coef, kl_beta)
    newvalue, values, returns = newvalue.squeeze(-1), mb["values"], mb["returns"]
    if args.norm_value:  # X5: the value loss in the critic's standardized units
        newvalue, values, returns = (agent.value_norm(v) for v in (newvalue, values, returns))
    v_loss = value_loss(newvalue, values, returns, clip_coef, args.clip_vloss)
    entropy_loss = entropy.mean(-1)
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": entropy_loss.detach()}
    return loss, stats | {"old_approx_kl": old_approx_kl, "approx_kl": approx_kl, "clipfrac": clipfrac}


def env_minibatches(num_steps, num_envs, num_minibatches):
    """B3: minibatches of whole env sequences: the envs are shuffled and split, each minibatch takes all steps
    of its envs. Yields (env indices, flat batch indices in time-major order)."""
    env_inds = np.arange(num_envs)
    np.random.shuffle(env_inds)
    flat_inds = np.arange(num_steps * num_envs).reshape(num_steps, num_envs)
    for mb_env_inds in np.split(env_inds, num_minibatches):
        yield mb_env_inds, flat_inds[:, mb_env_inds].ravel()


def ppo_backward(agent, mb, args: Args, clip_coef, kl_beta):
    """ppo_loss's gradients, added to the parameters' .grad; returns its logged statistics."""
    loss, mb_stats = ppo_loss(agent, mb, args, clip_coef, kl_beta)
    loss.backward()
    return mb_stats


def minibatch_step(agent, optimizer, mb, args: Args, clip_coef, kl_beta, world_size=1, backward=ppo_backward):
    """One optimizer step on the minibatch `mb`; returns ppo_loss's statistics. --compile (the default, on a
    run long enough to pay for it) swaps in ppo_utils.compiled.compiled_step: these lines as one compiled
    graph (under torchrun, X2, the gradients alone)."""
    optimizer.zero_grad()
    mb_stats = backward(agent, mb, args, clip_coef, kl_beta)
    average_gradients(agent.parameters(), world_size)  # X2
    if args.max_grad_norm > 0:
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # G8
    optimizer.step()
    return mb_stats


def update_policy(agent, optimizer, batch, args: Args, clip_coef, kl_beta, world_size=1, step=minibatch_step):
    """G7: `update_epochs` epochs of minibatch steps on the flat batch (a dict, built in train()), each
    minibatch the sequences of whole envs (B3). step: minibatch_step. Returns ppo_loss's statistics by name,
    each the mean over all minibatches of all epochs (as the reference logs them), as tensors (no device sync
    here, except for X3), and "epochs", the epochs run."""
    all_mb_stats = []
    for epoch in range(args.update_epochs):
        for mb_env_inds, mb_inds in env_minibatches(args.num_steps, args.num_envs, args.num_minibatches):
            mb = {key: value[mb_inds] for key, value in batch.items() if key != "state"}
            mb["state"] = batch["state"][:, mb_env_inds]
            mb_stats = step(agent, optimizer, mb, args, clip_coef, kl_beta, world_size)
            all_mb_stats.append(torch.stack(list(mb_stats.values())))

        if args.kl_adaptive_lr:  # X4 looks at the mean of the epoch's minibatches, over all ranks (X2)
            epoch_stats = torch.stack(all_mb_stats[-args.num_minibatches :]).mean(0)
            epoch_kl = epoch_stats[list(mb_stats).index("approx_kl")]
            adapt_learning_rate(optimizer, all_ranks_mean(epoch_kl, world_size).item(), args)
        approx_kl = mb_stats["approx_kl"]  # X3 looks at the epoch's last minibatch
        if args.target_kl is not None and all_ranks_mean(approx_kl.clone(), world_size) > args.target_kl:
            break
    return dict(zip(mb_stats, torch.stack(all_mb_stats).mean(0))) | {"epochs": epoch + 1}


def batch_kl(agent, batch):
    """KL[pi_old, pi] estimated over the whole batch (its last axis) after an update (for kl-adaptive)."""
    with torch.no_grad():
        _, newlogprob, _, _, _ = agent.get_action_and_value(
            batch["obs"], batch["state"], batch["dones"], batch["actions"]
        )
        logratio = newlogprob - batch["logprobs"]
        return ((logratio.exp() - 1) - logratio).mean(-1)


def truncation_bootstrap(agent, state, infos, terminations, truncations, gamma):
    """B1: gamma * V(final observation) for the envs the time limit cut short, 0 for the others."""
    device = next(agent.parameters()).device
    cut = truncations & ~terminations
    bonus = np.zeros(len(cut), dtype=np.float32)
    if cut.any():
        final_obs = torch.as_tensor(np.stack(infos["final_obs"][cut]), dtype=torch.float32, device=device)
        with torch.inference_mode():
            no_reset = torch.zeros(int(cut.sum()), device=device)  # B3: the episode goes on
            bonus[cut] = gamma * agent.get_value(final_obs, state[:, cut], no_reset).flatten().cpu().numpy()
    return bonus


def act(agent, envs, args: Args, next_obs, next_done, state=None):
    """--eval-checkpoint's step (ppo_utils.run.evaluate calls it): the action train() samples for an env
    step's observations, as envs.step takes it, and the recurrent state after it (where a script has one)."""
    device = next(agent.parameters()).device
    state = agent.initial_state(len(next_obs), device) if state is None else state  # B3
    next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
    with torch.inference_mode():
        action, _, _, _, state = agent.get_action_and_value(next_obs, state, next_done.to(device))
    return action.cpu().numpy(), state


def train(args: Args, stop_signals=()):
    """The whole run; returns the agent, the episodic returns seen and the last rollout (for tests and
    notebooks). Once `stop_signals` is non-empty (the script's SIGINT and SIGTERM handlers append to it) the
    run finishes the current env step, saves a checkpoint, closes everything and returns."""
    args, checkpoint = resume_flags(args)
    check_args(args)
    rank, world_size, device = distributed_setup(args.cuda)  # X2
    run = Run(args, resumed_from=checkpoint, rank=rank, world_size=world_size, stop_signals=stop_signals)
    seed = rank_seed(args.seed, rank)  # X2
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.tf32
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)

    envs = make_envs(replace(args, capture_video=args.capture_video and rank == 0), run.video_folder)
    agent = Agent(envs, args).to(device)
    fused = args.fused_adam or None
    optimizer = torch.optim.Adam(
        agent.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=fused
    )  # G11
    update_step = minibatch_step  # no --compile here: dynamo cannot trace nn.LSTM and nn.GRU
    last_update = Update(iteration=0, global_step=0, kl_beta=args.kl_beta)
    if checkpoint:
        last_update = restore(checkpoint, agent, optimizer, envs, rank, args)
    broadcast_parameters(agent, world_size)  # X2
    run.start(agent, optimizer, envs, last_update)
    global_step, kl_beta = last_update.global_step, last_update.kl_beta

    # dones[t] = 1 where obs[t] starts an episode; rewards and dones stay on the host till the update
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape, device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs), device=device)

    next_obs, _ = envs.reset(seed=seed + global_step)  # env i: seed + i, plus a resumed run's step
    run.check_observations(next_obs, global_step)
    next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
    next_done = torch.zeros(args.num_envs)
    next_state = initial_state = agent.initial_state(args.num_envs, device)  # B3

    for iteration in range(last_update.iteration + 1, args.num_iterations + 1):
        frac = 1.0 - (iteration - 1.0) / args.num_iterations
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate  # G6
        clip_coef = frac * args.clip_coef if args.anneal_clip_coef else args.clip_coef  # X1
        initial_state = next_state.clone()  # B3: training recomputes the states from here

        for step in range(args.num_steps):
            global_step += args.num_envs * world_size  # X2
            obs[step] = next_obs
            dones[step] = next_done
            with torch.inference_mode():
                action, logprob, _, value, next_state = agent.get_action_and_value(
                    next_obs, next_state, next_done.to(device)
                )
            values[step] = value.flatten()
            actions[step] = action  # M8: the raw sample (ClipAction clips what the env gets)
            logprobs[step] = logprob

            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            run.check_observations(next_obs, global_step)
            if args.bootstrap_truncated:
                reward = reward + truncation_bootstrap(
                    agent, next_state, infos, terminations, truncations, args.gamma
                )  # B1
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
            next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
            next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32)
            run.log.record_episodes(infos, global_step)
            if run.should_stop(last_step_of_rollout=step == args.num_steps - 1):
                break
        if run.stopping:
            break  # the unfinished rollout is dropped

        with torch.no_grad():
            next_value = agent.get_value(next_obs, next_state, next_done.to(device)).reshape(1, -1)
            advantages, returns = compute_gae(
                rewards.to(device),
                values,
                dones.to(device),
                next_value,
                next_done.to(device),
                args.gamma,
                args.gae_lambda,
                args.gae,
            )
        if args.norm_value:  # X5: the statistics of the returns the critic learns next, all ranks' (X2)
            agent.value_norm.update(returns, world_size)

        batch = {
            "obs": obs.reshape((-1,) + envs.single_observation_space.shape),
            "actions": actions.reshape((-1,) + envs.single_action_space.shape),
            "logprobs": logprobs.reshape(-1),
            "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1),
            "values": values.reshape(-1),
            "dones": dones.to(device).reshape(-1),
            "state": initial_state,  # B3: the rollout's first state, (rows, num_envs, hidden)
        }
        stats = update_policy(agent, optimizer, batch, args, clip_coef, kl_beta, world_size, update_step)
        run.check_finite(stats, iteration, global_step)
        if args.surrogate == "kl-adaptive":
            kl_beta = adapt_kl_beta(
                kl_beta, all_ranks_mean(batch_kl(agent, batch), world_size).item(), args.kl_dtarg
            )  # G1

        y_pred, y_true = batch["values"].cpu().numpy(), batch["returns"].cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        scalars = {"charts/learning_rate": optimizer.param_groups[0]["lr"], "charts/clip_coef": clip_coef}
        if args.surrogate in ("kl-fixed", "kl-adaptive"):
            scalars["charts/kl_beta"] = kl_beta
        if args.target_kl is not None:
            scalars["charts/update_epochs"] = stats["epochs"]  # X3
        scalars |= {f"losses/{key}": value.item() for key, value in stats.items() if key != "epochs"}
        scalars["losses/explained_variance"] = explained_var
        run.log.write(global_step, scalars)
        average_env_statistics(envs, world_size, device)  # X2: M1's and M3's statistics
        run.finish_update(iteration, global_step, kl_beta)

    run.finish()
    rollout = {
        "obs": obs,
        "actions": actions,
        "logprobs": logprobs,
        "rewards": rewards,
        "dones": dones,
        "values": values,
    }
    rollout["initial_state"] = initial_state
    returns, sps = run.log.episodic_returns, run.log.sps
    return {"agent": agent, "run_name": run.name, "episodic_returns": returns, "rollout": rollout, "sps": sps}


if __name__ == "__main__":
    from ppo_utils.command_line import HELP

    main(tyro.cli(Args, description=HELP), train, make_envs, Agent, act)
