"""What every script's actor-critic shares: G9 orthogonal init with the reference's gains (or PyTorch's default), the
activation flag (M6, A9), and shared or separate policy and value networks (M7, A10), each on the script's own
network: an MLP, the Nature CNN, an MLP encoder with an LSTM (discrete or continuous actions). ppo.py and
ppo_masked.py keep CleanRL's ppo.py network, tanh and separate, with no flag for either: checked as fixed."""

import math

import pytest
import torch
import torch.nn as nn
from conftest import SCRIPTS, forward, load_script, make_agent, observation_and_action_spaces, random_obs, skipping

# the layers layer_init sets up (the LSTM's own init is in test_rnn.py), counted by hand, and the heads' gains
LAYER_INIT = {
    # two separate bodies of two layers, the value and mean heads
    "ppo_continuous_action": (6, {"critic": 1.0, "actor_mean": 0.01}),
    # the shared trunk: 3 conv layers and 1 linear, then the two heads
    "ppo_atari": (6, {"critic": 1.0, "actor": 0.01}),
    # the shared encoder of two layers (vector observations), then the two heads
    "ppo_rnn": (4, {"critic": 1.0, "actor": 0.01}),
    # as the continuous one, the LSTMs between the bodies and the heads
    "ppo_rnn_continuous_action": (6, {"critic": 1.0, "actor_mean": 0.01}),
    # CleanRL's ppo.py: two separate bodies of two layers, the value and logits heads
    "ppo": (6, {"critic": 1.0, "actor": 0.01}),
    # ppo.py's network, its logits head one output per choice of every component (D2)
    "ppo_masked": (6, {"critic": 1.0, "actor": 0.01}),
}
# the scripts whose activation (tanh) and separate networks are fixed, as in CleanRL's ppo.py: no --activation and no
# --shared-network to test
FIXED_NETWORK = {"ppo", "ppo_masked"}
FIXED = {name: "tanh and separate networks are fixed here (CleanRL's ppo.py network): no flag" for name in FIXED_NETWORK}


def initialized_layers(agent):
    return {name: m for name, m in agent.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))}


def test_orthogonal_init_with_reference_gains(script):
    count, head_gains = LAYER_INIT[script.__name__]
    layers = initialized_layers(make_agent(script))
    assert len(layers) == count
    for name, layer in layers.items():
        # an orthogonal matrix scaled by g has all singular values equal to g; conv kernels as (out, in * k * k)
        singular_values = torch.linalg.svdvals(layer.weight.detach().flatten(1))
        torch.testing.assert_close(singular_values, torch.full_like(singular_values, head_gains.get(name, math.sqrt(2))))
        assert torch.all(layer.bias == 0), name


def test_no_ortho_init_keeps_pytorch_default(script):
    _, head_gains = LAYER_INIT[script.__name__]
    for name, layer in initialized_layers(make_agent(script, ortho_init=False)).items():
        singular_values = torch.linalg.svdvals(layer.weight.detach().flatten(1))
        gain = head_gains.get(name, math.sqrt(2))
        assert not torch.allclose(singular_values, torch.full_like(singular_values, gain), rtol=0.05), name
        assert torch.any(layer.bias != 0), name


def activations(agent):
    return {type(m) for m in agent.modules() if isinstance(m, (nn.Tanh, nn.ReLU))}


@pytest.mark.parametrize("activation,module", [("tanh", nn.Tanh), ("relu", nn.ReLU)])
@pytest.mark.parametrize("script", skipping(SCRIPTS, FIXED), indirect=True)
def test_activation(script, activation, module):
    assert activations(make_agent(script, activation=activation)) == {module}


@pytest.mark.parametrize("name", sorted(FIXED_NETWORK))
def test_the_fixed_network_is_tanh(name):
    assert activations(make_agent(name)) == {nn.Tanh}


def conv_params(c_in, c_out, k):
    return c_in * c_out * k * k + c_out


def linear_params(n_in, n_out):
    return n_in * n_out + n_out


# what a separate value network adds: a second body (and, for the recurrent scripts, a second LSTM), counted by hand
SEPARATE_EXTRA = {
    "ppo_continuous_action": linear_params(11, 64) + linear_params(64, 64),
    "ppo_atari": conv_params(4, 32, 8) + conv_params(32, 64, 4) + conv_params(64, 64, 3) + linear_params(64 * 7 * 7, 512),
    "ppo_rnn": linear_params(2, 64) + linear_params(64, 64) + 4 * 128 * (64 + 128) + 2 * 4 * 128,
    "ppo_rnn_continuous_action": linear_params(11, 64) + linear_params(64, 64) + 4 * 128 * (64 + 128) + 2 * 4 * 128,
}
# the whole networks of the fixed ones on make_agent's spaces, counted by hand: a critic obs -> 64 -> 64 -> 1 and an actor
# obs -> 64 -> 64 -> logits. ppo.py on CartPole's (4,) and Discrete(2) (CleanRL's ppo.py: 9,155 parameters); ppo_masked.py
# on (4,) and Discrete(4)
FIXED_NETWORK_PARAMS = {
    "ppo": 2 * (linear_params(4, 64) + linear_params(64, 64)) + linear_params(64, 1) + linear_params(64, 2),
    "ppo_masked": 2 * (linear_params(4, 64) + linear_params(64, 64)) + linear_params(64, 1) + linear_params(64, 4),
}


def n_params(agent):
    return sum(p.numel() for p in agent.parameters())


def value_reaches_actor(agent, script):
    """Whether the value's gradient reaches the actor's first layer."""
    obs = random_obs(observation_and_action_spaces(script)[0], 4, torch.Generator().manual_seed(0))
    _, _, _, value = forward(agent, obs)
    value.sum().backward()
    grad = agent.actor_body[0].weight.grad
    return grad is not None and grad.abs().sum() > 0


@pytest.mark.parametrize("script", skipping(SCRIPTS, FIXED), indirect=True)
def test_separate_and_shared_networks(script):
    separate, shared = make_agent(script, shared_network=False), make_agent(script, shared_network=True)
    assert separate.actor_body is not separate.critic_body
    assert shared.actor_body is shared.critic_body
    assert n_params(separate) - n_params(shared) == SEPARATE_EXTRA[script.__name__]
    assert not value_reaches_actor(separate, script)
    assert value_reaches_actor(shared, script)


@pytest.mark.parametrize("name", sorted(FIXED_NETWORK))
def test_the_fixed_network_is_separate_of_the_hand_counted_size(name):
    agent = make_agent(name)
    assert agent.actor_body is not agent.critic_body
    assert n_params(agent) == FIXED_NETWORK_PARAMS[name]
    assert not value_reaches_actor(agent, load_script(name))
