"""ppo_continuous_action.py's network (G9, M5-M7) and its update loop (G3, G5, G7, G8, X3) against independent
re-computations."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn
from gymnasium.spaces import Box

OBS_DIM, ACT_DIM = 11, 3
SPACES = SimpleNamespace(
    single_observation_space=Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
    single_action_space=Box(-1.0, 1.0, (ACT_DIM,), np.float32),
)


def make_agent(cont, **flags):
    torch.manual_seed(0)
    return cont.Agent(SPACES, cont.Args(**flags))


def linear_layers(agent):
    return {name: module for name, module in agent.named_modules() if isinstance(module, nn.Linear)}


def test_orthogonal_init_with_reference_gains(cont):
    layers = linear_layers(make_agent(cont))
    gains = {"critic": 1.0, "actor_mean": 0.01}
    assert len(layers) == 6  # two bodies of two layers, the value and mean heads
    for name, layer in layers.items():
        # an orthogonal matrix scaled by g has all singular values equal to g
        singular_values = torch.linalg.svdvals(layer.weight.detach())
        torch.testing.assert_close(singular_values, torch.full_like(singular_values, gains.get(name, math.sqrt(2))))
        assert torch.all(layer.bias == 0), name


def test_no_ortho_init_keeps_pytorch_default(cont):
    gains = {"critic": 1.0, "actor_mean": 0.01}
    for name, layer in linear_layers(make_agent(cont, ortho_init=False)).items():
        singular_values = torch.linalg.svdvals(layer.weight.detach())
        assert not torch.allclose(singular_values, torch.full_like(singular_values, gains.get(name, math.sqrt(2))), rtol=0.05)
        assert torch.any(layer.bias != 0), name


def test_state_independent_log_std_starts_at_zero(cont):
    agent = make_agent(cont)
    assert isinstance(agent.actor_logstd, nn.Parameter)
    torch.testing.assert_close(agent.actor_logstd.detach(), torch.zeros(1, ACT_DIM))
    obs = torch.randn(5, OBS_DIM)
    _, _, entropy, _ = agent.get_action_and_value(obs)
    # a unit-variance Gaussian has entropy 0.5 * log(2 pi e) per dimension, whatever the state
    torch.testing.assert_close(entropy, torch.full((5,), ACT_DIM * 0.5 * math.log(2 * math.pi * math.e)))

    shifted = make_agent(cont, log_std_init=-1.0)
    torch.testing.assert_close(shifted.actor_logstd.detach(), torch.full((1, ACT_DIM), -1.0))


def test_state_dependent_std(cont):
    agent = make_agent(cont, state_dependent_std=True)
    assert isinstance(agent.actor_logstd, nn.Linear)
    _, _, entropy, _ = agent.get_action_and_value(torch.randn(5, OBS_DIM) * 10)
    assert entropy.std() > 0  # the spread now depends on the state


def test_separate_and_shared_networks(cont):
    separate, shared = make_agent(cont), make_agent(cont, shared_network=True)
    assert separate.actor_body is not separate.critic_body
    assert shared.actor_body is shared.critic_body
    n_params = lambda agent: sum(p.numel() for p in agent.parameters())  # noqa: E731
    assert n_params(separate) - n_params(shared) == OBS_DIM * 64 + 64 + 64 * 64 + 64
    for agent, value_reaches_actor in ((separate, False), (shared, True)):
        _, _, _, value = agent.get_action_and_value(torch.randn(4, OBS_DIM))
        value.sum().backward()
        grad = agent.actor_body[0].weight.grad
        assert (grad is not None and grad.abs().sum() > 0) == value_reaches_actor


@pytest.mark.parametrize("activation,module", [("tanh", nn.Tanh), ("relu", nn.ReLU)])
def test_activation(cont, activation, module):
    agent = make_agent(cont, activation=activation)
    kinds = {type(m) for m in agent.modules() if isinstance(m, (nn.Tanh, nn.ReLU))}
    assert kinds == {module}


def fixed_batch(agent, n=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, OBS_DIM, generator=g)
    with torch.no_grad():
        actions, logprobs, _, values = agent.get_action_and_value(obs)
    return {
        "obs": obs,
        "actions": actions,
        "logprobs": logprobs,
        "advantages": torch.randn(n, generator=g) * 3 + 1,
        "returns": values.flatten() + torch.randn(n, generator=g),
        "values": values.flatten(),
    }


def reference_minibatch_loss(agent, mb, args, clip_coef):
    """The reference's loss written out from the formulas, independently of the script's loss functions."""
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb["obs"], mb["actions"])
    ratio = (newlogprob - mb["logprobs"]).exp()
    adv = mb["advantages"]
    if args.norm_adv:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv).mean()
    v = newvalue.flatten()
    v_clipped = mb["values"] + (v - mb["values"]).clamp(-clip_coef, clip_coef)
    v_loss = 0.5 * torch.max((v - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2).mean()
    return -surrogate - args.ent_coef * entropy.mean() + args.vf_coef * v_loss


def reference_sgd_update(agent, batch, args, lr, clip_coef, minibatch_order):
    """SGD steps over the given minibatches, each gradient's global norm clipped to max_grad_norm by hand."""
    params = [p for p in agent.parameters()]
    for mb_inds in minibatch_order:
        mb = {k: v[mb_inds] for k, v in batch.items()}
        grads = torch.autograd.grad(reference_minibatch_loss(agent, mb, args, clip_coef), params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        norm = torch.sqrt(sum((g**2).sum() for g in grads))
        scale = min(1.0, args.max_grad_norm / (norm.item() + 1e-6)) if args.max_grad_norm > 0 else 1.0
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= lr * scale * g


@pytest.mark.parametrize("flags", [{}, {"norm_adv": False}, {"max_grad_norm": 0.0}, {"ent_coef": 0.1, "vf_coef": 1.0}])
def test_update_matches_hand_written_minibatch_sgd(cont, flags):
    """G3 per minibatch, G5 loss composition, G7 minibatches, G8 global-norm clipping: with plain SGD in place of Adam
    the parameters after one epoch of two minibatches equal a step-by-step re-computation."""
    args = cont.Args(num_envs=1, num_steps=64, num_minibatches=2, update_epochs=1, **{"max_grad_norm": 0.05, **flags})
    agent, reference = make_agent(cont), make_agent(cont)
    batch = fixed_batch(agent)
    lr = 0.5
    np.random.seed(123)
    cont.update_policy(agent, torch.optim.SGD(agent.parameters(), lr=lr), batch, args, 0.2, 1.0)
    np.random.seed(123)
    order = np.random.permutation(64)  # the same draws np.random.shuffle makes on arange(64)
    reference_sgd_update(reference, batch, args, lr, 0.2, [order[:32], order[32:]])
    for (name, p), q in zip(agent.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=name)
    if not flags:
        # normalizing over the whole batch instead of each minibatch would give other parameters
        whole = make_agent(cont)
        normalized = {**batch, "advantages": (batch["advantages"] - batch["advantages"].mean()) / batch["advantages"].std()}
        reference_sgd_update(
            whole, normalized, cont.Args(norm_adv=False, max_grad_norm=0.05), lr, 0.2, [order[:32], order[32:]]
        )
        assert not torch.allclose(agent.actor_mean.weight, whole.actor_mean.weight, atol=1e-7)


class CountingAdam(torch.optim.Adam):
    steps = 0

    def step(self, closure=None):
        self.steps += 1
        return super().step(closure)


@pytest.mark.parametrize("target_kl,expected_epochs", [(None, 4), (1e9, 4), (0.0, 1)])
def test_kl_early_stopping_after_an_epoch(cont, target_kl, expected_epochs):
    """X3: the KL is checked after each whole epoch; a target of 0 stops after the first one."""
    args = cont.Args(num_envs=1, num_steps=64, num_minibatches=4, update_epochs=4, target_kl=target_kl)
    agent = make_agent(cont)
    optimizer = CountingAdam(agent.parameters(), lr=1e-3)
    stats = cont.update_policy(agent, optimizer, fixed_batch(agent), args, 0.2, 1.0)
    assert stats["epochs"] == expected_epochs
    assert optimizer.steps == expected_epochs * 4


def test_update_improves_the_surrogate_with_sensible_statistics(cont):
    args = cont.Args(num_envs=1, num_steps=64, num_minibatches=4, update_epochs=4)
    agent = make_agent(cont)
    batch = fixed_batch(agent)

    def surrogate():
        with torch.no_grad():
            _, newlogprob, _, _ = agent.get_action_and_value(batch["obs"], batch["actions"])
            adv = cont.normalize_advantages(batch["advantages"])
            return -cont.policy_loss(newlogprob, batch["logprobs"], adv, "clip", 0.2, 1.0).item()

    before = surrogate()
    stats = cont.update_policy(agent, torch.optim.Adam(agent.parameters(), lr=3e-4, eps=1e-5), batch, args, 0.2, 1.0)
    assert surrogate() > before
    assert 0 <= stats["approx_kl"].item() < 0.1
    assert 0 <= stats["clipfrac"].item() <= 1
