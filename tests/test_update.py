"""update_policy, the minibatch loop every script shares (G3, G5, G7, G8, X3): against a step-by-step re-computation
written from the formulas on a fixed batch, KL early stopping, and the surrogate objective it improves, measured from
the paper's formula."""

import dataclasses

import numpy as np
import pytest
import torch
from conftest import (
    FEED_FORWARD,
    batch_logprobs,
    fixed_batch,
    load_script,
    make_agent,
    read_scalars,
    reference_minibatch_loss,
    update_case,
)


@pytest.fixture(params=FEED_FORWARD)
def feed_forward(request):
    """The feed-forward scripts; the recurrent ones' minibatches (whole sequences, recomputed states) are checked in
    test_rnn.py."""
    return load_script(request.param)


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
def test_update_matches_hand_written_minibatch_sgd(feed_forward, flags):
    """G3 per minibatch, G5 loss composition, G7 minibatches, G8 global-norm clipping: with plain SGD in place of Adam
    the parameters after one epoch of two minibatches equal a step-by-step re-computation. Tanh hidden layers for both
    networks: at a ReLU's kink, the last bit in which two correct computations differ (here the gradient clip's
    arithmetic) can switch a unit off in the second minibatch and part the parameters by far more than rounding (ppo.py's
    and ppo_masked.py's are tanh, with no flag). A masked script's batch holds random masks, each action drawn under
    its own: the update must score each minibatch's actions under that minibatch's masks."""
    script = feed_forward
    tanh = {"activation": "tanh"} if "activation" in {f.name for f in dataclasses.fields(script.Args)} else {}
    case = {"max_grad_norm": 0.05, **flags, **tanh}
    args = script.Args(num_envs=1, num_steps=64, num_minibatches=2, update_epochs=1, **case)
    agent, reference = make_agent(script, **tanh), make_agent(script, **tanh)
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
        whole = make_agent(script, **tanh)
        normalized = {**batch, "advantages": (batch["advantages"] - batch["advantages"].mean()) / batch["advantages"].std()}
        reference_sgd_update(
            whole, normalized, script.Args(norm_adv=False, max_grad_norm=0.05, **tanh), lr, 0.2, [order[:32], order[32:]]
        )
        assert any(not torch.allclose(p, q, atol=1e-7) for p, q in zip(agent.parameters(), whole.parameters()))


# (learning rate, clip range) of the update: the recurrent scripts' batches are real rollouts', with 0.01-gain policy heads
UPDATE_SETTINGS = {"ppo_continuous_action": (3e-4, 0.2), "ppo_atari": (3e-4, 0.2), "ppo_rnn": (1e-3, 0.1),
                   "ppo_rnn_continuous_action": (1e-3, 0.1), "ppo": (3e-4, 0.2), "ppo_masked": (3e-4, 0.2)}  # fmt: skip


class CountingAdam(torch.optim.Adam):
    steps = 0

    def step(self, closure=None):
        self.steps += 1
        return super().step(closure)


@pytest.mark.parametrize("target_kl,expected_epochs", [(None, 4), (1e9, 4), (0.0, 1)])
def test_kl_early_stopping_after_an_epoch(script, tmp_path, monkeypatch, target_kl, expected_epochs):
    """X3: the KL is checked after each whole epoch; a target of 0 stops after the first one."""
    agent, batch, args = update_case(script, tmp_path, monkeypatch)
    args = dataclasses.replace(args, update_epochs=4, target_kl=target_kl)
    optimizer = CountingAdam(agent.parameters(), lr=1e-3)
    stats = script.update_policy(agent, optimizer, batch, args, UPDATE_SETTINGS[script.__name__][1], 1.0)
    assert stats["epochs"] == expected_epochs
    assert optimizer.steps == expected_epochs * args.num_minibatches


TINY_RUNS = {  # two updates of each script, eager (no compile; the recurrent scripts have no --compile), on small envs
    "ppo_continuous_action": dict(env_id="Pendulum-v1", num_steps=64, num_minibatches=2, total_timesteps=128, compile=False),
    "ppo_atari": dict(num_envs=2, num_steps=32, num_minibatches=2, total_timesteps=128, compile=False),
    "ppo_rnn": dict(env_id="CartPoleNoVelocity-v1", num_envs=4, num_steps=32, num_minibatches=2, total_timesteps=256),
    "ppo_rnn_continuous_action": dict(env_id="Pendulum-v1", num_envs=4, num_steps=32, num_minibatches=2, total_timesteps=256),
    "ppo": dict(env_id="CartPole-v1", num_envs=2, num_steps=32, num_minibatches=2, total_timesteps=128, compile=False),
    "ppo_masked": dict(env_id="Knapsack-v1", num_envs=2, num_steps=32, num_minibatches=2, total_timesteps=128, compile=False),
}


@pytest.mark.slow
@pytest.mark.parametrize("target_kl,logged_epochs", [(None, None), (1e9, [3, 3]), (0.0, [1, 1])])
def test_each_update_logs_the_epochs_it_ran_under_x3(script, tmp_path, monkeypatch, target_kl, logged_epochs):
    """With --target-kl, charts/update_epochs says how many of the update's epochs ran (all 3 under a target no KL
    reaches, 1 under a target of 0); without it the tag is not written."""
    monkeypatch.chdir(tmp_path)
    flags = {**TINY_RUNS[script.__name__], "update_epochs": 3, "target_kl": target_kl}
    script.train(script.Args(**flags))
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert len(read_scalars(run_dir, "charts/SPS")) == 2  # two updates logged
    if logged_epochs is None:
        with pytest.raises(KeyError):  # the tag was never written
            read_scalars(run_dir, "charts/update_epochs")
    else:
        assert [value for _, value in read_scalars(run_dir, "charts/update_epochs")] == logged_epochs


def clipped_surrogate(newlogprob, oldlogprob, advantages, eps):
    """The paper's L^CLIP = mean(min(r A, clip(r, 1 - eps, 1 + eps) A)), r = exp(log pi - log pi_old), with the
    advantages normalized to mean 0 and std 1."""
    r = torch.exp(newlogprob - oldlogprob)
    a = (advantages - advantages.mean()) / advantages.std()
    return torch.minimum(r * a, torch.clamp(r, 1 - eps, 1 + eps) * a).mean().item()


def test_update_improves_the_surrogate_with_sensible_statistics(script, tmp_path, monkeypatch):
    agent, batch, args = update_case(script, tmp_path, monkeypatch)
    args = dataclasses.replace(args, update_epochs=4)
    lr, clip_coef = UPDATE_SETTINGS[script.__name__]
    torch.testing.assert_close(batch_logprobs(agent, batch), batch["logprobs"], rtol=0, atol=1e-5)  # r = 1 to start
    before = clipped_surrogate(batch_logprobs(agent, batch), batch["logprobs"], batch["advantages"], clip_coef)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    stats = script.update_policy(agent, optimizer, batch, args, clip_coef, 1.0)
    assert clipped_surrogate(batch_logprobs(agent, batch), batch["logprobs"], batch["advantages"], clip_coef) > before
    assert 0 <= stats["approx_kl"].item() < 0.1
    assert 0 <= stats["clipfrac"].item() <= 1
    assert stats["epochs"] == 4


def test_logged_statistics_are_the_mean_of_every_minibatch(script, tmp_path, monkeypatch):
    """The update logs each statistic's mean over all minibatches of all epochs (the reference's np.mean of its
    minibatch values), not the last minibatch's: recorded here from each minibatch's own loss call."""
    agent, batch, args = update_case(script, tmp_path, monkeypatch)
    args = dataclasses.replace(args, update_epochs=3)
    recorded = []

    def recording_backward(*loss_args):
        mb_stats = script.ppo_backward(*loss_args)
        recorded.append({key: value.item() for key, value in mb_stats.items()})
        return mb_stats

    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5)
    def recording_step(*step_args):
        return script.minibatch_step(*step_args, backward=recording_backward)

    stats = script.update_policy(agent, optimizer, batch, args, 0.2, 1.0, step=recording_step)
    assert len(recorded) == 3 * args.num_minibatches
    keys = ("policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac")
    assert set(stats) == set(keys) | {"epochs"}
    for key in keys:
        expected = np.mean([minibatch[key] for minibatch in recorded])
        assert stats[key].item() == pytest.approx(expected, rel=1e-5, abs=1e-7), key
    assert stats["value_loss"].item() != pytest.approx(recorded[-1]["value_loss"], rel=1e-3)  # the last minibatch's differs
