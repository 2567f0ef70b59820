"""ppo_atari.py's Nature-CNN actor-critic: shapes, G9 init with the reference's gains, A8 scaling, A9 activation, A10
shared or separate trunks."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn
from conftest import load_script
from gymnasium.spaces import Box, Discrete

atari = load_script("ppo_atari")


def make_agent(obs_shape=(4, 84, 84, 1), n_actions=4, **flags):
    torch.manual_seed(0)
    spaces = SimpleNamespace(
        single_observation_space=Box(0, 255, obs_shape, np.uint8), single_action_space=Discrete(n_actions)
    )
    return atari.Agent(spaces, atari.Args(**flags))


def frames(n, shape=(4, 84, 84, 1)):
    return torch.randint(0, 256, (n,) + shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    "obs_shape,in_channels",
    [((4, 84, 84, 1), 4), ((84, 84, 1), 1), ((4, 210, 160, 3), 12), ((210, 160, 3), 3)],
)
def test_shapes_for_every_frame_layout(obs_shape, in_channels):
    agent = make_agent(obs_shape, n_actions=6)
    assert agent.critic_body[0].in_channels == in_channels
    action, logprob, entropy, value = agent.get_action_and_value(frames(5, obs_shape))
    assert action.shape == logprob.shape == entropy.shape == (5,) and value.shape == (5, 1)
    assert agent.get_value(frames(5, obs_shape)).shape == (5, 1)


def test_nature_cnn_layers():
    agent = make_agent()
    convs = [m for m in agent.critic_body if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (8, 8), (4, 4)),
        (64, (4, 4), (2, 2)),
        (64, (3, 3), (1, 1)),
    ]
    hidden = [m for m in agent.critic_body if isinstance(m, nn.Linear)]
    assert [(h.in_features, h.out_features) for h in hidden] == [(64 * 7 * 7, 512)]


def test_orthogonal_init_with_reference_gains():
    agent = make_agent()
    layers = {name: m for name, m in agent.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))}
    assert len(layers) == 6  # shared trunk: 3 conv + 1 linear, then the two heads
    for name, layer in layers.items():
        gain = {"critic": 1.0, "actor": 0.01}.get(name, math.sqrt(2))
        singular_values = torch.linalg.svdvals(layer.weight.detach().flatten(1))  # conv kernels as (out, in * k * k)
        torch.testing.assert_close(singular_values, torch.full_like(singular_values, gain))
        assert torch.all(layer.bias == 0), name


def test_no_ortho_init_keeps_pytorch_default():
    agent = make_agent(ortho_init=False)
    weight = agent.critic_body[0].weight.detach().flatten(1)
    assert not torch.allclose(torch.linalg.svdvals(weight), torch.full((32,), math.sqrt(2)), rtol=0.05)


@pytest.mark.parametrize("scale_obs,expected_max", [(True, 1.0), (False, 255.0)])
def test_pixel_scaling_inside_the_network(scale_obs, expected_max):
    agent = make_agent(scale_obs=scale_obs)
    x = torch.full((2, 4, 84, 84, 1), 255, dtype=torch.uint8)
    x[:, :, 0, 0, 0] = 0
    processed = agent.preprocess(x)
    assert processed.dtype == torch.float32 and processed.shape == (2, 4, 84, 84)
    assert processed.max().item() == expected_max and processed.min().item() == 0.0


def test_stacked_frames_become_channels_in_order():
    agent = make_agent()
    x = torch.stack([torch.full((84, 84, 1), k, dtype=torch.uint8) for k in range(4)])[None]
    processed = agent.preprocess(x)
    assert [processed[0, k, 0, 0].item() * 255 for k in range(4)] == pytest.approx([0, 1, 2, 3])


def test_shared_and_separate_trunks():
    shared, separate = make_agent(), make_agent(shared_network=False)
    assert shared.actor_body is shared.critic_body and separate.actor_body is not separate.critic_body
    for agent, value_reaches_actor in ((separate, False), (shared, True)):
        _, _, _, value = agent.get_action_and_value(frames(3))
        value.sum().backward()
        grad = agent.actor_body[0].weight.grad
        assert (grad is not None and grad.abs().sum() > 0) == value_reaches_actor


@pytest.mark.parametrize("activation,module", [("relu", nn.ReLU), ("tanh", nn.Tanh)])
def test_activation(activation, module):
    kinds = {type(m) for m in make_agent(activation=activation).modules() if isinstance(m, (nn.Tanh, nn.ReLU))}
    assert kinds == {module}


def test_initial_policy_is_near_uniform():
    # the 0.01 gain of the policy head makes every action about equally likely at the start
    _, logprob, entropy, _ = make_agent().get_action_and_value(frames(8))
    torch.testing.assert_close(entropy, torch.full((8,), math.log(4)), atol=1e-3, rtol=0)
