"""ppo_continuous_action_seeds.py: agent i of a batched run computes what ppo_continuous_action.py computes for seed i
(the same rollout, the same update, to float rounding), and is an ordinary run of it (its folder, logs and agent.pt).

Tolerance, derived on the machine that runs the test. The scripts part where the batched matmul over stacked weights
(torch.baddbmm, Agents.layer) adds a product's terms in another order than one agent's nn.Linear: each single run is
trained a second time with its nn.Linear computed by that batched kernel (linear_as_batched), and what that alone moves a
quantity by (its spread) sets the quantity's tolerance: SPREAD times it, at least FLOOR. Measured on the 2-core AMD EPYC
(AVX-512) of 2026-12-03: with the kernel matched, every rollout is the batched agent's bit for bit (so the rollout parts
in that kernel alone), and the weights differ by at most 9e-8 (the update's own rounding: the backward of baddbmm, one
Adam step for all agents); batched against plain single runs differ by 0.1 to 1.5 times the spread (13 times on one
scalar under 1e-6, where FLOOR holds). Where the BLAS kernels differ by machine, the spread follows: on another machine
of this kind the rollouts parted by up to 1.9e-5 and the weights by 3.3e-5, ten times what FLOOR alone allowed. A broken
stream or two agents' settings swapped move the weights by 1.8e-2 or more (test_a_broken_stream_of_one_agent_is_caught,
test_agents_given_each_others_settings_are_caught), so no tolerance may exceed MOST: a case whose spread passes that is
too chaotic on the machine for the comparison to mean anything, and says so."""

import ast
import dataclasses
import glob
import importlib
import os
import shutil
import signal
import subprocess
import sys
import time
import types

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import ROOT, load_script, read_scalars, run_script
from ppo_utils.env_statistics import env_statistics
from ppo_utils.flag_checks import ArgError
from ppo_utils.run import STOPPED, NonFiniteError

cont = load_script("ppo_continuous_action")
seeds_script = load_script("ppo_continuous_action_seeds")

FLOOR = RTOL = 1e-5  # a hundred times the update's own rounding (above): 320 Adam steps, weights within 1e-7
SPREAD = 10  # a quantity's tolerance over what the matmul kernel alone moves it by (0.1-1.5 times seen, 13 under FLOOR)
MOST = 1e-3  # of a quantity's scale (its largest value, at least 1): broken runs' weights part by 1.8e-2 or more
CASES = {  # flags of both scripts; each case trains seeds (3, 5) together and each seed alone
    # the defaults (the compiled backward included), one update on Hopper, whose episodes end in the rollout
    "defaults": dict(env_id="Hopper-v5", total_timesteps=2048),
    # X3 stops the agents' updates after different epochs; G1's adaptive beta moves per agent
    "target-kl-adaptive": dict(
        env_id="Hopper-v5", total_timesteps=4096, target_kl=0.003, surrogate="kl-adaptive", compile=False
    ),  # fmt: skip
    # G10's envpool backend: the agents' envs in one pool, each seeded as its agent's single run seeds it
    "envpool": dict(env_id="Hopper-v5", total_timesteps=2048, vector_env="envpool", compile=False),
    # two envs per agent, time-limit truncations bootstrapped (B1), M5's state-dependent std, M7's shared network
    "envs-b1-m5-m7": dict(
        env_id="Pendulum-v1",
        total_timesteps=2048,
        num_envs=2,
        num_steps=1024,
        bootstrap_truncated=True,
        state_dependent_std=True,
        shared_network=True,
        compile=False,
    ),  # fmt: skip
    # SPO's objective, the learning rate adapted to each agent's KL (X4), each agent's return statistics (X5)
    "spo-x4-x5": dict(
        env_id="Hopper-v5", total_timesteps=4096, surrogate="spo", kl_adaptive_lr=True, anneal_lr=False,
        desired_kl=0.002, norm_value=True,
    ),  # fmt: skip
}
SEEDS = (3, 5)


def train_both(flags, tmp_path, monkeypatch):
    """The batched run of SEEDS and a run of ppo_continuous_action.py for each seed, in tmp_path, and the tolerances of
    their comparison (tolerances)."""
    monkeypatch.chdir(tmp_path)
    batched = seeds_script.train(seeds_script.SeedsArgs(seeds=SEEDS, **flags))
    runs = [dict(seed=seed, **flags) for seed in SEEDS]
    singles = [cont.train(cont.Args(**run)) for run in runs]
    return batched, singles, tolerances(runs, singles, monkeypatch)


def linear_as_batched(layer, x):
    """nn.Linear's forward as the batched script computes every agent's layer (Agents.layer: torch.baddbmm over the
    stacked agent axis), on an agent axis of one."""
    return torch.baddbmm(layer.bias[None, None], x[None], layer.weight.t()[None])[0]


def quantities(run, agent=None):
    """What the comparison compares, by name: the last rollout, the weights after the last update, and every logged
    scalar but SPS with its steps; of a single run, or of agent `agent` of a batched run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if agent is None:
        rollout, network, folder = run["rollout"], run["agent"], f"runs/{run['run_name']}"
    else:
        rollout = {key: value[:, agent] for key, value in run["rollout"].items()}
        network, folder = run["agents"][agent], f"runs/{run['run_name'][agent]}"
    found = {f"rollout {key}": value for key, value in rollout.items()}
    found |= {f"weights {name}": value.detach() for name, value in network.named_parameters()}
    for tag in set(EventAccumulator(folder).Reload().Tags()["scalars"]) - {"charts/SPS"}:
        steps, values = zip(*read_scalars(folder, tag))
        found[f"{tag} steps"], found[tag] = torch.tensor(steps), torch.tensor(values, dtype=torch.float64)
    return found


def tolerances(runs, singles, monkeypatch):
    """Each quantity's tolerance: SPREAD times the most that the matmul kernel alone moves it by over `runs` (each
    single run trained again, under another exp_name, with linear_as_batched for nn.Linear's forward), at least FLOOR.
    The runs again are eager (--no-compile: what --compile's graph rounds otherwise is in the spread too, and no second
    compile is paid for). A quantity's tolerance is absolute; RTOL covers those of large values (returns, losses)."""
    with monkeypatch.context() as patched:
        patched.setattr(torch.nn.Linear, "forward", linear_as_batched)
        again = [cont.train(cont.Args(**(run | dict(exp_name="kernel-spread", compile=False)))) for run in runs]
    tolerance, scale = {}, {}
    for single, other in zip(singles, again):
        theirs, kernels = quantities(single), quantities(other)
        for name, value in theirs.items():
            spread = (value - kernels[name]).abs().max().item()
            tolerance[name] = max(tolerance.get(name, FLOOR), SPREAD * spread)
            scale[name] = max(scale.get(name, 1.0), value.abs().max().item())
    name = max(tolerance, key=lambda name: tolerance[name] / scale[name])
    assert tolerance[name] <= MOST * scale[name], (
        f"{name}: the matmul kernel alone moves it by {tolerance[name] / SPREAD:.2g} (its values up to {scale[name]:.3g}) "
        f"on this machine, so its tolerance would pass a broken run (MOST = {MOST:g} of its scale): shorten the case"
    )
    return tolerance


def assert_same_computation(batched, single, agent, tolerance):
    """Agent `agent` of the batched run against the single run: the last rollout, the weights after the last update, and
    every logged statistic of every update (the same TensorBoard tags, at the same steps), each within its tolerance
    (tolerances); a failure names the quantity, how many of its elements part and by how much."""
    ours, theirs = quantities(batched, agent), quantities(single)
    assert sorted(ours) == sorted(theirs)
    for name, value in theirs.items():
        torch.testing.assert_close(ours[name], value, atol=tolerance[name], rtol=RTOL, msg=lambda m: f"{name}: {m}")


@pytest.mark.long
@pytest.mark.parametrize("case", CASES)
def test_each_agent_computes_what_the_single_script_computes_for_its_seed(case, tmp_path, monkeypatch):
    batched, singles, tolerance = train_both(CASES[case], tmp_path, monkeypatch)
    for agent, single in enumerate(singles):
        assert_same_computation(batched, single, agent, tolerance)
    if case == "target-kl-adaptive":  # X3 did stop the two agents after different epochs in some update
        epochs = [[v for _, v in read_scalars(f"runs/{name}", "charts/update_epochs")] for name in batched["run_name"]]
        assert epochs[0] != epochs[1] and min(min(epochs)) < 10


# settings whose agents differ in every flag a --setting may set: the four kinds of G1 objective, the clip range and its
# annealing (X1), the beta and its target, G3, G4, G5, G6 (another learning rate, constant), G8 (0: off), X3, G11 (another
# epsilon), the GAE lambda, the initial weights (G9, M5), X4 and X5 beside agents without them: each setting's agents step
# Adam with their own rate and epsilon
SETTINGS = {
    "clip-0.1": dict(clip_coef=0.1, anneal_clip_coef=True, norm_adv=False, ent_coef=0.01, max_grad_norm=0.0, gae_lambda=0.9),
    "kl-adaptive": dict(
        surrogate="kl-adaptive",
        kl_beta=3.0,
        kl_dtarg=0.003,
        target_kl=0.0003,
        clip_vloss=False,
        learning_rate=1e-3,
        anneal_lr=False,
    ),
    "unclipped": dict(
        surrogate="unclipped", vf_coef=1.0, ortho_init=False, log_std_init=-0.5, max_grad_norm=0.3, adam_eps=1e-8
    ),
    "spo": dict(surrogate="spo", kl_adaptive_lr=True, anneal_lr=False, desired_kl=0.001, max_lr=2e-3, norm_value=True),
}
SETTING_FLAGS = [  # the same as the command line's --setting NAME=FLAGS
    "clip-0.1=--clip-coef 0.1 --anneal-clip-coef --no-norm-adv --ent-coef 0.01 --max-grad-norm 0 --gae-lambda 0.9",
    "kl-adaptive=--surrogate kl-adaptive --kl-beta 3 --kl-dtarg 0.003 --target-kl 0.0003 --no-clip-vloss "
    "--learning-rate 1e-3 --no-anneal-lr",
    "unclipped=--surrogate unclipped --vf-coef 1 --no-ortho-init --log-std-init -0.5 --max-grad-norm 0.3 --adam-eps 1e-8",
    "spo=--surrogate spo --kl-adaptive-lr --no-anneal-lr --desired-kl 0.001 --max-lr 2e-3 --norm-value",
]
# two updates each, of 4 epochs: a longer run lets Adam's steps carry a rounding step into a visible difference (on
# Pendulum too, at 2 x 1024 steps of 10 epochs, with the GAE lambda or the objective of a setting; its weights agree
# after the first update to ~1e-7)
SETTINGS_RUN = dict(env_id="Pendulum-v1", num_steps=512, total_timesteps=1024, update_epochs=4, compile=False)


def train_settings(tmp_path, monkeypatch):
    """The batched run of SETTINGS x SEEDS and a run of ppo_continuous_action.py for each setting and seed (in the
    batched run's order: setting after setting, seed after seed), in tmp_path, and the comparison's tolerances."""
    monkeypatch.chdir(tmp_path)
    batched = seeds_script.train(seeds_script.SeedsArgs(seeds=SEEDS, setting=tuple(SETTING_FLAGS), **SETTINGS_RUN))
    runs = [dict(seed=seed, **SETTINGS_RUN, **flags) for flags in SETTINGS.values() for seed in SEEDS]
    singles = [cont.train(cont.Args(**run)) for run in runs]
    return batched, singles, tolerances(runs, singles, monkeypatch)


@pytest.mark.long
def test_each_agent_of_a_setting_computes_what_the_single_script_computes_with_its_flags(tmp_path, monkeypatch):
    """Agent (setting s, seed k) of a batched run of three settings against ppo_continuous_action.py with s's flags and
    --seed k: rollout, weights, every logged scalar; its run is named for its setting and its checkpoint holds its flags."""
    batched, singles, tolerance = train_settings(tmp_path, monkeypatch)
    for agent, single in enumerate(singles):
        assert_same_computation(batched, single, agent, tolerance)
        name, flags = list(SETTINGS.items())[agent // len(SEEDS)]
        assert f"__ppo_continuous_action_seeds-{name}__{SEEDS[agent % len(SEEDS)]}__" in batched["run_name"][agent]
        saved = torch.load(f"runs/{batched['run_name'][agent]}/agent.pt", weights_only=True)["args"]
        assert {key: saved[key] for key in flags} == flags
    epochs = [[v for _, v in read_scalars(f"runs/{name}", "charts/update_epochs")] for name in batched["run_name"][2:4]]
    assert min(min(epochs)) < 4  # X3 stopped the kl-adaptive agents early while the others ran on


class LearningRatesSwapped(seeds_script.AgentsAdam):
    """AgentsAdam whose agents 1 and 3 step with each other's learning rate (each logs and saves its own)."""

    def step(self, running):
        groups = self.param_groups
        groups[1]["lr"], groups[3]["lr"] = groups[3]["lr"], groups[1]["lr"]
        super().step(running)
        groups[1]["lr"], groups[3]["lr"] = groups[3]["lr"], groups[1]["lr"]


@pytest.mark.long
def test_agents_given_each_others_settings_are_caught(tmp_path, monkeypatch):
    """The comparison above can fail: with the loss's and the update's flags of two agents of the same seed swapped (the
    first setting's and the second's: agents 0 and 2), or only the learning rates Adam steps two such agents with (the
    first setting's annealed 3e-4 and the second's constant 1e-3: agents 1 and 3), each parts from its single run, while
    the agents left alone still agree."""
    of = seeds_script.AgentsArgs.of.__func__

    def swapped(cls, flags, args, device):
        flags = list(flags)
        flags[0], flags[2] = flags[2], flags[0]
        return of(cls, flags, args, device)

    monkeypatch.setattr(seeds_script.AgentsArgs, "of", classmethod(swapped))
    monkeypatch.setattr(seeds_script, "AgentsAdam", LearningRatesSwapped)
    monkeypatch.setattr(seeds_script, "check_batched_agents", lambda *args: None)  # its probe refuses the swap (below)
    batched, singles, tolerance = train_settings(tmp_path, monkeypatch)
    for agent in (4, 5):
        assert_same_computation(batched, singles[agent], agent, tolerance)
    for agent in (0, 1, 2, 3):
        with pytest.raises(AssertionError, match="weights|rollout"):
            assert_same_computation(batched, singles[agent], agent, tolerance)


def test_the_start_refuses_a_batched_loss_or_network_that_parts_from_the_parents(tmp_path, monkeypatch):
    """check_batched_agents, before the first step: the loss's flags of two agents swapped (as above), or the batched
    network's value head scaled by 1.001 (as a change to the parent's Agent that Agents did not follow would show), are
    refused in one line naming what differs; the script as it is passes the same probe (the other tests train)."""
    monkeypatch.chdir(tmp_path)
    args = seeds_script.SeedsArgs(env_id="Pendulum-v1", seeds=(1, 2), num_steps=64, num_minibatches=2, compile=False,
                                  setting=("a=--clip-coef 0.1", "b=--surrogate unclipped"), save_model=False)  # fmt: skip
    of = seeds_script.AgentsArgs.of.__func__

    def swapped(cls, flags, args, device):
        flags = list(flags)
        flags[0], flags[2] = flags[2], flags[0]
        return of(cls, flags, args, device)

    with monkeypatch.context() as patch:
        patch.setattr(seeds_script.AgentsArgs, "of", classmethod(swapped))
        with pytest.raises(ArgError, match="computes another ppo_loss's policy_loss than ppo_continuous_action.py's ppo_loss"):
            seeds_script.train(args)
    value_of = seeds_script.Agents.get_value
    with monkeypatch.context() as patch:
        patch.setattr(seeds_script.Agents, "get_value", lambda self, x: value_of(self, x) * 1.001)
        with pytest.raises(ArgError, match=r"computes another get_value than ppo_continuous_action.py's Agent \(largest"):
            seeds_script.train(args)


@pytest.mark.long
def test_the_tolerance_follows_a_matmul_kernel_that_rounds_otherwise(tmp_path, monkeypatch):
    """Another machine's BLAS, stood in for by torch.baddbmm summing in float64 before it rounds (for the batched script
    and linear_as_batched alike): the rollouts part past FLOOR (2.8e-5 in an observation of agent 5, seen here, as on the
    machine where the fixed 1e-5 failed), the derived tolerance follows, and every agent still agrees with its run."""
    monkeypatch.setattr(torch, "baddbmm", lambda bias, x, weight: (bias.double() + x.double() @ weight.double()).float())
    batched, singles, tolerance = train_settings(tmp_path, monkeypatch)
    assert tolerance["rollout obs"] > FLOOR
    for agent, single in enumerate(singles):
        assert_same_computation(batched, single, agent, tolerance)


# each agent's learning rate and epsilon (AgentsAdam's param groups): all shared (one call over the stacked tensors), each
# agent's own (agents 0 and 1 share theirs: one slice, then their rows apart once agent 1 stopped), and a group of rows
# that are not consecutive (agents 0, 2 and 3)
ADAM_GROUPS = {
    "shared": ([3e-4] * 4, [1e-5] * 4),
    "own": ([3e-4, 3e-4, 1e-3, 3e-4], [1e-5, 1e-5, 1e-5, 1e-8]),
    "apart": ([3e-4, 1e-3, 3e-4, 3e-4], [1e-5] * 4),
}


@pytest.mark.parametrize("groups", ADAM_GROUPS)
def test_one_adam_step_for_all_agents_is_torch_adam_for_each(groups):
    """AgentsAdam against a torch.optim.Adam (fused, and PyTorch's default) per agent over 6 steps, each agent with its
    learning rate (annealed) and epsilon, the agents' steps counted apart (agent 1 stopped for steps 2-3, as X3 stops
    one): the same parameters, moments and step counts, and its agent_optimizer's state_dict (the agent's own learning
    rate and epsilon) loads into a torch.optim.Adam as ppo_continuous_action.py's would."""
    from ppo_utils.agents_adam import AgentsAdam

    lrs, epss = ADAM_GROUPS[groups]
    for fused in (True, None):
        torch.manual_seed(0)
        stacked = [torch.randn(4, 4, 5, requires_grad=True), torch.randn(4, 5, requires_grad=True)]
        alone = [[p.detach()[i].clone().requires_grad_() for p in stacked] for i in range(4)]
        ours = AgentsAdam(stacked, lr=lrs, eps=epss, fused=fused)
        theirs = [torch.optim.Adam(params, lr=lr, eps=eps, fused=fused) for params, lr, eps in zip(alone, lrs, epss)]
        for step in range(6):
            running = np.array([True, step not in (2, 3), True, True])
            grads = [1e-3 * torch.randn_like(p) for p in stacked]  # small, so that the epsilons part the steps
            for p, g in zip(stacked, grads):
                p.grad = g.clone()
            for group, lr in zip(ours.param_groups, lrs):
                group["lr"] = lr * (1 - step / 6)
            ours.step(running)
            for i in np.flatnonzero(running):
                for p, g in zip(alone[i], grads):
                    p.grad = g[i].clone()
                theirs[i].param_groups[0]["lr"] = lrs[i] * (1 - step / 6)
                theirs[i].step()
        for i in range(4):
            mirror = ours.agent_optimizer(i, [torch.nn.Parameter(p.detach()[i]) for p in stacked]).state_dict()
            saved = theirs[i].state_dict()
            assert mirror["param_groups"][0] == saved["param_groups"][0]
            for k, p in enumerate(alone[i]):
                torch.testing.assert_close(stacked[k][i], p, atol=1e-7, rtol=1e-6)
                for name in ("exp_avg", "exp_avg_sq", "step"):
                    torch.testing.assert_close(mirror["state"][k][name], saved["state"][k][name], atol=1e-9, rtol=1e-6)
            torch.optim.Adam(alone[i], fused=fused).load_state_dict(mirror)
        assert ours.counts.tolist() == [6, 4, 6, 6]


class FirstUpdate(Exception):
    """Ends a run after its first update (first_update)."""


def first_update(tmp_path, monkeypatch, compiled, setting):
    """The batched script's parameters before and after its first update, and AgentsAdam's moments, with --compile's
    one-graph step (ppo_utils.compiled.compiled_agents_step, built whatever the run's length) or the plain one."""
    plain_update, seen = seeds_script.update_policy, {}

    def update_once(agent, optimizer, *args):
        seen["start"] = [p.detach().clone() for p in agent.parameters()]
        plain_update(agent, optimizer, *args)
        seen["end"] = [p.detach().clone() for p in agent.parameters()]
        seen["moments"] = optimizer.exp_avgs + optimizer.exp_avg_sqs
        seen["steps"], seen["compiled"] = optimizer.steps.tolist(), args[-1] is not seeds_script.minibatch_step
        raise FirstUpdate

    args = seeds_script.SeedsArgs(env_id="Pendulum-v1", seeds=(1, 2), setting=("default=", setting), num_steps=256,
                                  total_timesteps=512, num_minibatches=4, update_epochs=2,
                                  exp_name=f"compiled-{compiled}")  # fmt: skip
    with monkeypatch.context() as patched, pytest.raises(FirstUpdate):
        patched.chdir(tmp_path)
        patched.setattr(seeds_script, "PAYS_AFTER", 0 if compiled else 10**9)
        patched.setattr(seeds_script, "update_policy", update_once)
        seeds_script.train(args)
    return seen


def change_apart(a, b):
    """|a - b| / |b| of two updates' parameter changes (or of two lists of tensors, without "start")."""
    a, b = ([x - s for x, s in zip(run["end"], run["start"])] if "start" in run else run for run in (a, b))
    a, b = (torch.cat([x.flatten() for x in xs]) for xs in (a, b))
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.slow
def test_the_compiled_step_of_all_agents_is_the_plain_step_clipping_and_adam_included(tmp_path, monkeypatch):
    """--compile's one graph for all agents (their gradients, G8 per agent, Adam over the stacked tensors) against the
    plain step (compiled_backward's gradients aside: the eager loss.backward(), clip_grad_norms, AgentsAdam): one update
    of 8 minibatch steps moves the parameters by the same amount up to float rounding (1e-4 of the change), with the same
    Adam moments and step counts, 2 seeds at the defaults and 2 whose setting clips at every step (max_grad_norm 0.05);
    with that setting's clipping off the change lands over 10% away: the graph clips per agent."""
    plain = first_update(tmp_path, monkeypatch, False, "clip=--max-grad-norm 0.05")
    ours = first_update(tmp_path, monkeypatch, True, "clip=--max-grad-norm 0.05")
    assert ours["compiled"] and not plain["compiled"]
    off = change_apart(ours, plain)
    assert off <= 1e-4, f"the compiled step's change is {off:.2e} of the plain one's away (allowed 1e-4)"
    off = change_apart(ours["moments"], plain["moments"])
    assert off <= 1e-4, f"the compiled step's Adam moments are {off:.2e} of the plain ones away (allowed 1e-4)"
    assert ours["steps"] == plain["steps"] == [8.0] * len(ours["steps"])
    unclipped = first_update(tmp_path, monkeypatch, True, "clip=--max-grad-norm 0")
    off = change_apart(unclipped, plain)
    assert off > 0.1, f"without clipping the change is only {off:.2e} away: the test cannot tell clipping apart"
    # agents whose learning rates differ step apart (AgentsAdam's groups): the plain step with the compiled gradients
    plain, ours = (first_update(tmp_path, monkeypatch, compiled, "fast=--learning-rate 1e-3") for compiled in (False, True))
    offs = change_apart(ours, plain), change_apart(ours["moments"], plain["moments"])
    assert max(offs) <= 1e-4, f"with their own learning rates: change and moments {offs[0]:.2e}, {offs[1]:.2e} away (1e-4)"


class OtherTorchSeedFor:
    """torch as the batched script sees it, except that manual_seed(seed) seeds another stream for one seed."""

    def __init__(self, seed):
        self.manual_seed = lambda s: torch.manual_seed(s + 1 if s == seed else s)

    def __getattr__(self, name):
        return getattr(torch, name)


class OtherStreamFor:
    """numpy as the batched script sees it, except that RandomState(seed) draws another stream for one seed."""

    def __init__(self, seed):
        self.random = types.SimpleNamespace(seed=np.random.seed)  # train() seeds numpy's global stream as the script does
        self.random.RandomState = lambda s: np.random.RandomState(s + 1 if s == seed else s)

    def __getattr__(self, name):
        return getattr(np, name)


@pytest.mark.long
@pytest.mark.parametrize("stream", ["numpy (shuffles)", "torch (weights, action noise)"])
def test_a_broken_stream_of_one_agent_is_caught(stream, tmp_path, monkeypatch):
    """The comparison above can fail: with one agent's numpy stream (its minibatches) or torch stream (its initial weights
    and action noise) moved to another seed's, that agent parts from its single run while the other still agrees."""
    if stream.startswith("numpy"):
        monkeypatch.setattr(seeds_script, "np", OtherStreamFor(5))
    else:
        monkeypatch.setattr(seeds_script, "torch", OtherTorchSeedFor(5))
    flags = dict(env_id="Hopper-v5", total_timesteps=2048, compile=False)
    batched, singles, tolerance = train_both(flags, tmp_path, monkeypatch)
    assert_same_computation(batched, singles[0], 0, tolerance)
    with pytest.raises(AssertionError, match="weights" if stream.startswith("numpy") else "rollout"):
        assert_same_computation(batched, singles[1], 1, tolerance)


def test_per_agent_normalizers_match_each_agents_own_envs():
    """M1-M4 with statistics per agent (one vector env for all agents) against the wrappers of ppo_continuous_action.py
    made for each agent alone, stepped with the same actions through episode ends: the same observations (final ones
    too), rewards and statistics."""
    args = seeds_script.SeedsArgs(env_id="Hopper-v5", num_envs=2, seeds=SEEDS)
    envs = seeds_script.make_envs(args)
    alone = [cont.make_envs(cont.Args(env_id="Hopper-v5", num_envs=2, seed=seed)) for seed in SEEDS]
    obs, _ = envs.reset(seed=[seed + i for seed in SEEDS for i in range(2)])
    their_obs = [own.reset(seed=seed)[0] for own, seed in zip(alone, SEEDS)]
    np.testing.assert_array_equal(obs, np.concatenate(their_obs))
    rng, ended = np.random.default_rng(0), 0
    for _ in range(300):
        actions = rng.uniform(-1.5, 1.5, (4, 3)).astype(np.float32)
        obs, rewards, terminations, truncations, infos = envs.step(actions)
        theirs = [own.step(actions[2 * k : 2 * k + 2]) for k, own in enumerate(alone)]
        np.testing.assert_array_equal(obs, np.concatenate([t[0] for t in theirs]))
        np.testing.assert_array_equal(rewards, np.concatenate([t[1] for t in theirs]))
        if "final_obs" in infos:
            ended += infos["_final_obs"].sum()
            for i in np.flatnonzero(infos["_final_obs"]):
                np.testing.assert_array_equal(infos["final_obs"][i], theirs[i // 2][4]["final_obs"][i % 2])
    assert ended >= 4  # episodes ended (Hopper falls within ~20-60 random steps)
    batched_stats = env_statistics(envs)
    for k, own in enumerate(alone):
        for key in ("obs_rms", "return_rms"):
            for part in ("mean", "var"):
                np.testing.assert_array_equal(batched_stats[key][part][k], env_statistics(own)[key][part], err_msg=key)


def field_lines(path, class_name):
    """{field: its line (annotation, default and, in the comment after it, its help)} of a dataclass in a script."""
    node = next(node for node in ast.parse(path.read_text()).body if getattr(node, "name", None) == class_name)
    lines = path.read_text().splitlines()
    return {field.target.id: lines[field.lineno - 1] for field in node.body if isinstance(field, ast.AnnAssign)}


def test_every_flag_of_the_single_script_keeps_its_meaning():
    """The batched script has each flag of ppo_continuous_action.py with the same type, default and help, but for the
    seed (--seeds sets one per agent, --setting adds per-agent flags), --resume (several checkpoints) and --eval-checkpoint
    (left to the single script)."""
    theirs = {field.name: field for field in dataclasses.fields(cont.Args)}
    ours = {field.name: field for field in dataclasses.fields(seeds_script.SeedsArgs)}
    assert set(ours) - set(theirs) == {"seeds", "setting"}
    assert issubclass(seeds_script.SeedsArgs, cont.Args)  # the parent's flags, a flag added there included
    own = field_lines(ROOT / "ppo_continuous_action_seeds.py", "SeedsArgs")  # the flags it words otherwise
    for name in ("script", "per_agent", "shared"):  # class variables: what checkpoints name, the flags it batches
        own.pop(name)
    assert set(own) == {"exp_name", "seed", "resume", "eval_checkpoint"}
    assert all("  # " in line for line in own.values()), "a flag without help (tyro takes the comment after a field)"
    for name in set(theirs) - {"seed", "resume", "eval_checkpoint", "exp_name"}:
        assert ours[name].type == theirs[name].type and ours[name].default == theirs[name].default, name


@pytest.fixture
def parent_with_a_new_flag(tmp_path, monkeypatch):
    """The batched script beside a ppo_continuous_action.py to which a researcher added a flag, outside_test_flag (a
    name no real change takes), that the batched script was not written for: both imported from a folder of their own,
    as this process's modules of those names for the test."""
    folder = tmp_path / "scripts"
    folder.mkdir()
    anchor = "    bootstrap_truncated: bool = False"
    text = (ROOT / "ppo_continuous_action.py").read_text()
    assert text.count(anchor) == 1
    added = "    outside_test_flag: bool = False  # a flag added to the parent after the batched script (tests)\n"
    (folder / "ppo_continuous_action.py").write_text(text.replace(anchor, added + anchor))
    shutil.copy(ROOT / "ppo_continuous_action_seeds.py", folder)
    for name in ("ppo_continuous_action", "ppo_continuous_action_seeds"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # put back after the test
    monkeypatch.syspath_prepend(str(folder))
    seeds = importlib.import_module("ppo_continuous_action_seeds")
    assert "outside_test_flag" in {field.name for field in dataclasses.fields(seeds.SeedsArgs)}
    (tmp_path / "work").mkdir()
    return seeds


NOT_BATCHED = ("a flag of ppo_continuous_action.py that ppo_continuous_action_seeds.py does not batch yet (neither its "
               "PER_AGENT nor its SHARED names it)")  # fmt: skip
TO_BATCH = ("to batch it, make ppo_continuous_action_seeds.py compute what the flag changes and add it to PER_AGENT or "
            "SHARED there")  # fmt: skip


def test_a_flag_added_to_the_parent_is_refused_in_one_line_that_names_a_way_that_works(
    parent_with_a_new_flag, tmp_path, monkeypatch, capfd
):
    """A flag of the parent that the batched script does not batch (issue 95): in a --setting, outside one, and in the
    checkpoints given to --resume, one line that says the batched script cannot run it yet, what would make it, and a
    way that works, which does: the parent takes the flag, and the run it names goes on."""
    from conftest import run_main_here, write_checkpoint

    work = tmp_path / "work"
    run = lambda name, *flags: run_main_here(name, *flags, cwd=work, monkeypatch=monkeypatch, capfd=capfd)  # noqa: E731
    pendulum = ["--env-id", "Pendulum-v1", "--seeds", "1", "2"]
    assert run("ppo_continuous_action_seeds", *pendulum, "--setting", "on=--outside-test-flag") == (1, (
        f"error: --setting on: --outside-test-flag is {NOT_BATCHED}; train each seed of this setting with "
        f"ppo_continuous_action.py and its flags (--seed N for each of --seeds); {TO_BATCH}\n"
    ))  # fmt: skip
    assert run("ppo_continuous_action_seeds", *pendulum, "--outside-test-flag") == (1, (
        f"error: --outside-test-flag is {NOT_BATCHED}; leave it at its default (False), or train each seed with "
        f"ppo_continuous_action.py and these flags (--seed N for each of --seeds); {TO_BATCH}\n"
    ))  # fmt: skip
    parent = sys.modules["ppo_continuous_action"]
    args = parent.Args(env_id="Pendulum-v1", outside_test_flag=True, total_timesteps=4096)
    path = write_checkpoint(work / "runs" / "Pendulum-v1__ppo_continuous_action__1__1" / "agent.pt", args, iteration=1)
    path = os.path.relpath(path, work)
    before = sorted(os.listdir(work / "runs"))
    assert run("ppo_continuous_action_seeds", "--resume", path) == (1, (
        f"error: --resume {path} was trained with --outside-test-flag True, {NOT_BATCHED}; continue each run by itself "
        f"with ppo_continuous_action.py --resume, e.g. python ppo_continuous_action.py --resume {path}\n"
    ))  # fmt: skip
    assert sorted(os.listdir(work / "runs")) == before  # refused before a run folder was made
    # the ways named work: the parent trains with the flag and continues the run (each gets past every check to the
    # start of its run, where run_main_here stops it)
    for flags in (["--env-id", "Pendulum-v1", "--seed", "1", "--outside-test-flag"], ["--resume", path]):
        with pytest.raises(AssertionError, match="was let through: the run started"):
            run("ppo_continuous_action", *flags)


# 40 updates of 256 steps on Pendulum for two agents, a checkpoint every 5
FLAGS = ["--env-id", "Pendulum-v1", "--num-steps", "256", "--total-timesteps", "10240", "--num-minibatches", "4",
         "--update-epochs", "2", "--checkpoint-interval", "5", "--no-compile"]  # fmt: skip


def checkpoints_in(folder):
    return sorted(glob.glob(str(folder / "runs" / "*" / "agent.pt")))


def wait_for_checkpoints(proc, folder, count, iteration):
    """Waits (240 s at most, or until proc exits) for `count` checkpoints in folder, all at `iteration` or later."""
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        paths = checkpoints_in(folder)
        if len(paths) == count and all(torch.load(p, weights_only=True)["iteration"] >= iteration for p in paths):
            return
        time.sleep(0.2)


@pytest.mark.long
def test_a_stopped_batched_run_resumes_each_agent_as_one_continuous_run(tmp_path):
    """SIGTERM: every agent saves its last finished update, the output names the command that continues them all (and
    each alone), and that command finishes each run with one continuous log: every update once, the schedule going on.
    Each agent's checkpoint is an ordinary run of ppo_continuous_action.py: its seed, its script, played and resumed by
    that script."""
    command = [sys.executable, str(ROOT / "ppo_continuous_action_seeds.py"), "--seeds", "3", "5", *FLAGS]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_checkpoints(proc, tmp_path, count=2, iteration=10)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    resume = next(line for line in out.splitlines() if line.startswith(STOPPED) and "_seeds.py" in line)
    paths = checkpoints_in(tmp_path)
    assert resume.split("--resume ")[1].split() == [os.path.relpath(p, tmp_path) for p in paths]
    stopped_at = torch.load(paths[0], weights_only=True)["iteration"]
    assert 10 <= stopped_at < 40

    copy = tmp_path / "alone"  # one agent continued by the single script, from a copy of its run folder
    shutil.copytree(os.path.dirname(paths[1]), copy / "runs" / os.path.basename(os.path.dirname(paths[1])))
    single = run_script("ppo_continuous_action", "--resume", checkpoints_in(copy)[0], cwd=copy, timeout=300)
    assert single.returncode == 0, single.stderr

    result = subprocess.run([sys.executable, *resume[len(STOPPED) :].split()[1:]], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    for path, seed in zip(paths, (3, 5)):
        checkpoint = torch.load(path, weights_only=True)
        assert checkpoint["iteration"] == 40 and checkpoint["script"] == "ppo_continuous_action.py"
        assert checkpoint["args"]["seed"] == seed and f"__{seed}__" in path
        run_dir = os.path.dirname(path)
        assert [step for step, _ in read_scalars(run_dir, "charts/SPS")] == [256 * k for k in range(1, 41)]
        lrs = [value for _, value in read_scalars(run_dir, "charts/learning_rate")]
        np.testing.assert_allclose(lrs, [3e-4 * (1 - k / 40) for k in range(40)], rtol=1e-5)
    played = run_script("ppo_continuous_action", "--eval-checkpoint", paths[0], "--eval-episodes", "2", cwd=tmp_path)
    assert played.returncode == 0 and "mean return" in played.stdout, played.stderr


@pytest.mark.long
def test_a_killed_run_of_several_settings_resumes_every_agent_with_its_own_flags(tmp_path):
    """SIGKILL leaves no last checkpoint and prints nothing: the last set written (every 5 updates) continues every
    agent of both settings with one --resume of their files, each with its own setting's flags, to its last update, with
    one continuous log; a checkpoint of the KL setting is an ordinary run of it for ppo_continuous_action.py."""
    settings = ["--setting", "clip=", "--setting", "kl=--surrogate kl-adaptive --clip-coef 0.1 --ent-coef 0.01"]
    flags = [*FLAGS[:5], "5120", *FLAGS[6:]]  # 20 updates of 256 steps
    command = [sys.executable, str(ROOT / "ppo_continuous_action_seeds.py"), "--seeds", "3", "5", *settings, *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_checkpoints(proc, tmp_path, count=4, iteration=5)
    proc.kill()
    proc.communicate(timeout=60)
    paths = checkpoints_in(tmp_path)  # sorted: clip 3, clip 5, kl 3, kl 5
    stopped_at = {torch.load(p, weights_only=True)["iteration"] for p in paths}
    assert len(stopped_at) == 1 and 5 <= min(stopped_at) < 20
    result = subprocess.run([sys.executable, str(ROOT / "ppo_continuous_action_seeds.py"), "--resume", *paths],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "ppo_continuous_action_seeds-kl seed 5: step 5120/5120" in result.stdout
    for path, (setting, seed) in zip(paths, [("clip", 3), ("clip", 5), ("kl", 3), ("kl", 5)]):
        checkpoint = torch.load(path, weights_only=True)
        assert checkpoint["iteration"] == 20 and f"_seeds-{setting}__{seed}__" in path
        assert checkpoint["args"]["seed"] == seed and checkpoint["args"]["ent_coef"] == (0.01 if setting == "kl" else 0.0)
        assert checkpoint["args"]["surrogate"] == ("kl-adaptive" if setting == "kl" else "clip")
        run_dir = os.path.dirname(path)
        assert [step for step, _ in read_scalars(run_dir, "charts/SPS")] == [256 * k for k in range(1, 21)]
        betas = read_scalars(run_dir, "charts/kl_beta") if setting == "kl" else []
        assert len(betas) == (20 if setting == "kl" else 0)
    played = run_script("ppo_continuous_action", "--eval-checkpoint", paths[3], "--eval-episodes", "1", cwd=tmp_path)
    assert played.returncode == 0 and "mean return" in played.stdout, played.stderr


# three settings that differ in G6 and G11 alone: another learning rate and epsilon, a constant rate, the defaults
LR_SETTINGS = ("fast=--learning-rate 1e-3 --adam-eps 1e-7", "constant=--no-anneal-lr", "default=")
LEARNING_RATES = {"constant": [3e-4] * 4, "default": [3e-4 * (1 - k / 4) for k in range(4)],
                  "fast": [1e-3 * (1 - k / 4) for k in range(4)]}  # fmt: skip


@pytest.mark.slow
def test_a_stopped_set_of_learning_rates_resumes_each_agent_with_its_own(tmp_path, monkeypatch):
    """LR_SETTINGS' agents, stopped in the middle of rollout 3 of 4 (long_run_helpers' env) and continued by one
    --resume of their checkpoints: each run logs its own learning rates, as the same run uninterrupted does, its last
    checkpoint's Adam has its own learning rate and epsilon, and its weights are those of ppo_continuous_action.py
    --resume of its checkpoint, within FLOOR (the 4 Adam steps since the checkpoint leave them within 3e-8 here; every
    agent stepped with the default setting's rates parts by up to 1e-3)."""
    from long_run_helpers import STOP_REQUESTS

    args = seeds_script.SeedsArgs(seeds=(3,), setting=LR_SETTINGS, total_timesteps=256,
                                  **(QUICK | dict(env_id="StopsMidRolloutPendulum-v1")))  # fmt: skip
    for run, stop_signals in (("uninterrupted", []), ("stopped", STOP_REQUESTS)):
        (tmp_path / run).mkdir()
        monkeypatch.chdir(tmp_path / run)
        STOP_REQUESTS.clear()
        seeds_script.train(args, stop_signals)
    assert STOP_REQUESTS  # the stop was asked for
    paths = sorted(glob.glob("runs/*/agent.pt"))  # constant, default, fast
    assert [torch.load(path, weights_only=True)["iteration"] for path in paths] == [2, 2, 2]
    shutil.copytree("runs", tmp_path / "alone" / "runs")  # each agent continued by the single script, from a copy
    resumed = seeds_script.train(seeds_script.SeedsArgs(resume=tuple(paths)))
    monkeypatch.chdir(tmp_path / "alone")
    uninterrupted = sorted(glob.glob(str(tmp_path / "uninterrupted" / "runs" / "*" / "agent.pt")))
    for i, (path, theirs, setting) in enumerate(zip(paths, uninterrupted, LEARNING_RATES)):
        assert f"_seeds-{setting}__3__" in path
        ours = tmp_path / "stopped" / path
        lrs = [[value for _, value in read_scalars(os.path.dirname(p), "charts/learning_rate")] for p in (ours, theirs)]
        assert lrs[0] == lrs[1] and np.allclose(lrs[0], LEARNING_RATES[setting], rtol=1e-6)
        adam = [torch.load(p, weights_only=True)["optimizer"]["param_groups"][0] for p in (ours, theirs)]
        assert adam[0] == adam[1] and adam[0]["eps"] == (1e-7 if setting == "fast" else 1e-5)
        alone = cont.train(cont.Args(resume=path))["agent"].state_dict()
        for name, value in resumed["agents"][i].state_dict().items():
            torch.testing.assert_close(value, alone[name], atol=FLOOR, rtol=RTOL, msg=lambda m: f"{setting} {name}: {m}")


class NaNRewardForSeed(gym.Wrapper):
    """Pendulum whose reward turns NaN after 700 steps in the env seeded with 5 only, as one diverging agent's would."""

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.doomed, self.steps = seed == 5, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, (np.nan if self.doomed and self.steps > 700 else reward), terminated, truncated, info


gym.register("NaNRewardForSeed5-v1", entry_point=lambda **kw: NaNRewardForSeed(gym.make("Pendulum-v1", **kw)))


@pytest.mark.slow
def test_the_nan_guard_names_the_agent_and_saves_the_others(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = seeds_script.SeedsArgs(env_id="NaNRewardForSeed5-v1", num_steps=128, total_timesteps=2048, num_minibatches=2,
                                  update_epochs=1, checkpoint_interval=1, seeds=SEEDS, compile=False)  # fmt: skip
    with pytest.raises(NonFiniteError) as error:
        seeds_script.train(args)
    assert str(error.value).startswith("seed 5: ") and "in update 6 (step 768)" in str(error.value)
    (healthy,) = glob.glob("runs/*__3__*/agent.pt")
    (doomed,) = glob.glob("runs/*__5__*/agent.pt")
    assert torch.load(healthy, weights_only=True)["iteration"] == 6  # saved after the update the other one failed in
    assert torch.load(doomed, weights_only=True)["iteration"] == 5
    for path in (healthy, doomed):
        assert all(torch.isfinite(v).all() for v in torch.load(path, weights_only=True)["model"].values())
    # one printed command continues the set that is left: the healthy agent, without the one that failed
    assert f"the last good one: {doomed};" in str(error.value)
    command = f"python ppo_continuous_action_seeds.py --resume {healthy}"
    assert str(error.value).endswith(f"; the other agents saved this update; continue them without seed 5 with: {command}")
    seeds_script.train(seeds_script.SeedsArgs(resume=(healthy,)))
    assert torch.load(healthy, weights_only=True)["iteration"] == 16  # 2048 steps of 128


def nan_in(path, name):
    """Puts a NaN into the parameter `name` of the checkpoint at `path` (one diverged after it was written, or edited)."""
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["model"][name].view(-1)[0] = float("nan")
    torch.save(checkpoint, path)


QUICK = dict(env_id="Pendulum-v1", num_steps=64, num_minibatches=2, update_epochs=1, compile=False)


def left_on_disk(folder):
    """Every path under `folder` with its size and time of change: a write into any file shows."""
    found = {}
    for d, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(d, name)
            found[os.path.relpath(path, folder)] = (os.path.getsize(path), os.path.getmtime(path))
    return found


@pytest.mark.slow
def test_a_checkpoint_holding_a_nan_is_refused_before_any_agent_trains(tmp_path, monkeypatch, capsys):
    """A set whose seed 5 checkpoint holds a NaN weight: one line names that file, nothing is trained or written (the
    set stays the one command that continues it once the file is replaced); no NaN update, no "last good one" that is
    not."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ppo_continuous_action_seeds.py"])
    seeds_script.train(seeds_script.SeedsArgs(seeds=SEEDS, total_timesteps=64, **QUICK))
    paths = [glob.glob(f"runs/*__{seed}__*/agent.pt")[0] for seed in SEEDS]
    for path in paths:  # one more update to train
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["args"]["total_timesteps"] = 128
        torch.save(checkpoint, path)
    nan_in(paths[1], "actor_mean.weight")
    before = left_on_disk(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ppo_continuous_action_seeds.py", "--resume", *paths])
    args = seeds_script.SeedsArgs(resume=tuple(paths))
    with pytest.raises(SystemExit) as end:
        seeds_script.main(args, seeds_script.train, seeds_script.make_envs, seeds_script.Agent)
    assert end.value.code == 1 and capsys.readouterr().err.splitlines() == [
        f"error: --resume {paths[1]} holds weights that are NaN or infinite: it was changed after it was written; use "
        "another checkpoint"
    ]
    assert left_on_disk(tmp_path) == before


# kills the seeds script (SIGKILL: nothing of its own runs) at the n-th call of os.replace or os.fsync on an agent's
# checkpoint file, then lets it run as started
KILLED_AT = """
import os, runpy, signal, sys
calls, real = [], getattr(os, {call!r})
def then_killed(*args):
    name = os.readlink(f"/proc/self/fd/{{args[0]}}") if isinstance(args[0], int) else str(args[-1])
    if "agent.pt" in name:
        calls.append(name)
        if len(calls) == {n}:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(*args)
setattr(os, {call!r}, then_killed)
sys.argv, sys.path[0] = [{script!r}, *{flags!r}], os.path.dirname({script!r})  # as `python script` starts it
runpy.run_path({script!r}, run_name="__main__")
"""
# TensorBoard's writer thread as far behind as a loaded machine may leave it (issue 95: 8 processes on 2 cores): none of
# the events a SummaryWriter is given reaches its file until it is flushed or closed
HELD_BACK = """
from tensorboard.summary.writer.event_file_writer import _AsyncWriter
held, write, flush, close = {}, _AsyncWriter.write, _AsyncWriter.flush, _AsyncWriter.close
def let_through(writer):
    for event in held.pop(id(writer), []):
        write(writer, event)
_AsyncWriter.write = lambda writer, event: held.setdefault(id(writer), []).append(event)
_AsyncWriter.flush = lambda writer: (let_through(writer), flush(writer))
_AsyncWriter.close = lambda writer: (let_through(writer), close(writer))
"""
# three agents, four updates of 64 Pendulum steps, a checkpoint of every update
KILL_FLAGS = ["--seeds", "1", "2", "3", "--env-id", "Pendulum-v1", "--num-steps", "64", "--num-minibatches", "2",
              "--update-epochs", "1", "--total-timesteps", "256", "--checkpoint-interval", "1", "--no-compile"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "call, log_held_back",
    [("replace", False), ("fsync", False), ("replace", True)],
    ids=["between two renames", "between two writes", "between two renames, the log's writer behind"],
)
def test_a_kill_while_the_agents_checkpoints_are_written_leaves_a_set_that_resumes_together(tmp_path, call, log_held_back):
    """SIGKILL in the middle of writing update 2's checkpoints of three agents, once update 1's were written whole: at
    the fifth rename of an agent.pt file (agent 1's of update 2 in place, agent 2's and 3's not yet), or at its fifth
    flush to disk (before agent 2's is on disk); and at that rename with TensorBoard's writer thread behind, as a loaded
    machine may leave it (HELD_BACK: the log of updates 1 and 2 reaches the event files only where it is flushed before
    the checkpoints are written). The joint --resume of the three continues them together, each run one
    continuous log (every update once, its learning rate going on) to the end."""
    script = str(ROOT / "ppo_continuous_action_seeds.py")
    code = (HELD_BACK if log_held_back else "") + KILLED_AT.format(call=call, n=5, script=script, flags=KILL_FLAGS)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    paths = [
        os.path.relpath(glob.glob(str(tmp_path / "runs" / f"*__{seed}__*" / "agent.pt"))[0], tmp_path) for seed in (1, 2, 3)
    ]
    result = subprocess.run([sys.executable, script, "--resume", *paths], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for path in paths:
        assert torch.load(tmp_path / path, weights_only=True)["iteration"] == 4
        run_dir = tmp_path / os.path.dirname(path)
        assert [step for step, _ in read_scalars(run_dir, "charts/SPS")] == [64, 128, 192, 256]
        lrs = [value for _, value in read_scalars(run_dir, "charts/learning_rate")]
        np.testing.assert_allclose(lrs, [3e-4 * (1 - k / 4) for k in range(4)], rtol=1e-5)
        assert not glob.glob(str(run_dir / "*.tmp"))


@pytest.mark.slow
def test_a_batched_run_says_each_agents_progress_and_one_command_that_continues_them(tmp_path, monkeypatch, capsys):
    """Each progress line names its agent's seed; stopped by a signal, the run's last line is the one command that
    continues all its agents (no per-agent ones beside it)."""
    monkeypatch.chdir(tmp_path)
    args = seeds_script.SeedsArgs(seeds=SEEDS, total_timesteps=128, **QUICK)
    seeds_script.train(args)
    progress = [line for line in capsys.readouterr().out.splitlines() if "SPS" in line]
    assert [line.split("  SPS")[0] for line in progress] == ["seed 3: step 128/128", "seed 5: step 128/128"]
    (tmp_path / "stopped").mkdir()
    monkeypatch.chdir(tmp_path / "stopped")
    seeds_script.train(args, [signal.SIGTERM])  # a stop asked for before the first env step
    out = capsys.readouterr().out.splitlines()
    paths = [glob.glob(f"runs/*__{seed}__*/agent.pt")[0] for seed in SEEDS]
    assert [line for line in out if "continue" in line] == [
        f"{STOPPED} python ppo_continuous_action_seeds.py --resume {paths[0]} {paths[1]}"
    ]
    assert out[-1].startswith(STOPPED)


@pytest.mark.slow
def test_eval_checkpoint_plays_an_agent_the_batched_script_saved(tmp_path):
    """The finished run's last line is a command that plays one of its agents; it plays it as ppo_continuous_action.py
    plays it (an agent is a run of that script): the same episodes, the same returns."""
    flags = ["--seeds", "3", "5", "--env-id", "Pendulum-v1", "--num-steps", "64", "--num-minibatches", "2",
             "--total-timesteps", "128", "--no-compile"]  # fmt: skip
    trained = run_script("ppo_continuous_action_seeds", *flags, cwd=tmp_path, timeout=300)
    assert trained.returncode == 0, trained.stderr[-3000:]
    command = trained.stdout.strip().splitlines()[-1]
    (path,) = glob.glob("runs/*__3__*/agent.pt", root_dir=tmp_path)
    assert command == f"evaluate one with: python {ROOT / 'ppo_continuous_action_seeds.py'} --eval-checkpoint {path}"
    played = run_script("ppo_continuous_action_seeds", "--eval-checkpoint", path, "--eval-episodes", "2", cwd=tmp_path)
    theirs = run_script("ppo_continuous_action", "--eval-checkpoint", path, "--eval-episodes", "2", cwd=tmp_path)
    assert played.returncode == 0 and theirs.returncode == 0, played.stderr[-3000:]
    said = [line for line in played.stdout.splitlines() if line.startswith("eval ")]
    assert (
        len(said) == 1
        and "mean return" in said[0]
        and said == [line for line in theirs.stdout.splitlines() if line.startswith("eval ")]
    )


@pytest.mark.slow
def test_help_lists_seeds_first_and_resume_without_an_empty_default():
    result = run_script("ppo_continuous_action_seeds", "--help", cwd=ROOT, timeout=120)
    flags = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("│ --")]
    assert flags[0] == "--seeds", flags[:3]
    resume = result.stdout[result.stdout.index("│ --resume") :].split("│ --", 2)[1]
    assert "(default: None)" in " ".join(resume.replace("│", " ").split()), resume


@pytest.mark.long
def test_capture_video_records_each_agents_env_0_in_its_own_run_folder(tmp_path):
    flags = ["--env-id", "InvertedPendulum-v5", "--seeds", "3", "5", "--total-timesteps", "2048", "--no-compile"]
    result = run_script("ppo_continuous_action_seeds", *flags, "--capture-video", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    for seed in SEEDS:
        (run_dir,) = glob.glob(str(tmp_path / "runs" / f"*__{seed}__*"))
        videos = glob.glob(os.path.join(run_dir, "videos", "rl-video-episode-0.mp4"))
        assert videos and os.path.getsize(videos[0]) > 0, os.listdir(run_dir)


@pytest.mark.slow
def test_a_nan_observation_stops_its_agent_naming_its_env_and_the_others_save_their_last_update(tmp_path, monkeypatch):
    """long_run_helpers' env: seed 1's env 1 (reset with seed 2) returns a NaN observation at step 160, in update 3's
    rollout. Its agent stops there, named with its env and the step, before an update learns from it (its last good
    checkpoint is update 2's); seed 3's agent saves its last finished update, update 2, and one command continues it."""
    from long_run_helpers import NAN_OBSERVATION_ENVS, NAN_OBSERVATION_STEP, NAN_OBSERVATION_UPDATE
    from ppo_utils.run import ObservationError

    monkeypatch.chdir(tmp_path)
    env_id = NAN_OBSERVATION_ENVS["continuous"]
    args = seeds_script.SeedsArgs(env_id=env_id, num_envs=2, num_steps=32, total_timesteps=64 * 4, num_minibatches=2,
                                  update_epochs=1, checkpoint_interval=1, seeds=(1, 3), compile=False)  # fmt: skip
    with pytest.raises(ObservationError) as error:
        seeds_script.train(args)
    (doomed,) = glob.glob("runs/*__1__*/agent.pt")
    (healthy,) = glob.glob("runs/*__3__*/agent.pt")
    assert str(error.value) == (
        f"seed 1: env 1 of {env_id} returned a NaN observation at step {NAN_OBSERVATION_STEP} (in the rollout of update "
        f"{NAN_OBSERVATION_UPDATE}); training stopped before an update learned from it and wrote no checkpoint; the last "
        f"good one: {doomed}; the other agents saved their last finished update; continue them without seed 1 with: "
        f"python ppo_continuous_action_seeds.py --resume {healthy}"
    )
    for path in (doomed, healthy):
        checkpoint = torch.load(path, weights_only=True)
        assert checkpoint["iteration"] == NAN_OBSERVATION_UPDATE - 1
        assert all(torch.isfinite(v).all() for v in checkpoint["model"].values())
    assert not glob.glob("runs/*/*.tmp")
    seeds_script.train(seeds_script.SeedsArgs(resume=(healthy,)))  # seed 3's envs (seeds 3 and 4) are never NaN
    assert torch.load(healthy, weights_only=True)["iteration"] == 4


@pytest.mark.slow
def test_a_kill_between_the_renames_of_the_first_set_leaves_a_set_that_resumes_together(tmp_path):
    """SIGKILL at the second rename of update 1's checkpoints, the very first set: agent 1's agent.pt is in place,
    agents 2 and 3 have only agent.pt.tmp. The joint --resume of the three paths completes the set (and says so), and
    continues them together to the end, as after a kill between the renames of a later set."""
    script = str(ROOT / "ppo_continuous_action_seeds.py")
    code = KILLED_AT.format(call="replace", n=2, script=script, flags=KILL_FLAGS)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    folders = [os.path.relpath(glob.glob(str(tmp_path / "runs" / f"*__{seed}__*"))[0], tmp_path) for seed in (1, 2, 3)]
    paths = [os.path.join(folder, "agent.pt") for folder in folders]
    assert [sorted(name for name in os.listdir(tmp_path / folder) if name.startswith("agent")) for folder in folders] == [
        ["agent.pt"], ["agent.pt.tmp"], ["agent.pt.tmp"]
    ]
    result = subprocess.run([sys.executable, script, "--resume", *paths], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    completed = "the last checkpoints of these runs were cut short while written; completed them: "
    assert f"{completed}{paths[1]} {paths[2]}" in result.stdout.splitlines()
    for path in paths:
        assert torch.load(tmp_path / path, weights_only=True)["iteration"] == 4
        run_dir = tmp_path / os.path.dirname(path)
        assert [step for step, _ in read_scalars(run_dir, "charts/SPS")] == [64, 128, 192, 256]
        assert not glob.glob(str(run_dir / "*.tmp"))
