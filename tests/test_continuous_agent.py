"""ppo_continuous_action.py's network: G9 init, M5 log-std, M6 activation, M7 separate or shared networks."""

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
