"""The details beyond the paper's and the blog's: X4 (skrl's KL-adaptive learning rate), X5 (value normalization), G1's
fifth objective (SPO) and M9 (bounded action distributions), each against an independent reference: the KL rule by hand
and against skrl's KLAdaptiveLR, the running statistics against gymnasium's RunningMeanStd, SPO's loss and gradient from
the paper's formula, the tanh-Gaussian's log-probability against stable-baselines3's SquashedDiagGaussianDistribution
and the Beta's against a density computed by hand; then each one trained for real (`learning`)."""

import dataclasses
import glob
import math

import numpy as np
import pytest
import torch
from conftest import SCRIPTS, continuous, forward, make_agent, needs, read_scalars, run_script, run_script_until, update_case

CONTINUOUS = [name for name in SCRIPTS if continuous(name)]


def load(name):
    from conftest import load_script

    return load_script(name)


# ---------------------------------------------------------------------------------------------------------------------
# X4: the learning rate set by the KL


def by_hand(lr, kl, desired, low, high):
    """skrl's rule written out: above 2 x desired divide by 1.5, below desired / 2 multiply by 1.5, within [low, high]."""
    if kl > 2 * desired:
        return max(lr / 1.5, low)
    if kl < desired / 2:
        return min(lr * 1.5, high)
    return lr


KLS = [0.03, 0.001, 0.01, 0.0161, 0.0159, 0.004, 0.0041, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("name", SCRIPTS)
def test_x4_rule_by_hand(name):
    """A made-up KL sequence (desired KL 0.008: the rate moves above 0.016 and below 0.004) with bounds close enough
    that both clamps are reached: the rates follow the rule, and the first three steps are the hand-computed 1e-3 / 1.5,
    then x 1.5, then unchanged."""
    script = load(name)
    args = script.Args(kl_adaptive_lr=True, anneal_lr=False, desired_kl=0.008, min_lr=2e-4, max_lr=3e-3)
    optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=1e-3)
    lr, seen = 1e-3, []
    for kl in KLS:
        script.adapt_learning_rate(optimizer, kl, args)
        lr = by_hand(lr, kl, 0.008, 2e-4, 3e-3)
        seen.append(optimizer.param_groups[0]["lr"])
        assert seen[-1] == pytest.approx(lr, rel=1e-12), kl
    assert seen[:3] == pytest.approx([1e-3 / 1.5, 1e-3, 1e-3])
    assert min(seen) == pytest.approx(2e-4) and max(seen) == pytest.approx(3e-3)  # both clamps reached


@needs("skrl")
@pytest.mark.parametrize("name", SCRIPTS)
def test_x4_rule_is_skrls(name):
    """The same sequence through skrl's KLAdaptiveLR (its scheduler on its own optimizer) gives the same rates."""
    from skrl.resources.schedulers.torch import KLAdaptiveLR

    script = load(name)
    args = script.Args(kl_adaptive_lr=True, anneal_lr=False, desired_kl=0.01, min_lr=1e-5, max_lr=5e-3)
    ours = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=3e-4)
    theirs = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=3e-4)
    scheduler = KLAdaptiveLR(theirs, kl_threshold=0.01, min_lr=1e-5, max_lr=5e-3)
    for kl in KLS:
        script.adapt_learning_rate(ours, kl, args)
        scheduler.step(kl)
        assert ours.param_groups[0]["lr"] == pytest.approx(theirs.param_groups[0]["lr"], rel=1e-12), kl


@pytest.mark.parametrize("name", SCRIPTS)
def test_x4_steps_once_an_epoch_on_the_epochs_mean_kl(name, tmp_path, monkeypatch):
    """update_policy with --kl-adaptive-lr: after each of 3 epochs the rule gets the mean approx KL of that epoch's
    minibatches, recorded from the steps themselves (not the first, the last or the overall one), and the rate moves
    by it (a desired KL of 1 keeps every KL below half of it: x 1.5 each epoch)."""
    script = load(name)
    agent, batch, args = update_case(script, tmp_path, monkeypatch)
    args = dataclasses.replace(args, update_epochs=3, kl_adaptive_lr=True, anneal_lr=False, learning_rate=1e-3)
    args = dataclasses.replace(args, desired_kl=1.0, min_lr=1e-6, max_lr=1.0)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5)
    kls = []

    def step(*a, **k):
        stats = script.minibatch_step(*a, **k)
        kls.append(stats["approx_kl"].item())
        return stats

    rates = []
    real_adapt = script.adapt_learning_rate
    monkeypatch.setattr(script, "adapt_learning_rate", lambda o, kl, a: (real_adapt(o, kl, a), rates.append(kl)))
    script.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta, 1, step)
    per_epoch = np.array(kls).reshape(3, -1).mean(1)
    np.testing.assert_allclose(rates, per_epoch, rtol=1e-5)
    lr = 1e-3
    for kl in per_epoch:
        lr = by_hand(lr, kl, 1.0, 1e-6, 1.0)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(lr, rel=1e-9)
    assert lr == pytest.approx(1e-3 * 1.5**3)


@pytest.mark.parametrize("name", SCRIPTS)
def test_x4_refused_with_g6_and_bad_bounds(name):
    from ppo_utils.flag_checks import ArgError

    script = load(name)
    kind = script.Args.env_kinds[0]
    with pytest.raises(ArgError, match="--no-anneal-lr"):
        script.Args(kl_adaptive_lr=True).check(1, kind)
    with pytest.raises(ArgError, match="--min-lr"):
        script.Args(kl_adaptive_lr=True, anneal_lr=False, min_lr=1e-2, max_lr=1e-3).check(1, kind)
    script.Args(kl_adaptive_lr=True, anneal_lr=False).check(1, kind)


# ---------------------------------------------------------------------------------------------------------------------
# X5: the critic learns standardized returns


@pytest.mark.parametrize("name", SCRIPTS)
def test_x5_statistics_are_gymnasiums_running_mean_std(name):
    """Batches of returns of different sizes and scales: the mean, variance and count are those of gymnasium's
    RunningMeanStd fed the same returns (float64 there, float32 here); standardizing and back is the identity."""
    from gymnasium.wrappers.utils import RunningMeanStd

    script = load(name)
    norm, reference, g = script.ValueNorm(), RunningMeanStd(shape=()), np.random.default_rng(0)
    for n, scale, shift in [(64, 1.0, 0.0), (128, 30.0, 100.0), (7, 0.1, -5.0), (2048, 300.0, 1000.0)]:
        returns = (g.standard_normal(n) * scale + shift).astype(np.float32)
        norm.update(torch.as_tensor(returns))
        reference.update(returns.astype(np.float64))
        assert norm.mean.item() == pytest.approx(reference.mean, rel=1e-5)
        assert norm.var.item() == pytest.approx(reference.var, rel=1e-4)
        assert norm.count.item() == pytest.approx(reference.count, rel=1e-6)
    x = torch.tensor([-1000.0, 0.0, 1000.0, 2500.0])
    expected = (x.double() - reference.mean) / math.sqrt(reference.var + 1e-8)
    np.testing.assert_allclose(norm(x).double(), expected, rtol=1e-4)
    np.testing.assert_allclose(norm(norm(x), inverse=True), x, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("name", SCRIPTS)
def test_x5_loss_is_in_the_critics_standardized_units(name, tmp_path, monkeypatch):
    """The agent of an update case with --norm-value's statistics set to mean 3, variance 4 (std 2): its values are
    2 x the critic's output + 3, and the value loss is G4's clipped loss of that output against (x - 3) / 2 of the
    rollout's values and returns."""
    script = load(name)
    agent, batch, args = update_case(script, tmp_path, monkeypatch)
    args = dataclasses.replace(args, norm_value=True)
    normed = with_value_norm(script, agent, args)
    normed.value_norm.mean.fill_(3.0)
    normed.value_norm.var.fill_(4.0 - 1e-8)
    _, stats = script.ppo_loss(normed, batch, args, args.clip_coef, args.kl_beta)
    raw = value_of(agent, batch)  # the same critic without statistics: its output as it is
    np.testing.assert_allclose(value_of(normed, batch), 2 * raw + 3, rtol=1e-5, atol=1e-5)
    old, ret = (batch["values"] - 3.0) / 2.0, (batch["returns"] - 3.0) / 2.0
    clipped = old + (raw - old).clamp(-args.clip_coef, args.clip_coef)
    expected = 0.5 * torch.max((raw - ret) ** 2, (clipped - ret) ** 2).mean()
    assert stats["value_loss"].item() == pytest.approx(expected.item(), rel=1e-4)


def with_value_norm(script, agent, args):
    """A copy of `agent` (its weights) built with `args` (--norm-value): the statistics are all it adds."""
    from types import SimpleNamespace

    from conftest import ROLLOUT_ENVS, observation_and_action_spaces

    if hasattr(agent, "initial_state"):  # a recurrent case's agent, made for its rollout's env
        envs = script.make_envs(script.Args(env_id=ROLLOUT_ENVS[script.__name__], num_envs=1))
        spaces = SimpleNamespace(single_observation_space=envs.single_observation_space,
                                 single_action_space=envs.single_action_space)  # fmt: skip
        envs.close()
    else:
        obs_space, action_space = observation_and_action_spaces(script)
        spaces = SimpleNamespace(single_observation_space=obs_space, single_action_space=action_space)
    normed = script.Agent(spaces, args).to(next(agent.parameters()).device)
    missing, unexpected = normed.load_state_dict(agent.state_dict(), strict=False)
    assert not unexpected and missing and all(key.startswith("value_norm.") for key in missing), missing
    return normed


def value_of(agent, batch):
    """The agent's values of the batch's observations (a recurrent one's through the batch's sequences)."""
    with torch.no_grad():
        if "state" in batch:
            return agent.get_action_and_value(batch["obs"], batch["state"], batch["dones"], batch["actions"])[3].flatten()
        masks = [batch["masks"]] if "masks" in batch else []
        return agent.get_action_and_value(batch["obs"], *masks, batch["actions"])[3].flatten()


def returns_of_rank(rank):
    return np.random.default_rng(rank).standard_normal(300).astype(np.float32) * (1 + 9 * rank) + 50 * rank


def ranks_worker(rank, port, tmp_path):
    """One of two processes (gloo): X5's update and X4's rule with each rank's own returns and KL."""
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    cont = load("ppo_continuous_action")
    norm = cont.ValueNorm()
    norm.update(torch.as_tensor(returns_of_rank(rank)), world_size=2)
    from ppo_utils.distributed import all_ranks_mean

    kl = all_ranks_mean(torch.tensor([0.001, 0.05][rank]), 2).item()  # as update_policy averages an epoch's KL
    args = cont.Args(kl_adaptive_lr=True, anneal_lr=False, desired_kl=0.01)
    optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=1e-3)
    cont.adapt_learning_rate(optimizer, kl, args)
    torch.save({"mean": norm.mean, "var": norm.var, "count": norm.count, "lr": optimizer.param_groups[0]["lr"]},
               tmp_path / f"rank{rank}.pt")  # fmt: skip
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_x5_statistics_and_x4_rate_are_all_ranks(tmp_path):
    """X2: two ranks with different returns hold the same statistics, those of both ranks' returns together (numpy's);
    with KLs 0.001 and 0.05 (mean 0.0255, above 2 x 0.01) both divide the rate by 1.5, where either alone would not
    agree with the other."""
    import torch.multiprocessing as mp
    from conftest import free_port

    mp.spawn(ranks_worker, args=(free_port(), tmp_path), nprocs=2)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    both = np.concatenate([returns_of_rank(0), returns_of_rank(1)]).astype(np.float64)
    for key in ("mean", "var", "count"):
        assert torch.equal(ranks[0][key], ranks[1][key]), key
    count = 1e-4 + len(both)  # RunningMeanStd's start (mean 0, var 1, count 1e-4) weighs next to nothing
    assert ranks[0]["count"].item() == pytest.approx(count)
    assert ranks[0]["mean"].item() == pytest.approx(both.mean() * len(both) / count, rel=1e-5)
    assert ranks[0]["var"].item() == pytest.approx(both.var(), rel=1e-4)
    assert ranks[0]["lr"] == ranks[1]["lr"] == pytest.approx(1e-3 / 1.5)


# ---------------------------------------------------------------------------------------------------------------------
# G1: SPO


@pytest.mark.parametrize("name", SCRIPTS)
def test_spo_loss_and_gradient_from_the_formula(name):
    """Xie et al. (2025), eq. for SPO: maximize r A - |A| / (2 eps) (r - 1)^2. Four samples, eps 0.2, written out in
    floats: the loss is its negated mean, and its gradient in each log-probability is -(A r - |A| / eps (r - 1) r) / n."""
    script = load(name)
    new = torch.tensor([0.1, -0.3, 0.5, 0.0], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([0.0, 0.0, 0.2, -0.4], dtype=torch.float64)
    adv = torch.tensor([1.5, -2.0, 0.7, -0.1], dtype=torch.float64)
    loss = script.policy_loss(new, old, adv, "spo", 0.2, 1.0)
    loss.backward()
    expected, grads = 0.0, []
    for n, o, a in zip([0.1, -0.3, 0.5, 0.0], [0.0, 0.0, 0.2, -0.4], [1.5, -2.0, 0.7, -0.1]):
        r = math.exp(n - o)
        expected += -(r * a - abs(a) / (2 * 0.2) * (r - 1) ** 2) / 4
        grads.append(-(a * r - abs(a) / 0.2 * (r - 1) * r) / 4)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(new.grad.numpy(), grads, rtol=1e-12)


# ---------------------------------------------------------------------------------------------------------------------
# M9: bounded action distributions


def set_head(agent, bias):
    """The policy head outputs `bias` whatever the observation."""
    with torch.no_grad():
        agent.actor_mean.weight.zero_()
        agent.actor_mean.bias.copy_(torch.as_tensor(bias))


@needs("stable_baselines3")
@pytest.mark.parametrize("name", CONTINUOUS)
def test_tanh_gaussian_log_prob_is_sb3s(name):
    """--action-dist tanh-gaussian: the log-probability of a stored pre-squash sample u is SB3's
    SquashedDiagGaussianDistribution.log_prob(tanh(u), gaussian_actions=u) for the same mean and log-std; the entropy
    term is its negation (SB3's PPO does the same where the entropy has no closed form)."""
    from stable_baselines3.common.distributions import SquashedDiagGaussianDistribution

    script = load(name)
    agent = make_agent(script, action_dist="tanh-gaussian", log_std_init=-0.5)
    mean = torch.tensor([0.3, -1.2, 0.0])
    set_head(agent, mean)
    obs = torch.randn(5, 11, generator=torch.Generator().manual_seed(0))
    u = torch.tensor([[0.1, -2.5, 3.0], [0.0, 0.0, 0.0], [-4.0, 1.0, 0.5], [2.0, -0.3, -1.0], [0.7, 0.7, 0.7]])
    _, logprob, entropy, _ = forward(agent, obs, u)
    dist = SquashedDiagGaussianDistribution(3).proba_distribution(mean.expand(5, 3), torch.full((5, 3), -0.5))
    expected = dist.log_prob(torch.tanh(u), gaussian_actions=u)
    np.testing.assert_allclose(logprob.detach(), expected, rtol=1e-5)
    np.testing.assert_allclose(entropy.detach(), -expected, rtol=1e-5)


@pytest.mark.parametrize("name", CONTINUOUS)
def test_beta_log_prob_by_hand(name):
    """--action-dist beta: heads set to softplus^-1(1) and softplus^-1(2) give Beta(2, 3) (both parameters softplus + 1);
    at x = 0.25 its density is x (1 - x)^2 / B(2, 3) = 12 x (1 - x)^2 = 1.6875, so the log-probability is log 1.6875
    (the same in each of the three action dimensions: 3 log 1.6875); torch's Beta gives it too, and its samples lie
    in [0, 1]."""
    script = load(name)
    agent = make_agent(script, action_dist="beta")
    inv_softplus = lambda y: math.log(math.expm1(y))
    set_head(agent, [inv_softplus(1.0)] * 3 + [inv_softplus(2.0)] * 3)
    obs = torch.randn(4, 11, generator=torch.Generator().manual_seed(1))
    action = torch.full((4, 3), 0.25)
    _, logprob, entropy, _ = forward(agent, obs, action)
    np.testing.assert_allclose(logprob.detach(), [3 * math.log(1.6875)] * 4, rtol=1e-5)
    reference = torch.distributions.Beta(torch.tensor(2.0), torch.tensor(3.0))
    np.testing.assert_allclose(entropy.detach(), [3 * reference.entropy().item()] * 4, rtol=1e-5)
    sample = forward(agent, torch.randn(1000, 11), None)[0]
    assert sample.min() >= 0 and sample.max() <= 1 and 0.35 < sample.mean() < 0.45  # Beta(2, 3)'s mean is 0.4


@pytest.mark.parametrize("name", CONTINUOUS)
@pytest.mark.parametrize("dist", ["tanh-gaussian", "beta"])
def test_m9_env_gets_the_sample_mapped_into_its_bounds(name, dist):
    """make_envs with a bounded distribution: Pendulum-v1's torque in [-2, 2] gets 2 tanh(u) for a tanh-Gaussian's u
    and -2 + 4 x for a Beta's x; the agent's action space keeps its shape."""
    script = load(name)
    envs = script.make_envs(script.Args(env_id="Pendulum-v1", num_envs=2, action_dist=dist, norm_obs=False))
    sample = np.array([[0.3], [-5.0]] if dist == "tanh-gaussian" else [[0.1], [1.0]], dtype=np.float32)
    expected = 2 * np.tanh(sample) if dist == "tanh-gaussian" else -2 + 4 * sample
    wrapper, actions = envs, sample
    while hasattr(wrapper, "env"):
        if hasattr(wrapper, "actions") and callable(wrapper.actions):
            actions = wrapper.actions(actions)
        wrapper = wrapper.env
    np.testing.assert_allclose(actions, expected, rtol=1e-6)
    assert envs.single_action_space.shape == (1,)
    envs.close()


@pytest.mark.parametrize("name", CONTINUOUS)
def test_m9_beta_refuses_a_log_std(name):
    from ppo_utils.flag_checks import ArgError

    script = load(name)
    with pytest.raises(ArgError, match="--state-dependent-std"):
        script.Args(action_dist="beta", state_dependent_std=True).check(1, "continuous")


# ---------------------------------------------------------------------------------------------------------------------
# trained for real


def returns_of(tmp_path):
    (run_dir,) = glob.glob(str(tmp_path / "runs" / "*"))
    return np.array([value for _, value in read_scalars(run_dir, "charts/episodic_return")])


X4 = ["--kl-adaptive-lr", "--no-anneal-lr"]


@pytest.mark.learning
@pytest.mark.parametrize("flags", [["--surrogate", "spo"], X4, ["--norm-value"]], ids=["spo", "x4", "x5"])
def test_ppo_learns_cartpole_with(tmp_path, flags):
    """ppo.py's CartPole test (test_discrete_runs.py: 50k steps, the last 20 episodes average 100 or more; a random
    policy 20-24, a flipped gradient under 10) with each new discrete detail."""
    result = run_script("ppo", "--env-id", "CartPole-v1", "--total-timesteps", "50000", *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    returns = returns_of(tmp_path)
    assert returns[:20].mean() < 50
    assert returns[-20:].mean() >= 100, returns[-20:]


CONTINUOUS_FLAGS = {
    "spo": ["--surrogate", "spo"],
    "x4": X4,
    "x5": ["--norm-value"],
    "tanh-gaussian": ["--action-dist", "tanh-gaussian"],
    "beta": ["--action-dist", "beta"],
}


@pytest.mark.learning
@pytest.mark.parametrize("flags", list(CONTINUOUS_FLAGS.values()), ids=list(CONTINUOUS_FLAGS))
def test_continuous_learns_inverted_pendulum_with(tmp_path, flags):
    """test_continuous_runs.py's InvertedPendulum test (a ten-episode window of 900 or more within 80k steps; a random
    policy scores 5-10) with each new continuous detail."""
    base = ["--env-id", "InvertedPendulum-v5", "--total-timesteps", "81920"]
    result = run_script_until("ppo_continuous_action", *base, *flags, cwd=tmp_path, enough=900)
    assert result.returncode == 0, result.stderr
    returns = returns_of(tmp_path)
    assert np.mean(returns[:10]) < 100
    assert np.convolve(returns, np.ones(10) / 10, mode="valid").max() >= 900, returns[-10:]
