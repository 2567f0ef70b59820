"""update_policy, the minibatch loop every script shares (G3, G5, G7, G8, X3), against a step-by-step re-computation
written from the formulas, on a fixed batch."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import SCRIPTS, load_script
from gymnasium.spaces import Box, Discrete


@pytest.fixture(params=[name for name in SCRIPTS if name != "ppo_rnn"])
def script(request):
    """The feed-forward scripts; ppo_rnn.py's update (whole sequences, recomputed states) has its own tests."""
    return load_script(request.param)


def observation_and_action_spaces(script):
    if script.__name__ == "ppo_continuous_action":
        return Box(-np.inf, np.inf, (11,), np.float32), Box(-1.0, 1.0, (3,), np.float32)
    return Box(0, 255, (4, 84, 84, 1), np.uint8), Discrete(4)  # Atari frames


def make_agent(script, **flags):
    obs_space, action_space = observation_and_action_spaces(script)
    torch.manual_seed(0)
    spaces = SimpleNamespace(single_observation_space=obs_space, single_action_space=action_space)
    return script.Agent(spaces, script.Args(**flags))


def random_obs(space, n, g):
    if space.dtype == np.uint8:
        return torch.randint(0, 256, (n,) + space.shape, dtype=torch.uint8, generator=g)
    return torch.randn((n,) + space.shape, generator=g)


def fixed_batch(script, agent, n=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    obs = random_obs(observation_and_action_spaces(script)[0], n, g)
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
def test_update_matches_hand_written_minibatch_sgd(script, flags):
    """G3 per minibatch, G5 loss composition, G7 minibatches, G8 global-norm clipping: with plain SGD in place of Adam
    the parameters after one epoch of two minibatches equal a step-by-step re-computation."""
    args = script.Args(num_envs=1, num_steps=64, num_minibatches=2, update_epochs=1, **{"max_grad_norm": 0.05, **flags})
    agent, reference = make_agent(script), make_agent(script)
    batch = fixed_batch(script, agent)
    lr = 0.5
    np.random.seed(123)
    script.update_policy(agent, torch.optim.SGD(agent.parameters(), lr=lr), batch, args, 0.2, 1.0)
    np.random.seed(123)
    order = np.random.permutation(64)  # the same draws np.random.shuffle makes on arange(64)
    reference_sgd_update(reference, batch, args, lr, 0.2, [order[:32], order[32:]])
    for (name, p), q in zip(agent.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=name)
    if not flags:
        # normalizing over the whole batch instead of each minibatch would give other parameters
        whole = make_agent(script)
        normalized = {**batch, "advantages": (batch["advantages"] - batch["advantages"].mean()) / batch["advantages"].std()}
        reference_sgd_update(
            whole, normalized, script.Args(norm_adv=False, max_grad_norm=0.05), lr, 0.2, [order[:32], order[32:]]
        )
        assert any(not torch.allclose(p, q, atol=1e-7) for p, q in zip(agent.parameters(), whole.parameters()))


class CountingAdam(torch.optim.Adam):
    steps = 0

    def step(self, closure=None):
        self.steps += 1
        return super().step(closure)


@pytest.mark.parametrize("target_kl,expected_epochs", [(None, 4), (1e9, 4), (0.0, 1)])
def test_kl_early_stopping_after_an_epoch(script, target_kl, expected_epochs):
    """X3: the KL is checked after each whole epoch; a target of 0 stops after the first one."""
    args = script.Args(num_envs=1, num_steps=64, num_minibatches=4, update_epochs=4, target_kl=target_kl)
    agent = make_agent(script)
    optimizer = CountingAdam(agent.parameters(), lr=1e-3)
    stats = script.update_policy(agent, optimizer, fixed_batch(script, agent), args, 0.2, 1.0)
    assert stats["epochs"] == expected_epochs
    assert optimizer.steps == expected_epochs * 4


def test_update_improves_the_surrogate_with_sensible_statistics(script):
    args = script.Args(num_envs=1, num_steps=64, num_minibatches=4, update_epochs=4)
    agent = make_agent(script)
    batch = fixed_batch(script, agent)

    def surrogate():
        with torch.no_grad():
            _, newlogprob, _, _ = agent.get_action_and_value(batch["obs"], batch["actions"])
            adv = script.normalize_advantages(batch["advantages"])
            return -script.policy_loss(newlogprob, batch["logprobs"], adv, "clip", 0.2, 1.0).item()

    before = surrogate()
    stats = script.update_policy(agent, torch.optim.Adam(agent.parameters(), lr=3e-4, eps=1e-5), batch, args, 0.2, 1.0)
    assert surrogate() > before
    assert 0 <= stats["approx_kl"].item() < 0.1
    assert 0 <= stats["clipfrac"].item() <= 1
