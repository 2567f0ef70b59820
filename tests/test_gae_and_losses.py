"""The algorithm pieces every script shares (G1-G4, G2 without GAE), against hand-computed cases, the paper's formulas
and stable-baselines3's RolloutBuffer as an independent implementation. Each test runs once per distinct text of these
pieces among the scripts (the six share them byte for byte, as tests/family_report.py reports: once, on ppo.py); a script
whose pieces read otherwise (a changed copy, say) is tested on its own."""

import ast

import numpy as np
import pytest
import torch
from conftest import ROOT, SCRIPTS, load_script
from gymnasium.spaces import Box
from stable_baselines3.common.buffers import RolloutBuffer

T = torch.tensor

PIECES = ("compute_gae", "normalize_advantages", "policy_loss", "value_loss", "adapt_kl_beta")  # self-contained: torch


def pieces_text(text):
    """The source text of PIECES in a script's text, read with ast (None for a piece it lacks)."""
    found = {node.name: ast.get_source_segment(text, node) for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)}
    return tuple(found.get(name) for name in PIECES)


def once_per_text(texts):
    """{script: the scripts whose PIECES read as its own}, the first of each group (in `texts`' order) its key."""
    groups = {}
    for name, text in texts.items():
        groups.setdefault(pieces_text(text), []).append(name)
    return {names[0]: names for names in groups.values()}


GROUPS = once_per_text({name: (ROOT / f"{name}.py").read_text() for name in SCRIPTS})


@pytest.fixture(params=list(GROUPS), ids=[f"{first}(+{len(names) - 1} same)" for first, names in GROUPS.items()])
def script(request):
    """One script of each group of scripts whose pieces read the same (conftest's `script`: every script)."""
    return load_script(request.param)


def test_a_script_whose_pieces_read_otherwise_is_tested_on_its_own():
    """The grouping can tell: a copy of ppo.py with one changed line in policy_loss is a group of its own, a copy
    changed elsewhere is not, and the six scripts' groups name each of them once."""
    text = (ROOT / "ppo.py").read_text()
    changed = text.replace("ratio = logratio.exp()", "ratio = logratio.exp() * 1.0", 1)
    assert changed != text, "policy_loss's line is not where this test looks for it"
    elsewhere = text.replace("def make_env(", "def make_env(  ", 1)
    assert once_per_text({"ppo": text, "copy": changed}) == {"ppo": ["ppo"], "copy": ["copy"]}
    assert once_per_text({"ppo": text, "copy": elsewhere}) == {"ppo": ["ppo", "copy"]}
    assert sorted(name for names in GROUPS.values() for name in names) == sorted(SCRIPTS)

# A 4-step, 1-env segment: step 1 ends an episode, so obs[2] starts a new one (dones[2] = 1); gamma = lambda = 0.5.
SEGMENT = dict(
    rewards=T([[1.0], [2.0], [3.0], [4.0]]),
    values=T([[0.5], [1.0], [1.5], [2.0]]),
    dones=T([[0.0], [0.0], [1.0], [0.0]]),
    next_value=T([[3.0]]),
    next_done=T([0.0]),
    gamma=0.5,
    gae_lambda=0.5,
)


def test_gae_hand_computed(script):
    # deltas: d3 = 4 + .5*3 - 2 = 3.5, d2 = 3 + .5*2 - 1.5 = 2.5, d1 = 2 - 1 = 1 (episode end), d0 = 1 + .5*1 - .5 = 1
    # A3 = 3.5, A2 = 2.5 + .25*3.5 = 3.375, A1 = 1, A0 = 1 + .25*1 = 1.25
    advantages, returns = script.compute_gae(**SEGMENT)
    torch.testing.assert_close(advantages, T([[1.25], [1.0], [3.375], [3.5]]))
    torch.testing.assert_close(returns, T([[1.75], [2.0], [4.875], [5.5]]))


def test_nstep_returns_hand_computed(script):
    # R3 = 4 + .5*3 = 5.5, R2 = 3 + .5*5.5 = 5.75, R1 = 2 (episode end), R0 = 1 + .5*2 = 2; A = R - V
    advantages, returns = script.compute_gae(**SEGMENT, gae=False)
    torch.testing.assert_close(returns, T([[2.0], [2.0], [5.75], [5.5]]))
    torch.testing.assert_close(advantages, T([[1.5], [1.0], [4.25], [3.5]]))


def test_terminal_last_step_does_not_bootstrap(script):
    segment = {**SEGMENT, "next_done": T([1.0])}
    advantages, returns = script.compute_gae(**segment)
    assert returns[3].item() == pytest.approx(4.0)  # the reward alone: next_value is another episode's
    assert advantages[3].item() == pytest.approx(2.0)


def sb3_reference(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    num_steps, num_envs = rewards.shape
    space = Box(-1.0, 1.0, (1,), np.float32)
    buffer = RolloutBuffer(num_steps, space, space, device="cpu", gae_lambda=gae_lambda, gamma=gamma, n_envs=num_envs)
    for t in range(num_steps):
        # SB3's episode_starts[t] means what our dones[t] means: obs[t] begins an episode
        buffer.add(np.zeros((num_envs, 1)), np.zeros((num_envs, 1)), rewards[t], dones[t], T(values[t]), torch.zeros(num_envs))
    buffer.compute_returns_and_advantage(T(next_value), next_done)
    return buffer.advantages, buffer.returns


@pytest.mark.parametrize("gae", [True, False])
def test_gae_matches_stable_baselines3(script, gae):
    rng = np.random.default_rng(0)
    num_steps, num_envs, gamma, gae_lambda = 64, 3, 0.99, 0.95
    rewards = rng.normal(size=(num_steps, num_envs)).astype(np.float32)
    values = rng.normal(size=(num_steps, num_envs)).astype(np.float32)
    dones = (rng.random((num_steps, num_envs)) < 0.1).astype(np.float32)
    next_value = rng.normal(size=num_envs).astype(np.float32)
    next_done = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    # without GAE the returns are n-step returns bootstrapped at the segment's end: SB3's GAE with lambda = 1
    ref_adv, ref_ret = sb3_reference(rewards, values, dones, next_value, next_done, gamma, gae_lambda if gae else 1.0)
    advantages, returns = script.compute_gae(
        T(rewards), T(values), T(dones), T(next_value).reshape(1, -1), T(next_done), gamma, gae_lambda, gae
    )
    np.testing.assert_allclose(advantages.numpy(), ref_adv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(returns.numpy(), ref_ret, rtol=1e-4, atol=1e-4)


# the clipped objective min(r A, clip(r, 1 - eps, 1 + eps) A) with eps = 0.2, worked out per case
CLIP_CASES = [
    (0.5, 1.0, 0.5),  # A > 0, r below the range: the unclipped r A is the smaller
    (1.0, 1.0, 1.0),
    (1.5, 1.0, 1.2),  # A > 0, r above the range: clipped at 1.2
    (0.5, -1.0, -0.8),  # A < 0, r below the range: clipped at 0.8 * A
    (1.0, -1.0, -1.0),
    (1.5, -1.0, -1.5),  # A < 0, r above the range: the unclipped r A is the smaller
]


@pytest.mark.parametrize("ratio,advantage,objective", CLIP_CASES)
def test_clipped_surrogate(script, ratio, advantage, objective):
    oldlogprob = T([-1.0])
    newlogprob = (oldlogprob + np.log(ratio)).requires_grad_()
    loss = script.policy_loss(newlogprob, oldlogprob, T([advantage]), "clip", 0.2, 1.0)
    assert loss.item() == pytest.approx(-objective, rel=1e-5)
    loss.backward()
    clipped = objective != pytest.approx(ratio * advantage)
    # where the clipped term is the minimum the objective is flat: no gradient pushes r further out
    expected_grad = 0.0 if clipped else -ratio * advantage  # d(-r A)/d log r = -r A
    assert newlogprob.grad.item() == pytest.approx(expected_grad, abs=1e-6)


def test_unclipped_and_kl_penalty_objectives(script):
    g = torch.Generator().manual_seed(0)
    oldlogprob = torch.randn(100, generator=g)
    newlogprob = oldlogprob + 0.3 * torch.randn(100, generator=g)
    advantages = torch.randn(100, generator=g)
    ratio = (newlogprob - oldlogprob).exp()
    surrogate = (ratio * advantages).mean()
    kl_estimate = (ratio - 1 - (newlogprob - oldlogprob)).mean()
    assert script.policy_loss(newlogprob, oldlogprob, advantages, "unclipped", 0.2, 3.0).item() == pytest.approx(
        -surrogate.item(), rel=1e-5
    )
    for surrogate_name in ("kl-fixed", "kl-adaptive"):
        loss = script.policy_loss(newlogprob, oldlogprob, advantages, surrogate_name, 0.2, 3.0)
        assert loss.item() == pytest.approx(-(surrogate - 3.0 * kl_estimate).item(), rel=1e-5)


def test_kl_penalty_estimates_kl_old_new(script):
    """The penalty's estimate, averaged over actions drawn from the old policy, is KL[pi_old, pi] (paper, eq. 8)."""
    old = torch.distributions.Normal(T([0.0, 1.0]), T([1.0, 0.5]))
    new = torch.distributions.Normal(T([0.3, 0.8]), T([1.2, 0.6]))
    torch.manual_seed(0)
    actions = old.sample((200_000,))
    oldlogprob, newlogprob = old.log_prob(actions).sum(1), new.log_prob(actions).sum(1)
    zero_adv = torch.zeros_like(oldlogprob)
    penalty = script.policy_loss(newlogprob, oldlogprob, zero_adv, "kl-fixed", 0.2, 1.0).item()
    exact = torch.distributions.kl_divergence(old, new).sum().item()
    assert penalty == pytest.approx(exact, rel=0.02)
    reverse = torch.distributions.kl_divergence(new, old).sum().item()
    assert abs(penalty - exact) < abs(penalty - reverse)


@pytest.mark.parametrize(
    "kl,expected",
    [(0.001, 0.5), (0.0066, 0.5), (0.0067, 1.0), (0.01, 1.0), (0.015, 1.0), (0.0151, 2.0), (0.5, 2.0)],
)
def test_adaptive_kl_beta_rule(script, kl, expected):
    # the paper: d < d_targ / 1.5 halves beta, d > d_targ * 1.5 doubles it; here d_targ = 0.01, beta = 1
    assert script.adapt_kl_beta(1.0, kl, 0.01) == pytest.approx(expected)


@pytest.mark.parametrize(
    "newvalue,oldvalue,ret,clip_vloss,expected",
    [
        (3.0, 1.0, 2.0, True, 0.5 * 1.0),  # unclipped error 1 > clipped (1.2 - 2)^2 = 0.64
        (1.5, 1.0, 3.0, True, 0.5 * 3.24),  # clipped (1.2 - 3)^2 = 3.24 > unclipped 2.25
        (1.5, 1.0, 3.0, False, 0.5 * 2.25),
        (1.1, 1.0, 3.0, True, 0.5 * 3.61),  # inside the range both are (1.1 - 3)^2
    ],
)
def test_value_loss(script, newvalue, oldvalue, ret, clip_vloss, expected):
    loss = script.value_loss(T([newvalue]), T([oldvalue]), T([ret]), 0.2, clip_vloss)
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_advantage_normalization(script):
    x = np.array([1.0, 2.0, 4.0, 9.0], dtype=np.float32)
    expected = (x - x.mean()) / (x.std(ddof=1) + 1e-8)
    np.testing.assert_allclose(script.normalize_advantages(T(x)).numpy(), expected, rtol=1e-5)
