"""PPO for continuous actions, many agents in one process: ppo_continuous_action.py for one agent per seed and
setting (--setting NAME=FLAGS), each keeping its own parameters, Adam state, envs, M1-M4 statistics and random
streams, and each an ordinary run of ppo_continuous_action.py with the common flags, its setting's and its
seed (its own run folder, TensorBoard events and agent.pt). This script computes what that one computes for
each agent, batched: the parameters stacked on a leading agent axis (each layer one batched matmul), one
vector env, one Adam step for all, and what reduces over a batch or is a setting's flag per agent. A setting
sets flags of the loss, the update, Adam or the initial weights (PER_AGENT, below: --surrogate, --clip-coef,
--kl-beta, --kl-dtarg, --gae-lambda, --norm-adv, --clip-vloss, --ent-coef, --vf-coef, --max-grad-norm,
--learning-rate, --anneal-lr, --adam-eps, --ortho-init, --log-std-init, --anneal-clip-coef, --target-kl,
--kl-adaptive-lr, --desired-kl, --min-lr, --max-lr, --norm-value);
those that shape the batch, the network or the loop, or the shared envs are the same for all (SHARED). It
imports its parent's other definitions (Args, make_env, Agent, the loss's pieces), so that a change there
reaches it; a parent flag in neither list (one this script was not written for) is refused when set, and a
network or loss that parts from the parent's is refused at the start (ppo_utils.seeds). No torchrun (X2).

    python ppo_continuous_action_seeds.py --env-id Hopper-v5 --seeds 1 2 3
    python ppo_continuous_action_seeds.py --seeds 1 2 --setting clip= --setting 'kl=--surrogate kl-adaptive'
"""

import os
import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import tyro
from gymnasium.vector import AutoresetMode
from torch.distributions.normal import Normal

import ppo_continuous_action as parent
from ppo_continuous_action import (
    Agent,
    Args,
    adapt_kl_beta,
    adapt_learning_rate,
    batch_kl,
    compute_gae,
    make_env,
    normalize_advantages,
)
from ppo_continuous_action import policy_loss, value_loss
from ppo_utils.agents_adam import AgentsAdam
from ppo_utils.compiled import PAYS_AFTER, compiled_agents_step
from ppo_utils.envpool_backend import EnvpoolMujoco
from ppo_utils.distributed import distributed_setup
from ppo_utils.flag_checks import check_args
from ppo_utils.lean import RunningMeanStd
from ppo_utils.run import finish_runs
from ppo_utils.seeds import AgentsArgs, agent_infos, agent_runs, check_finite, check_observations, check_seeds
from ppo_utils.seeds import check_batched_agents, finish_updates, main, resume_agents, start_agents

# The parent's flags this script batches. PER_AGENT: those a --setting may set, one value per agent, each a
# number or a choice of the loss, the update, Adam (AgentsAdam: a call per learning rate and epsilon) or the
# initial weights (the agents' tensors hold one value per agent); SHARED: those all agents of a process share,
# for the reason given with each. A parent flag in neither (one added since) trains here at its default and is
# refused when set (ppo_utils.seeds): to batch it, make this script compute what it changes and name it here
PER_AGENT = ("surrogate", "clip_coef", "kl_beta", "kl_dtarg", "gae_lambda", "norm_adv",
             "clip_vloss", "ent_coef", "vf_coef", "max_grad_norm", "ortho_init", "log_std_init",
             "anneal_clip_coef", "target_kl", "learning_rate", "anneal_lr", "adam_eps", "kl_adaptive_lr",
             "desired_kl", "min_lr", "max_lr", "norm_value")  # fmt: skip
SHARED = {
    "changes the batch's shape": ("num_envs", "num_steps", "num_minibatches", "total_timesteps"),
    "changes the update's loop": ("update_epochs",),
    "changes the network (one stacked network for all agents)": (
        "activation", "shared_network", "state_dependent_std",
    ),
    "changes the vector env all agents share (its wrappers, M1-M4, M8)": (
        "env_id", "mask_velocity", "vector_env", "norm_obs", "clip_obs", "norm_reward",
        "clip_reward", "norm_per_env", "clip_action", "gamma",
    ),
    "changes the rollout's loop for all agents": ("gae", "bootstrap_truncated"),
    "is the process's (its devices, logs and checkpoints)": (
        "exp_name", "seed", "torch_deterministic", "cuda", "torch_threads", "compile", "tf32",
        "fused_adam", "track", "wandb_project_name", "wandb_entity", "capture_video", "save_model",
        "checkpoint_interval", "resume", "eval_checkpoint", "eval_episodes",
    ),
}  # fmt: skip


@dataclass
class Seeds:  # a base of SeedsArgs, so that --seeds comes first in --help
    seeds: tuple[int, ...] = (1,)  # an agent per seed and setting (the parent's --seed k), in 0 .. 2**32 - 1
    setting: tyro.conf.UseAppendAction[tuple[str, ...]] = ()  # NAME=FLAGS: agents with FLAGS (docs/speed.md)


@dataclass
class SeedsArgs(Args, Seeds):
    exp_name: str = os.path.basename(__file__)[: -len(".py")]  # in runs/{env_id}__{exp_name}__{seed}__{time}
    seed: tyro.conf.Suppress[int] = 1  # one agent's seed (its run's and checkpoint's); --seeds sets them
    resume: tuple[str, ...] | None = None  # continue these agent.pt files' runs (one per agent, same update)
    eval_checkpoint: str | None = None  # play one agent's agent.pt as the parent plays it; --seeds: one

    script: ClassVar[str] = os.path.basename(__file__)
    per_agent: ClassVar[tuple] = PER_AGENT  # what ppo_utils.seeds reads of the two
    shared: ClassVar[dict] = SHARED

    @property
    def num_agents(self) -> int:
        return len(self.resume) if self.resume else len(self.seeds) * max(1, len(self.setting))

    def check(self, world_size: int, kind: str):
        """Args.check, after the batched script's own rules (check_seeds: distinct seeds, each --setting, one
        process, wandb for one run)."""
        check_seeds(self, world_size, Args)
        super().check(world_size, kind)


def make_envs(args: SeedsArgs, video_folders=None) -> gym.vector.VectorEnv:
    """The parallel envs (G10) of all agents as one vector env, agent a's envs at a * num_envs ... (a + 1) *
    num_envs - 1 (video_folders[a]: where env 0 of agent a records), and the reference's vector-level
    wrappers, in the reference's order, M1-M4 with statistics per agent. Autoreset is SAME_STEP, as the
    reference's VecEnv: a step that ends an episode returns the next one's first observation (its last one is
    in infos["final_obs"]), so every stored step is a real transition."""
    num_agents, video_folders = args.num_agents, video_folders or [None] * args.num_agents
    if args.vector_env == "envpool":  # one pool of all agents' envs
        keep = list(parent.POSITIONS[args.env_id]) if args.mask_velocity else None
        envs = EnvpoolMujoco(args.env_id, num_agents * args.num_envs, keep)
    else:
        envs_of_all = range(num_agents * args.num_envs)
        thunks = [make_env(args, i % args.num_envs, video_folders[i // args.num_envs]) for i in envs_of_all]
        vector_env = gym.vector.SyncVectorEnv if args.vector_env == "sync" else gym.vector.AsyncVectorEnv
        envs = vector_env(thunks, autoreset_mode=AutoresetMode.SAME_STEP)
    if args.clip_action:
        envs = gym.wrappers.vector.ClipAction(envs)  # M8
    if args.norm_per_env:
        return envs  # M1-M4 are in each env (make_env)
    if args.norm_obs:
        envs = NormalizeObservation(envs, num_agents, clip=args.clip_obs)  # M1, M2
    if args.norm_reward:
        # M3 as gymnasium does it, unlike the reference at a termination only: the discounted return restarts
        # before the terminating step's reward counts, the reference's after it (time-limit ends are the same)
        envs = NormalizeReward(envs, num_agents, gamma=args.gamma)
    if args.norm_reward and args.clip_reward > 0:
        envs = gym.wrappers.vector.ClipReward(envs, -args.clip_reward, args.clip_reward)  # M4
    return envs


class NormalizeObservation(gym.vector.VectorWrapper):
    """M1 and M2 as ppo_continuous_action.py does them (its NormalizeObservation: the reference's
    VecNormalize, the final observation normalized but not counted), with the running mean and variance kept
    per agent: the statistics have a leading agent axis, and agent a's envs count toward and are normalized by
    row a alone."""

    def __init__(self, env: gym.vector.VectorEnv, num_agents: int, clip: float, epsilon: float = 1e-8):
        super().__init__(env)
        self.single_observation_space = gym.spaces.Box(
            -np.inf, np.inf, env.single_observation_space.shape, np.float32
        )
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, env.num_envs)
        self.obs_rms = RunningMeanStd(shape=(num_agents,) + env.single_observation_space.shape)
        self.num_agents, self.clip, self.epsilon, self.update_running_mean = num_agents, clip, epsilon, True

    def by_agent(self, obs):
        """(num_agents * num_envs, ...) -> (num_envs, num_agents, ...): RunningMeanStd counts along axis 0."""
        return obs.reshape((self.num_agents, -1) + obs.shape[1:]).swapaxes(0, 1)

    def normalize(self, obs, agent=slice(None)):
        obs = (obs - self.obs_rms.mean[agent]) / np.sqrt(self.obs_rms.var[agent] + self.epsilon)
        return (np.clip(obs, -self.clip, self.clip) if self.clip > 0 else obs).astype(np.float32)

    def reset(self, **kwargs):
        obs, infos = self.env.reset(**kwargs)
        if self.update_running_mean:
            self.obs_rms.update(self.by_agent(obs))
        return self.normalize(self.by_agent(obs)).swapaxes(0, 1).reshape(obs.shape), infos

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        if self.update_running_mean:
            self.obs_rms.update(self.by_agent(obs))
        if "final_obs" in infos:
            final_obs = infos["final_obs"].copy()
            for i in np.flatnonzero(infos["_final_obs"]):
                final_obs[i] = self.normalize(final_obs[i], agent=i * self.num_agents // self.num_envs)
            infos["final_obs"] = final_obs
        return (
            self.normalize(self.by_agent(obs)).swapaxes(0, 1).reshape(obs.shape),
            rewards,
            terminations,
            truncations,
            infos,
        )


class NormalizeReward(gym.vector.VectorWrapper):
    """M3 as ppo_continuous_action.py does it (gymnasium's vector NormalizeReward under SAME_STEP autoreset:
    each env's discounted return, restarted after every episode end, and rewards divided by the running std of
    those returns), with the running variance kept per agent."""

    def __init__(self, env: gym.vector.VectorEnv, num_agents: int, gamma: float, epsilon: float = 1e-8):
        super().__init__(env)
        self.return_rms = RunningMeanStd(shape=(num_agents,))
        self.accumulated_reward = np.zeros(env.num_envs, dtype=np.float32)
        self.num_agents, self.gamma, self.epsilon, self.update_running_mean = num_agents, gamma, epsilon, True

    def reset(self, **kwargs):
        self.accumulated_reward[:] = 0
        return self.env.reset(**kwargs)

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        self.accumulated_reward[:] = self.accumulated_reward * self.gamma * (1 - terminations) + rewards
        if self.update_running_mean:
            self.return_rms.update(self.accumulated_reward.reshape(self.num_agents, -1).T)
        self.accumulated_reward[terminations | truncations] = 0  # its next episode has begun
        scale = np.sqrt(self.return_rms.var + self.epsilon)
        return (
            obs,
            (rewards.reshape(self.num_agents, -1) / scale[:, None]).reshape(-1),
            terminations,
            truncations,
            infos,
        )


class Agents(nn.Module):
    """The agents of all runs as one network: each parameter of `Agent` stacked on a leading agent axis (row
    i: agent i's, the one copy of its weights), every layer applying each agent's weights to that agent's
    inputs, all agents in one batched matmul (torch.baddbmm), which costs about what one agent's call costs.
    Inputs and outputs are Agent's with the agent axis first: x is (num_agents, batch, obs_dim)."""

    def __init__(self, agents):
        super().__init__()
        names = [name for name, _ in agents[0].named_parameters()]
        stacked = map(torch.stack, zip(*(agent.parameters() for agent in agents)))
        # in named_parameters' order
        self.weights = nn.ParameterDict(
            [(name.replace(".", "_"), w.detach()) for name, w in zip(names, stacked)]
        )
        self.shared_network, self.state_dependent_std = (
            agents[0].shared_network,
            agents[0].state_dependent_std,
        )
        self.activation, self.num_agents = agents[0].critic_body[1], len(agents)  # M6
        # X5: each agent's return statistics (mean, var, count), a row each, which the ValueNorm of an agent
        # with --norm-value views (its checkpoint saves them); the rows of the others are unused
        device, norms = self.weights["critic_bias"].device, [one.value_norm for one in agents]
        default = torch.tensor([0.0, 1.0, 1e-4], device=device)
        rows = [default if n is None else torch.stack([n.mean, n.var, n.count]) for n in norms]
        self.register_buffer("value_stats", torch.stack(rows))
        self.normalizes = torch.tensor([n is not None for n in norms], device=device)
        self.any_normalizes, self.value_epsilon = bool(self.normalizes.any()), 1e-8
        for n, row in zip(norms, self.value_stats):
            if n is not None:
                n.mean, n.var, n.count = row.unbind()
                self.value_epsilon = n.epsilon

    def layer(self, name, x):  # nn.Linear `name` of every agent
        return torch.baddbmm(
            self.weights[f"{name}_bias"].unsqueeze(1), x, self.weights[f"{name}_weight"].transpose(1, 2)
        )

    def body(self, name, x):  # Agent's body(): two hidden layers of 64 units
        return self.activation(self.layer(f"{name}_2", self.activation(self.layer(f"{name}_0", x))))

    def unstandardized(self, value):  # X5: (agent, batch, 1), in the rewards' units where an agent normalizes
        mean, var = self.value_stats[:, 0, None, None], self.value_stats[:, 1, None, None]
        std = torch.sqrt(var + self.value_epsilon)
        return torch.where(self.normalizes[:, None, None], value * std + mean, value)

    def standardized(self, x):  # X5: (agent, batch), in the critic's units where an agent normalizes
        mean, var = self.value_stats[:, 0, None], self.value_stats[:, 1, None]
        return torch.where(self.normalizes[:, None], (x - mean) / torch.sqrt(var + self.value_epsilon), x)

    def get_value(self, x):
        value = self.layer("critic", self.body("critic_body", x))
        return self.unstandardized(value) if self.any_normalizes else value

    def get_action_and_value(self, x, action=None, generators=None):
        hidden = self.body("critic_body" if self.shared_network else "actor_body", x)  # M7
        action_mean = self.layer("actor_mean", hidden)
        if self.state_dependent_std:
            action_logstd = self.layer("actor_logstd", hidden)
        else:
            action_logstd = self.weights["actor_logstd"].expand_as(action_mean)
        # a NaN goes on to train()'s guard
        probs = Normal(action_mean, action_logstd.exp(), validate_args=False)
        if action is None:  # each agent's generator draws what Agent draws from torch's
            noise = torch.stack(
                [
                    torch.randn(x.shape[1:2] + action_mean.shape[2:], generator=g, device=x.device)
                    for g in generators
                ]
            )
            action = action_mean + probs.scale * noise
        value = self.layer("critic", hidden if self.shared_network else self.body("critic_body", x))
        if self.any_normalizes:
            value = self.unstandardized(value)  # X5
        return action, probs.log_prob(action).sum(-1), probs.entropy().sum(-1), value


# G1's objectives, in the order of AgentsArgs.surrogate's indices
SURROGATES = Args.__annotations__["surrogate"].__args__


def ppo_loss(agent, mb, args: AgentsArgs, clip_coef, kl_beta):
    """G1, G3, G4, G5: the loss of one minibatch of every agent (a dict with the keys of the flat batch, each
    shaped (num_agents, minibatch_size, ...)), each with its own flags (args; clip_coef (num_agents, 1),
    kl_beta one per agent), summed over the agents (each agent's gradient is that of its own loss), and its
    logged statistics, one per agent; KL estimates and clip fraction carry no gradient."""
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb["obs"], mb["actions"])
    logratio = newlogprob - mb["logprobs"]
    with torch.no_grad():
        ratio = logratio.exp()
        old_approx_kl = (-logratio).mean(-1)
        approx_kl = ((ratio - 1) - logratio).mean(-1)
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean(-1)
    mb_advantages = torch.where(args.norm_adv, normalize_advantages(mb["advantages"]), mb["advantages"])
    pg_loss = [
        policy_loss(newlogprob, mb["logprobs"], mb_advantages, kind, clip_coef, kl_beta)
        for kind in SURROGATES
    ]
    # G1: each agent's own objective
    pg_loss = torch.stack(pg_loss).gather(0, args.surrogate[None]).squeeze(0)
    newvalue, values, returns = newvalue.squeeze(-1), mb["values"], mb["returns"]
    if agent.any_normalizes:  # X5: the value loss of an agent with --norm-value in its critic's units
        newvalue, values, returns = (agent.standardized(v) for v in (newvalue, values, returns))
    v_loss = [value_loss(newvalue, values, returns, clip_coef, clip) for clip in (False, True)]
    v_loss = torch.where(args.clip_vloss, v_loss[1], v_loss[0])  # G4: each agent's own
    entropy_loss = entropy.mean(-1)
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": entropy_loss.detach()}
    return loss.sum(), stats | {"old_approx_kl": old_approx_kl, "approx_kl": approx_kl, "clipfrac": clipfrac}


def ppo_backward(agent, mb, args: AgentsArgs, clip_coef, kl_beta):
    """ppo_loss's gradients, added to the parameters' .grad; returns its logged statistics (--compile's step
    passes its compiled twin where it cannot take the whole step as one graph)."""
    loss, mb_stats = ppo_loss(agent, mb, args, clip_coef, kl_beta)
    loss.backward()
    return mb_stats


def clip_grad_norms(grads, max_grad_norm):
    """G8 for every agent at once, as nn.utils.clip_grad_norm_ does it for one: the L2 norm of each agent's
    gradients (over all its parameters: of the norms of each parameter's rows), and its gradients scaled in
    place by the clip factor max_grad_norm / (norm + 1e-6) where that is below 1; max_grad_norm 0 (an
    agent's): off for that agent."""
    norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads], dim=1)
    factor = (max_grad_norm / (torch.linalg.vector_norm(norms, dim=1) + 1e-6)).clamp(max=1.0)
    factor = torch.where(max_grad_norm > 0, factor, 1.0)
    torch._foreach_mul_(grads, [factor.view((-1,) + (1,) * (g.dim() - 1)) for g in grads])


def minibatch_step(
    agent, optimizer, mb, args: AgentsArgs, clip_coef, kl_beta, running, backward=ppo_backward
):
    """One optimizer step of the running agents on their minibatches: the gradients, G8 per agent, one Adam
    step for all (AgentsAdam). --compile on a long run swaps in ppo_utils.compiled.compiled_agents_step: the
    same step as one graph. Returns ppo_loss's statistics."""
    optimizer.zero_grad()
    mb_stats = backward(agent, mb, args, clip_coef, kl_beta)
    clip_grad_norms([p.grad for p in agent.parameters()], args.max_grad_norm)  # G8, per agent
    optimizer.step(running)
    return mb_stats


def update_policy(
    agent, optimizer, batch, args: AgentsArgs, clip_coef, kl_beta, shufflers, flags, step=minibatch_step
):
    """G7: `update_epochs` epochs of minibatch steps on each agent's flat batch (a dict, built in train(),
    with the agent axis first), each agent with its own shuffle (shufflers: one numpy RandomState per agent),
    one Adam step for all (AgentsAdam). step: minibatch_step or, with --compile on a long run, its compiled
    twin. Returns ppo_loss's statistics by name, each per agent the mean over its minibatches, as tensors, and
    "epochs", the epochs each agent ran (X3 stops agents one by one: a stopped agent's parameters and Adam
    state stay and its shuffle draws no more, while the others go on). flags: each agent's Args, for X4."""
    num_agents, device = len(shufflers), batch["obs"].device
    b_inds = np.tile(np.arange(args.batch_size), (num_agents, 1))
    agent_axis = torch.arange(num_agents, device=device)[:, None]
    running = np.ones(num_agents, dtype=bool)  # X3: the agents whose update goes on
    stops = bool(torch.isfinite(args.target_kl).any())
    epochs, all_mb_stats = np.zeros(num_agents, dtype=int), []
    for epoch in range(args.update_epochs):
        for i in np.flatnonzero(running):
            shufflers[i].shuffle(b_inds[i])
        epochs += running
        for start in range(0, args.batch_size, args.minibatch_size):
            mb_inds = torch.as_tensor(b_inds[:, start : start + args.minibatch_size], device=device)
            mb = {key: value[agent_axis, mb_inds] for key, value in batch.items()}
            mb_stats = step(agent, optimizer, mb, args, clip_coef, kl_beta, running)
            all_mb_stats.append(torch.stack(list(mb_stats.values()), dim=1))

        if any(f.kl_adaptive_lr for f in flags):  # X4, each agent on the mean approx KL of its epoch
            epoch_stats = torch.stack(all_mb_stats[-(args.batch_size // args.minibatch_size) :]).mean(0)
            epoch_kl = epoch_stats[:, list(mb_stats).index("approx_kl")].tolist()
            for i in np.flatnonzero(running):
                if flags[i].kl_adaptive_lr:
                    one = SimpleNamespace(param_groups=[optimizer.param_groups[i]])
                    adapt_learning_rate(one, epoch_kl[i], flags[i])
        approx_kl = mb_stats["approx_kl"]  # X3 looks at the epoch's last minibatch
        if stops:
            running &= ~(approx_kl > args.target_kl).cpu().numpy()
            if not running.any():
                break
    minibatches = torch.as_tensor(epochs, device=device)[:, None] * (args.batch_size // args.minibatch_size)
    # (minibatches, agents, statistics), an agent's own first; ran marks them, (minibatches, agents)
    per_minibatch = torch.stack(all_mb_stats)
    ran = torch.arange(len(all_mb_stats), device=device)[:, None] < minibatches.T
    means = (per_minibatch * ran[..., None]).sum(0) / minibatches
    return dict(zip(mb_stats, means.T)) | {"epochs": epochs.tolist()}


def truncation_bootstrap(agent, infos, terminations, truncations, gamma):
    """B1: gamma * V(final observation) for the envs whose episode the time limit cut short, 0 for the others
    (each env's value from its own agent)."""
    device = next(agent.parameters()).device
    cut = truncations & ~terminations
    bonus = np.zeros(len(cut), dtype=np.float32)
    if cut.any():
        final_obs = np.zeros((len(cut),) + infos["final_obs"][cut][0].shape, dtype=np.float32)
        final_obs[cut] = np.stack(infos["final_obs"][cut])
        final_obs = torch.as_tensor(final_obs, device=device).view(agent.num_agents, -1, *final_obs.shape[1:])
        with torch.inference_mode():
            bonus[cut] = gamma * agent.get_value(final_obs).flatten().cpu().numpy()[cut]
    return bonus


def train(args: SeedsArgs, stop_signals=()):
    """The whole run of every agent; returns the agents, each one's episodic returns and the last rollout (for
    tests and notebooks). Once `stop_signals` is non-empty (the script's SIGINT and SIGTERM handlers append to
    it) the run finishes the current env step, saves a checkpoint of every agent, closes everything and
    returns."""
    args, resumed = resume_agents(args, Args)
    check_args(args)
    _, _, device = distributed_setup(args.cuda)
    runs = agent_runs(args, Args, resumed, stop_signals)  # each agent's flags, folder and logs
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.tf32
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)

    envs = make_envs(args, [run.video_folder for run in runs])
    flags, agents, generators, shufflers = [run.args for run in runs], [], [], []
    for run in runs:  # each agent as its run makes it, and its random streams
        random.seed(run.args.seed)
        np.random.seed(run.args.seed)
        torch.manual_seed(run.args.seed)
        agents.append(Agent(envs, run.args).to(device))
        generators.append(torch.Generator(device).manual_seed(run.args.seed))  # its actions' noise
        if device.type == "cpu":
            generators[-1].set_state(torch.get_rng_state())
        shufflers.append(np.random.RandomState(run.args.seed))  # its minibatch shuffles
    agent = Agents(agents)  # the one copy of the parameters; each Agent views its row
    agent_args, num_agents = AgentsArgs.of(flags, args, device), len(runs)
    check_batched_agents(envs, agents, agent, parent.ppo_loss, ppo_loss, flags, agent_args, args.script)
    lr, eps = [f.learning_rate for f in flags], [f.adam_eps for f in flags]
    optimizer = AgentsAdam(agent.parameters(), lr=lr, eps=eps, fused=args.fused_adam or None)  # G11
    update_step = minibatch_step
    if args.compile and args.num_iterations * args.update_epochs * args.num_minibatches >= PAYS_AFTER:
        update_step = compiled_agents_step(
            ppo_loss, minibatch_step, agent, optimizer, clip_grad_norms, device
        )
    last_updates = start_agents(runs, agents, agent, optimizer, envs, resumed, shufflers, generators)
    for group, run in zip(optimizer.param_groups, runs):
        group["lr"] = run.optimizer.param_groups[0]["lr"]  # X4: a resumed agent's adapted rate
    global_step, kl_beta = last_updates[0].global_step, [update.kl_beta for update in last_updates]

    # (step, agent, env); dones[t] = 1 where obs[t] starts an episode; rewards, dones on the host
    shape = (args.num_steps, num_agents, args.num_envs)
    obs = torch.zeros(shape + envs.single_observation_space.shape, device=device)
    actions = torch.zeros(shape + envs.single_action_space.shape, device=device)
    logprobs = torch.zeros(shape, device=device)
    rewards = torch.zeros(shape)
    dones = torch.zeros(shape)
    values = torch.zeros(shape, device=device)

    # agent a's env i: seed_a + i, plus a resumed run's step
    next_obs, _ = envs.reset(seed=[f.seed + global_step + i for f in flags for i in range(args.num_envs)])
    check_observations(runs, envs, next_obs, global_step, args.script)
    next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device).view(
        shape[1:] + next_obs.shape[1:]
    )
    next_done = torch.zeros(shape[1:])
    gae_lambda = np.array([f.gae_lambda for f in flags], dtype=np.float32)[:, None]  # G2

    for iteration in range(last_updates[0].iteration + 1, args.num_iterations + 1):
        frac = 1.0 - (iteration - 1.0) / args.num_iterations
        for group, f in zip(optimizer.param_groups, flags):
            if f.anneal_lr:
                group["lr"] = frac * f.learning_rate  # G6
        clip_coef = [frac * f.clip_coef if f.anneal_clip_coef else f.clip_coef for f in flags]  # X1

        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.inference_mode():
                action, logprob, _, value = agent.get_action_and_value(next_obs, generators=generators)
            values[step] = value.squeeze(-1)
            actions[step] = action  # M8: the raw sample (ClipAction clips what the env gets)
            logprobs[step] = logprob

            next_obs, reward, terminations, truncations, infos = envs.step(action.flatten(0, 1).cpu().numpy())
            check_observations(runs, envs, next_obs, global_step, args.script)
            if args.bootstrap_truncated:
                reward = reward + truncation_bootstrap(
                    agent, infos, terminations, truncations, args.gamma
                )  # B1
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32).view(shape[1:])
            next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device).view(obs.shape[1:])
            next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32).view(shape[1:])
            for i, run in enumerate(runs):
                run.log.record_episodes(agent_infos(infos, i, args.num_envs), global_step)
            if any([run.should_stop(last_step_of_rollout=step == args.num_steps - 1) for run in runs]):
                break
        if runs[0].stopping:
            break  # the unfinished rollout is dropped

        with torch.no_grad():
            next_value = agent.get_value(next_obs).squeeze(-1)
            advantages, returns = compute_gae(
                rewards.to(device),
                values,
                dones.to(device),
                next_value,
                next_done.to(device),
                args.gamma,
                gae_lambda,
                args.gae,
            )
        for one, f, agent_returns in zip(agents, flags, returns.unbind(1)):
            if f.norm_value:  # X5: each agent's statistics, from its own returns
                one.value_norm.update(agent_returns)

        batch = {  # as the parent flattens it, per agent: (agent, step * env, ...)
            "obs": obs.transpose(0, 1).reshape((num_agents, -1) + envs.single_observation_space.shape),
            "actions": actions.transpose(0, 1).reshape((num_agents, -1) + envs.single_action_space.shape),
            "logprobs": logprobs.transpose(0, 1).reshape(num_agents, -1),
            "advantages": advantages.transpose(0, 1).reshape(num_agents, -1),
            "returns": returns.transpose(0, 1).reshape(num_agents, -1),
            "values": values.transpose(0, 1).reshape(num_agents, -1),
        }
        clip_coefs, kl_betas = (
            torch.tensor(clip_coef, device=device)[:, None],
            torch.tensor(kl_beta, device=device),
        )
        stats = update_policy(
            agent, optimizer, batch, agent_args, clip_coefs, kl_betas, shufflers, flags, update_step
        )
        failed = check_finite(runs, stats, iteration, global_step)  # {agent: why it failed}
        if "kl-adaptive" in [f.surrogate for f in flags]:
            kls = batch_kl(agent, batch).tolist()
            kl_beta = [
                adapt_kl_beta(b, kl, f.kl_dtarg) if f.surrogate == "kl-adaptive" else b
                for b, kl, f in zip(kl_beta, kls, flags)
            ]  # G1

        finish_updates(
            runs, iteration, global_step, stats, batch, clip_coef, kl_beta, optimizer, failed, args.script
        )

    finish_runs(runs, args.script)
    rollout = {
        "obs": obs,
        "actions": actions,
        "logprobs": logprobs,
        "rewards": rewards,
        "dones": dones,
        "values": values,
    }
    returns, sps, names = (
        [run.log.episodic_returns for run in runs],
        [run.log.sps for run in runs],
        [run.name for run in runs],
    )
    return {
        "agent": agent,
        "agents": agents,
        "run_name": names,
        "episodic_returns": returns,
        "rollout": rollout,
        "sps": sps,
    }


if __name__ == "__main__":
    from ppo_utils.command_line import HELP

    main(tyro.cli(SeedsArgs, description=HELP), train, make_envs, Agent)
