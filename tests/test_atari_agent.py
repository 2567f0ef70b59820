"""ppo_atari.py's Nature-CNN actor-critic: shapes for every frame layout, the layers, A8 scaling, the frame stack as
channels, the near-uniform initial policy. G9 init, A9 activation and A10 shared or separate trunks: test_agents.py."""

import math

import pytest
import torch
import torch.nn as nn
from conftest import load_script, make_agent

atari = load_script("ppo_atari")


def frames(n, shape=(4, 84, 84, 1)):
    return torch.randint(0, 256, (n,) + shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    "obs_shape,in_channels",
    [((4, 84, 84, 1), 4), ((84, 84, 1), 1), ((4, 210, 160, 3), 12), ((210, 160, 3), 3)],
)
def test_shapes_for_every_frame_layout(obs_shape, in_channels):
    agent = make_agent(atari, obs_shape, n_actions=6)
    assert agent.critic_body[0].in_channels == in_channels
    action, logprob, entropy, value = agent.get_action_and_value(frames(5, obs_shape))
    assert action.shape == logprob.shape == entropy.shape == (5,) and value.shape == (5, 1)
    assert agent.get_value(frames(5, obs_shape)).shape == (5, 1)


def test_nature_cnn_layers():
    agent = make_agent(atari)
    convs = [m for m in agent.critic_body if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (8, 8), (4, 4)),
        (64, (4, 4), (2, 2)),
        (64, (3, 3), (1, 1)),
    ]
    hidden = [m for m in agent.critic_body if isinstance(m, nn.Linear)]
    assert [(h.in_features, h.out_features) for h in hidden] == [(64 * 7 * 7, 512)]


@pytest.mark.parametrize("scale_obs,expected_max", [(True, 1.0), (False, 255.0)])
def test_pixel_scaling_inside_the_network(scale_obs, expected_max):
    agent = make_agent(atari, scale_obs=scale_obs)
    x = torch.full((2, 4, 84, 84, 1), 255, dtype=torch.uint8)
    x[:, :, 0, 0, 0] = 0
    processed = agent.preprocess(x)
    assert processed.dtype == torch.float32 and processed.shape == (2, 4, 84, 84)
    assert processed.max().item() == expected_max and processed.min().item() == 0.0


def test_stacked_frames_become_channels_in_order():
    agent = make_agent(atari)
    x = torch.stack([torch.full((84, 84, 1), k, dtype=torch.uint8) for k in range(4)])[None]
    processed = agent.preprocess(x)
    assert [processed[0, k, 0, 0].item() * 255 for k in range(4)] == pytest.approx([0, 1, 2, 3])


def test_initial_policy_is_near_uniform():
    # the 0.01 gain of the policy head makes every action about equally likely at the start
    _, logprob, entropy, _ = make_agent(atari).get_action_and_value(frames(8))
    torch.testing.assert_close(entropy, torch.full((8,), math.log(4)), atol=1e-3, rtol=0)
