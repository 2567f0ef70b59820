"""ppo_continuous_action.py's network: M5 log-std, state-independent or a head. G9 init, M6 activation and M7 separate
or shared networks: test_agents.py."""

import math

import torch
import torch.nn as nn
from conftest import make_agent

OBS_DIM, ACT_DIM = 11, 3  # the spaces make_agent gives the continuous agent


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
