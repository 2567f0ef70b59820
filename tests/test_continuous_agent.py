"""ppo_continuous_action.py's network: M5 log-std, state-independent or a head. G9 init, M6 activation and M7 separate
or shared networks: test_agents.py."""

import math

import pytest
import torch
import torch.nn as nn
from conftest import make_agent

OBS_DIM, ACT_DIM = 11, 3  # the spaces make_agent gives the continuous agent


def test_log_std_is_a_parameter_at_log_std_init_or_a_head(cont):
    agent = make_agent(cont)
    assert isinstance(agent.actor_logstd, nn.Parameter)
    torch.testing.assert_close(agent.actor_logstd.detach(), torch.zeros(1, ACT_DIM))
    shifted = make_agent(cont, log_std_init=-1.0)
    torch.testing.assert_close(shifted.actor_logstd.detach(), torch.full((1, ACT_DIM), -1.0))
    assert isinstance(make_agent(cont, state_dependent_std=True).actor_logstd, nn.Linear)


@pytest.mark.parametrize("state_dependent_std", [False, True])
def test_entropy_and_log_prob_are_the_diagonal_gaussians(cont, state_dependent_std):
    """A diagonal Gaussian of mean mu and log-std s has entropy sum_i (0.5 log(2 pi e) + s_i) and log-density
    sum_i -(a_i - mu_i)^2 / (2 exp(2 s_i)) - s_i - 0.5 log(2 pi), written out here from the mean head's output and the
    agent's log-std: one parameter per action dimension, or (state-dependent) a head on the actor's hidden layer."""
    agent = make_agent(cont, state_dependent_std=state_dependent_std)
    with torch.no_grad():  # log-stds far from their initial zeros, other in each dimension (and state)
        if state_dependent_std:
            agent.actor_logstd.weight.mul_(100)
        else:
            agent.actor_logstd.copy_(torch.tensor([[-1.0, 0.0, 0.5]]))
    obs = torch.randn(5, OBS_DIM, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        action, logprob, entropy, _ = agent.get_action_and_value(obs)
        hidden = agent.actor_body(obs)
        mean = agent.actor_mean(hidden)
        log_std = agent.actor_logstd(hidden) if state_dependent_std else agent.actor_logstd.expand(5, ACT_DIM)
    assert log_std.std() > 0.3  # the dimensions' (and states') spreads differ: a sum over them is checked
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    torch.testing.assert_close(entropy, (half_log_2pi + 0.5 + log_std).sum(1))
    density = -((action - mean) ** 2) / (2 * (2 * log_std).exp()) - log_std - half_log_2pi
    torch.testing.assert_close(logprob, density.sum(1))
