"""The speed options compute what the plain code computes: --compile's minibatch step (one graph of the loss, its
gradients, G8's clipping and Adam; the gradients alone under torchrun) and the fused Adam every script uses."""

import copy
import dataclasses

import numpy as np
import pytest
from ppo_utils import compiled as compile_support
import torch
from conftest import FEED_FORWARD, ROOT, SCRIPTS, fixed_batch, load_script, make_agent


def run_update(script, agent, batch, args, compiled=False, fused=True):
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=fused)
    cpu, plain = torch.device("cpu"), script.minibatch_step
    step = plain
    if compiled:
        step = compile_support.compiled_step(script.ppo_loss, plain, agent, optimizer, args.max_grad_norm, 1, cpu)
    np.random.seed(3)  # the same minibatch order for both paths
    stats = script.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta, 1, step)
    return stats, [p.detach().clone() for p in agent.parameters()]


def float64_twin(agent):
    """A float64 copy of the agent (its parameters are loaded from the agent before each use)."""
    twin = copy.deepcopy(agent).double()
    if hasattr(twin, "preprocess"):  # Atari frames become float32 there; keep them float64
        to_float32 = twin.preprocess
        twin.preprocess = lambda x: to_float32(x).double()
    return twin


def loss_stats_grads(script, agent, mb, args, backward):
    """The loss (computed apart, by the plain ppo_loss), the statistics `backward` returns and the gradients it leaves
    in .grad."""
    agent.zero_grad()
    with torch.no_grad():
        loss, _ = script.ppo_loss(agent, mb, args, args.clip_coef, args.kl_beta)
    stats = backward(agent, mb, args, args.clip_coef, args.kl_beta)
    return loss.item(), stats, [p.grad.clone() for p in agent.parameters()]


def assert_matches_float64(script, agent, twin, mb, args, backward):
    """`backward`'s loss, statistics and gradients at the agent's parameters against the plain backward's, computed in
    float64 by `twin` at the same parameters. Returns the statistics and gradients."""
    twin.load_state_dict(agent.state_dict())
    mb64 = {key: value.double() if value.dtype == torch.float32 else value for key, value in mb.items()}
    exact_loss, exact_stats, exact_grads = loss_stats_grads(script, twin, mb64, args, script.ppo_backward)
    loss, stats, grads = loss_stats_grads(script, agent, mb, args, backward)
    assert loss == pytest.approx(exact_loss, rel=1e-5)
    assert list(stats) == list(exact_stats)  # the same statistics by name, in ppo_loss's order
    for key, value in stats.items():
        torch.testing.assert_close(value.double(), exact_stats[key].double(), rtol=1e-4, atol=1e-6)
    for grad, exact in zip(grads, exact_grads):
        # eager PyTorch's own first-layer conv gradients are ~5e-4 off float64 here (summing 25,600 products)
        assert (grad.double() - exact).norm() <= 2e-3 * exact.norm()
    return stats, grads


def assert_same_update(first, second, atol, param_atol=None):
    """The logged losses to float tolerance, and the parameters if param_atol is given."""
    (stats_a, params_a), (stats_b, params_b) = first, second
    for key in ("value_loss", "policy_loss", "entropy", "approx_kl", "clipfrac"):
        assert float(stats_a[key]) == pytest.approx(float(stats_b[key]), rel=1e-4, abs=atol), key
    if param_atol is not None:
        for a, b in zip(params_a, params_b):
            torch.testing.assert_close(a, b, atol=param_atol, rtol=1e-4)


@pytest.fixture(params=FEED_FORWARD)
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


# the compiled gradients alone serve torchrun (X2) and the batched script's agents where their learning rates differ: the
# continuous script's in the README's tier, the others in the full suite (the default path, compiled_step, is below)
@pytest.mark.parametrize("case", [pytest.param(name, marks=[] if name == "ppo_continuous_action" else pytest.mark.long)
                                  for name in FEED_FORWARD], indirect=True)  # fmt: skip
@pytest.mark.slow
def test_compiled_backward_gives_the_plain_gradients(case):
    script, args, agent, batch = case
    compiled = compile_support.compiled_backward(script.ppo_loss, agent, torch.device("cpu"))
    assert compiled is not script.ppo_backward  # this machine has a C++ compiler, so the compiled path is really taken

    # one minibatch: the gradients of both paths against a float64 computation of the same network
    mb = {key: value[:64] for key, value in batch.items()}
    twin = float64_twin(agent)
    for backward in (script.ppo_backward, compiled):
        _, grads = assert_matches_float64(script, agent, twin, mb, args, backward)

    # as backward() does, a second call adds its gradients to those already in .grad
    compiled(agent, mb, args, args.clip_coef, args.kl_beta)
    for grad, p in zip(grads, agent.parameters()):
        torch.testing.assert_close(p.grad, 2 * grad, rtol=1e-5, atol=1e-7)

    # a whole update (2 epochs of 4 minibatches, fused Adam stepping in between, lr raised to 1e-3 so that the parameters
    # move far): at each minibatch, the compiled path at the parameters Adam has just written against float64. The two
    # updates are not compared end to end: Adam's first steps are +-lr per element whatever a gradient's size, so float32
    # rounding in a near-zero gradient flips whole steps, which then compound (the eager path's own drift is the larger).
    start = [p.detach().clone() for p in agent.parameters()]
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=args.adam_eps, fused=True)
    checked = []

    def checked_backward(agent_, mb, *rest):
        checked.append(mb)
        return assert_matches_float64(script, agent_, twin, mb, args, compiled)[0]

    def checked_step(*step_args):  # the plain minibatch step (torchrun's, X2) with the compiled gradients
        return script.minibatch_step(*step_args, backward=checked_backward)

    np.random.seed(3)
    script.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta, 1, checked_step)
    assert len(checked) == 8
    # Adam moved the parameters far enough that the gradient changed well beyond the tolerance above: a graph that had
    # kept the first minibatch's parameters would have failed it
    at_start = copy.deepcopy(agent)
    with torch.no_grad():
        for p, p0 in zip(at_start.parameters(), start):
            p.copy_(p0)
    _, _, grads_end = loss_stats_grads(script, agent, checked[-1], args, script.ppo_backward)
    _, _, grads_start = loss_stats_grads(script, at_start, checked[-1], args, script.ppo_backward)
    change = torch.cat([(end - begin).flatten() for end, begin in zip(grads_end, grads_start)]).norm()
    assert change > 0.05 * torch.cat([end.flatten() for end in grads_end]).norm()


def test_a_new_clip_coef_or_kl_beta_does_not_rebuild_the_graph(cont):
    """X1 anneals clip_coef and kl-adaptive changes kl_beta every update: were they baked into the graph as constants,
    each new value would compile it again (and after 8 values dynamo would give up and run eagerly)."""
    agent = make_agent(cont)
    args = cont.Args(num_envs=1, num_steps=64, num_minibatches=1, surrogate="kl-adaptive")
    batch = fixed_batch(cont, agent, n=64)
    backward = compile_support.compiled_backward(cont.ppo_loss, agent, torch.device("cpu"))
    torch._dynamo.reset()  # dynamo's cache and counters start empty, whatever this process compiled before
    torch._dynamo.utils.counters.clear()
    for clip_coef, kl_beta in ((0.2, 1.0), (0.19, 2.0), (0.18, 0.5)):
        agent.zero_grad()
        backward(agent, batch, args, clip_coef, kl_beta)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def plain_update(script, agent, batch, args, updates=2, lr=1e-3):
    """`updates` updates with the plain minibatch step and PyTorch's for-loop Adam (G6's learning rate lowered between
    them); returns the parameters and the optimizer."""
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=args.adam_eps, foreach=False)
    return updated(script, agent, optimizer, batch, args, script.minibatch_step, updates, lr)


def updated(script, agent, optimizer, batch, args, step, updates, lr):
    np.random.seed(3)
    for update in range(updates):
        optimizer.param_groups[0]["lr"] = lr * (1 - update / updates)  # G6: a new learning rate each update
        script.update_policy(agent, optimizer, batch, args, args.clip_coef, args.kl_beta, 1, step)
    return [p.detach().clone() for p in agent.parameters()], optimizer


# how far the compiled step's parameter change may be from the plain one's, relative to its size: float rounding, which
# Adam turns into whole steps where a gradient is near zero; Atari's first-layer conv gradients are rounded the most
STEP_TOLERANCE = {"ppo_atari": 0.1}
STEP_TOLERANCE_MLP = 1e-4


def relative_difference(a, b, start=None):
    """|a - b| / |b| over all tensors together, as changes from `start` where given."""
    if start is not None:
        a, b = ([x - s for x, s in zip(xs, start)] for xs in (a, b))
    a, b = (torch.cat([x.flatten() for x in xs]) for xs in (a, b))
    return ((a - b).norm() / b.norm()).item()


# ppo_masked.py's graph is ppo.py's with its masks, the Atari CNN's the slowest to build (30 s): the full suite's
@pytest.mark.parametrize("case", [pytest.param(name, marks=pytest.mark.long if name in ("ppo_masked", "ppo_atari") else [])
                                  for name in FEED_FORWARD], indirect=True)  # fmt: skip
@pytest.mark.slow
def test_the_compiled_step_is_the_plain_step_clipping_and_adam_included(case):
    """--compile's one graph (loss, gradients, G8's clipping, Adam) against the plain step with PyTorch's for-loop Adam:
    two updates of 8 minibatch steps at lr 1e-3 move the parameters by the same amount up to float rounding (1e-5 of
    the change for the MLPs, 2% for Atari's CNN, its Adam moments 6%), and Adam's state (what a checkpoint keeps) is the plain
    Adam's, under the same keys, loadable by it. The second update runs at half the first's learning rate (G6), as the
    plain one; without the clipping the change lands 60-190% away: the graph clips."""
    script, args, agent, batch = case
    args = dataclasses.replace(args, max_grad_norm=0.05)  # below every minibatch's gradient norm here: G8 always clips
    cpu, tolerance = torch.device("cpu"), STEP_TOLERANCE.get(script.__name__, STEP_TOLERANCE_MLP)
    start = [p.detach().clone() for p in agent.parameters()]
    plain_params, plain_optimizer = plain_update(script, copy.deepcopy(agent), batch, args)

    def compiled_update(args_, lr=1e-3):
        twin = copy.deepcopy(agent)
        optimizer = torch.optim.Adam(twin.parameters(), lr=lr, eps=args_.adam_eps)
        plain = script.minibatch_step
        step = compile_support.compiled_step(script.ppo_loss, plain, twin, optimizer, args_.max_grad_norm, 1, cpu)
        assert step is not script.minibatch_step  # this machine has a C++ compiler: the graph is really built
        return updated(script, twin, optimizer, batch, args_, step, 2, lr)

    params, optimizer = compiled_update(args)
    off = relative_difference(params, plain_params, start)
    assert off <= tolerance, f"the compiled step's change is {off:.2e} of the plain one's away (allowed {tolerance:.0e})"
    state, plain_state = optimizer.state_dict(), plain_optimizer.state_dict()
    drop_foreach = [{key: value for key, value in group.items() if key != "foreach"} for group in state["param_groups"]]
    assert drop_foreach == [{key: v for key, v in group.items() if key != "foreach"} for group in plain_state["param_groups"]]
    assert state["state"].keys() == plain_state["state"].keys()
    for key in ("step", "exp_avg", "exp_avg_sq"):
        entries = [state["state"][i][key] for i in plain_state["state"]]
        off = relative_difference(entries, [entry[key] for entry in plain_state["state"].values()])
        assert off <= tolerance, f"Adam's {key}: {off:.2e} of the plain Adam's away (allowed {tolerance:.0e})"
    torch.optim.Adam(copy.deepcopy(agent).parameters(), lr=1e-3).load_state_dict(state)  # a plain Adam takes it

    unclipped, _ = compiled_update(dataclasses.replace(args, max_grad_norm=0.0))
    off = relative_difference(unclipped, plain_params, start)
    assert off > 0.3, f"without clipping the change is only {off:.2e} away: the test cannot tell clipping apart"


def test_a_new_learning_rate_clip_coef_or_kl_beta_does_not_rebuild_the_step(cont):
    """G6 changes the learning rate every update, as X1 the clip range and kl-adaptive beta: the compiled step takes
    them as tensors, so that its graph is built once."""
    agent = make_agent(cont)
    args = cont.Args(num_envs=1, num_steps=64, num_minibatches=1, surrogate="kl-adaptive")
    batch = fixed_batch(cont, agent, n=64)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=args.adam_eps)
    cpu = torch.device("cpu")
    step = compile_support.compiled_step(cont.ppo_loss, cont.minibatch_step, agent, optimizer, args.max_grad_norm, 1, cpu)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    for lr, clip_coef, kl_beta in ((1e-3, 0.2, 1.0), (9e-4, 0.19, 2.0), (8e-4, 0.18, 0.5)):
        optimizer.param_groups[0]["lr"] = lr
        step(agent, optimizer, batch, args, clip_coef, kl_beta)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


@pytest.mark.slow
def test_compiling_waits_for_a_run_long_enough_to_pay_for_it(cont, tmp_path, monkeypatch):
    """train() builds the graph for a run of compile_support.PAYS_AFTER minibatch steps or more (--compile), and steps
    eagerly on a shorter run: two updates of 64 steps (8 minibatch steps) build nothing, the same with PAYS_AFTER at 8
    build the step's graph."""
    monkeypatch.chdir(tmp_path)
    args = cont.Args(env_id="Pendulum-v1", num_steps=64, num_minibatches=2, update_epochs=2, total_timesteps=128,
                     save_model=False)  # fmt: skip
    for pays_after, graphs in ((compile_support.PAYS_AFTER, 0), (8, 1)):
        monkeypatch.setattr(cont, "PAYS_AFTER", pays_after)
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        cont.train(args)
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


@pytest.mark.parametrize("name", SCRIPTS)
def test_only_the_feed_forward_scripts_have_a_compile_flag(name):
    """dynamo cannot trace nn.LSTM or nn.GRU, so the recurrent scripts offer no --compile (they always take the plain
    backward) and the feed-forward scripts do."""
    import dataclasses

    flags = {f.name for f in dataclasses.fields(load_script(name).Args)}
    assert ("compile" in flags) == (name in FEED_FORWARD)
    imports = [line for line in (ROOT / f"{name}.py").read_text().splitlines() if line.startswith(("from ", "import "))]
    assert any("compiled_step" in line for line in imports) == (name in FEED_FORWARD)


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
    monkeypatch.setattr(compile_support.shutil, "which", lambda name: None)
    agent = make_agent(script)
    batch = fixed_batch(script, agent, n=64)
    args = script.Args(num_envs=1, num_steps=64, num_minibatches=2, update_epochs=1)
    torch._dynamo.utils.counters.clear()
    plain = run_update(script, copy.deepcopy(agent), batch, args)
    eager = run_update(script, copy.deepcopy(agent), batch, args, compiled=True)
    assert "--compile needs a C++ compiler" in capsys.readouterr().err
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 0
    for a, b in zip(plain[1], eager[1]):
        assert torch.equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"))]
)
@pytest.mark.parametrize("name", SCRIPTS)
def test_the_rollout_holds_what_the_env_gave_for_the_actions_taken(name, device, tmp_path, monkeypatch):
    """The rollout's storage (the observations copied to the device each step; the rewards and episode ends kept on
    the host until the rollout ends) against the plain reference: a fresh copy of the envs, reset with the run's seed
    and stepped with the stored actions, returns the stored observations, rewards and ends. ppo_masked.py's (Knapsack-v1,
    envpool's dict observations) stores each observation's entries but the mask one after another (D3), and the mask
    (D1), under which each stored action is valid; its actions are one column per component (D2), a single one for
    Knapsack's Discrete(50)."""
    script = load_script(name)
    monkeypatch.chdir(tmp_path)
    flags = {"compile": False} if hasattr(script.Args, "compile") else {}
    args = script.Args(num_envs=2, num_steps=48, total_timesteps=96, num_minibatches=2, update_epochs=1,
                       cuda=device == "cuda", **flags)  # fmt: skip
    rollout = script.train(args)["rollout"]  # one update: the first rollout
    assert rollout["obs"].device.type == device
    rollout = {key: value.cpu() for key, value in rollout.items()}
    envs = script.make_envs(args)
    expected_obs, _ = envs.reset(seed=args.seed)
    for t in range(args.num_steps):
        actions = rollout["actions"][t].numpy()
        if "masks" in rollout:  # D1, D2, D3, written out here for Knapsack's dict observations and Discrete actions
            # the entries in the order of gymnasium's Dict made from a plain dict (observed_space's): sorted by key, not
            # envpool's order (weights, values, packed_items, action_mask)
            entries = ["packed_items", "values", "weights"]
            assert torch.equal(rollout["masks"][t], torch.as_tensor(expected_obs["action_mask"], dtype=torch.bool)), t
            assert all(mask[action] for mask, action in zip(expected_obs["action_mask"], actions[:, 0]))  # valid ones
            expected_obs = np.concatenate([expected_obs[key] for key in entries], axis=1)
            actions = actions[:, 0]
        assert torch.equal(rollout["obs"][t], torch.as_tensor(expected_obs, dtype=rollout["obs"].dtype)), t
        expected_obs, reward, terminations, truncations, _ = envs.step(actions)
        assert not truncations.any()  # no B1 bonus to add in 48 steps (of Hopper-v5, Breakout, CartPole or Knapsack)
        assert torch.equal(rollout["rewards"][t], torch.as_tensor(reward, dtype=torch.float32)), t
        if t + 1 < args.num_steps:
            assert torch.equal(rollout["dones"][t + 1], torch.as_tensor(terminations, dtype=torch.float32)), t
    envs.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_tf32_is_off_unless_asked(name, tmp_path, monkeypatch):
    """--tf32 sets both of torch's TF32 switches (matmuls and cuDNN's convolutions, whose own default is on); without
    it a run computes in float32 on a GPU as on a CPU."""
    script = load_script(name)
    monkeypatch.chdir(tmp_path)
    eager = {"compile": False} if "compile" in script.Args.__dataclass_fields__ else {}  # the switches: no graph to build
    try:
        for tf32 in (False, True, False):
            args = script.Args(
                num_envs=1, num_steps=16, total_timesteps=16, num_minibatches=1, update_epochs=1, tf32=tf32, **eager
            )
            script.train(args)
            assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
    finally:  # torch's defaults, for the tests that run next in this process
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
