"""The speed options compute what the plain code computes: --compile's loss and the fused Adam every script uses."""

import copy

import numpy as np
import pytest
import run_plumbing
import torch
from conftest import fixed_batch, load_script, make_agent


def run_update(script, agent, batch, args, loss_fn=None, fused=True):
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=fused)
    np.random.seed(3)  # the same minibatch order for both paths
    kwargs = {} if loss_fn is None else {"loss_fn": loss_fn}
    stats = script.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta, 1, **kwargs)
    return stats, [p.detach().clone() for p in agent.parameters()]


def loss_and_grads(agent, mb, args, loss_fn):
    agent.zero_grad()
    loss, _ = loss_fn(agent, mb, args, args.clip_coef, args.kl_beta)
    loss.backward()
    return loss.item(), [p.grad.clone() for p in agent.parameters()]


def assert_same_update(first, second, atol, param_atol=None):
    """The logged losses to float tolerance, and the parameters if param_atol is given."""
    (stats_a, params_a), (stats_b, params_b) = first, second
    for key in ("value_loss", "policy_loss", "entropy", "approx_kl", "clipfrac"):
        assert float(stats_a[key]) == pytest.approx(float(stats_b[key]), rel=1e-4, abs=atol), key
    if param_atol is not None:
        for a, b in zip(params_a, params_b):
            torch.testing.assert_close(a, b, atol=param_atol, rtol=1e-4)


@pytest.fixture(params=["ppo_continuous_action", "ppo_atari"])
def case(request):
    """(script, args, agent, batch): a batch of 256 samples, 2 epochs of 4 minibatches."""
    script = load_script(request.param)
    agent = make_agent(script)
    return (
        script,
        script.Args(num_envs=1, num_steps=256, num_minibatches=4, update_epochs=2),
        agent,
        fixed_batch(script, agent, n=256),
    )


def test_compiled_loss_gives_the_plain_update(case):
    script, args, agent, batch = case
    compiled = run_plumbing.compiled(script.ppo_loss, torch.device("cpu"))
    assert compiled is not script.ppo_loss  # this machine has a C++ compiler, so the compiled path is really taken

    # one minibatch: the loss and the gradients of both paths against a float64 computation of the same network
    mb = {key: value[:64] for key, value in batch.items()}
    twin = copy.deepcopy(agent).double()
    if hasattr(twin, "preprocess"):  # Atari frames become float32 there; keep them float64
        to_float32 = twin.preprocess
        twin.preprocess = lambda x: to_float32(x).double()
    mb64 = {key: value.double() if value.dtype == torch.float32 else value for key, value in mb.items()}
    exact_loss, exact_grads = loss_and_grads(twin, mb64, args, script.ppo_loss)
    for loss_fn in (script.ppo_loss, compiled):
        loss, grads = loss_and_grads(agent, mb, args, loss_fn)
        assert loss == pytest.approx(exact_loss, rel=1e-5)
        for grad, exact in zip(grads, exact_grads):
            # eager PyTorch's own first-layer conv gradients are ~5e-4 off float64 here (summing 25,600 products)
            assert (grad.double() - exact).norm() <= 2e-3 * exact.norm()

    # a whole update (8 Adam steps): the same logged losses. Parameters are not compared element by element: Adam's
    # normalized step turns a rounding difference in a near-zero gradient into a difference of up to one step.
    plain = run_update(script, copy.deepcopy(agent), batch, args)
    fast = run_update(script, copy.deepcopy(agent), batch, args, loss_fn=compiled)
    assert_same_update(plain, fast, atol=1e-5)


def test_fused_adam_gives_the_for_loop_adam_update(case):
    script, args, agent, batch = case
    assert_same_update(
        run_update(script, copy.deepcopy(agent), batch, args, fused=False),
        run_update(script, copy.deepcopy(agent), batch, args, fused=True),
        atol=1e-6,
        param_atol=1e-6,
    )


def test_compile_without_a_compiler_runs_eagerly_with_a_warning(monkeypatch, capsys):
    script = load_script("ppo_continuous_action")
    monkeypatch.setattr(run_plumbing.shutil, "which", lambda name: None)
    assert run_plumbing.compiled(script.ppo_loss, torch.device("cpu")) is script.ppo_loss
    assert "--compile needs a C++ compiler" in capsys.readouterr().err
