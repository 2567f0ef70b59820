"""On a GPU (each test is skipped where torch sees none): a run stopped on CUDA resumes as the uninterrupted one goes on,
CUDA's RNG states included; a checkpoint trained on CUDA is evaluated by a process that sees no GPU; --compile's
backward on CUDA gives the plain gradients, laid out as fused Adam takes them; --tf32 changes the numbers as far as TF32
may. The CPU versions of these tests are in test_long_runs.py and test_fast_paths.py; the helpers these import are in
long_run_helpers.py and test_fast_paths.py."""

import glob

import pytest
from ppo_utils import compiled as compile_support
import torch
from conftest import FEED_FORWARD, SCRIPTS, fixed_batch, load_script, make_agent, run_script
from long_run_helpers import SAVE_THEN_EVALUATE, stop_mid_rollout_then_resume
from test_fast_paths import assert_matches_float64, float64_twin

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: torch.cuda.is_available() is False")

CUDA = torch.device("cuda")


@pytest.mark.slow
def test_a_run_stopped_on_cuda_resumes_as_the_uninterrupted_one_goes_on(tmp_path, monkeypatch):
    """long_run_helpers' stop in the middle of rollout 3, on CUDA: the saved update 2 is the uninterrupted run's, the
    states of CUDA's generators (which sample the actions) included, and resuming it gives, to the last bit, what
    resuming the uninterrupted run's own update-2 checkpoint gives. No tolerance: one GPU runs the same kernels on the
    same numbers (an MLP: no cuDNN; --no-compile, to keep it short)."""
    cont = load_script("ppo_continuous_action")
    stopped, resumed = stop_mid_rollout_then_resume(cont, tmp_path, monkeypatch, cuda=True, compile=False)
    assert all(value.is_cuda for value in stopped["model"].values())  # trained on CUDA
    assert len(stopped["rng"]["cuda"]) == torch.cuda.device_count()  # a state for each GPU's generator
    assert all(next(result["agent"].parameters()).is_cuda for result in resumed)  # resumed with the checkpoint's --cuda


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_checkpoint_trained_on_cuda_evaluates_where_no_gpu_is_visible(tmp_path, name):
    flags, episodes = SAVE_THEN_EVALUATE[name]  # the short runs test_long_runs evaluates on the CPU
    result = run_script(name, *flags, "--save-model", "--cuda", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (checkpoint_path,) = glob.glob(str(tmp_path / "runs" / "*" / "agent.pt"))
    model = torch.load(checkpoint_path, weights_only=True)["model"]
    assert all(value.is_cuda for value in model.values())  # the weights were saved from the GPU
    evaluation = run_script(name, "--eval-checkpoint", checkpoint_path, "--eval-episodes", str(episodes), cwd=tmp_path,
                            env={"CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
    assert evaluation.returncode == 0, evaluation.stderr
    assert f"over {episodes} episodes" in evaluation.stdout


@pytest.mark.parametrize("name", FEED_FORWARD)
def test_compiled_backward_on_cuda_gives_the_plain_gradients(name, monkeypatch):
    """test_fast_paths' check on one minibatch, on CUDA: the plain and the compiled backward each against float64, and
    against each other. cuDNN's convolutions run in TF32 by default (10-bit mantissas, ~1e-3 off float64), which would
    need a looser tolerance than float32's: they are made float32 here."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    script = load_script(name)
    agent = make_agent(script).to(CUDA)
    args = script.Args(num_envs=1, num_steps=64, num_minibatches=1)
    mb = fixed_batch(script, agent)  # on the agent's device
    assert all(value.is_cuda for value in mb.values())
    compiled = compile_support.compiled_backward(script.ppo_loss, agent, CUDA)
    assert compiled is not script.ppo_backward
    twin = float64_twin(agent)  # on CUDA too
    _, plain_grads = assert_matches_float64(script, agent, twin, mb, args, script.ppo_backward)
    _, compiled_grads = assert_matches_float64(script, agent, twin, mb, args, compiled)
    for compiled_grad, plain_grad in zip(compiled_grads, plain_grads):
        assert compiled_grad.is_cuda
        assert (compiled_grad - plain_grad).norm() <= 1e-4 * plain_grad.norm() + 1e-8


def test_compiled_gradients_on_cuda_are_laid_out_as_their_parameters_for_fused_adam():
    """Pendulum's agent (one action: a (1, 64) action-mean weight and a (1, 1) log std) on CUDA: each gradient the
    compiled backward leaves has its parameter's strides, as eager backward's do, and CUDA's fused Adam (G11), which
    refuses any other layout, takes the step. Before the gradients were laid out so, every --compile run on Pendulum
    stopped at an optimizer step on an H100 (which parameter's gradient differed was not printed; size-1
    dimensions leave strides free)."""
    cont = load_script("ppo_continuous_action")
    agent = make_agent(cont, obs_shape=(3,), n_actions=1).to(CUDA)  # Pendulum's spaces' shapes
    args = cont.Args(num_envs=1, num_steps=64, num_minibatches=1)
    mb = fixed_batch(cont, agent, obs_shape=(3,))
    before = [p.detach().clone() for p in agent.parameters()]
    compile_support.compiled_backward(cont.ppo_loss, agent, CUDA)(agent, mb, args, args.clip_coef, args.kl_beta)
    for name, p in agent.named_parameters():
        assert p.grad.stride() == p.stride(), name
    torch.optim.Adam(agent.parameters(), lr=1e-3, fused=True).step()
    assert all(not torch.equal(b, p) for b, p in zip(before, agent.parameters()))


def test_tf32_changes_the_atari_agents_numbers_only_as_far_as_a_10_bit_mantissa_goes(monkeypatch):
    """--tf32's switches on CUDA: with them off, the Atari agent's values are float32-close to float64's; on, they
    differ from float32's (TF32 convolutions and matmuls ran) by no more than TF32's rounding allows."""
    atari = load_script("ppo_atari")
    agent = make_agent(atari).to(CUDA)
    obs = fixed_batch(atari, agent, n=256)["obs"]
    twin = float64_twin(agent)
    twin.load_state_dict(agent.state_dict())
    outputs = {}
    with torch.no_grad():
        exact = twin.get_value(obs)
        for tf32 in (False, True):
            monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
            torch.backends.cuda.matmul.allow_tf32 = tf32
            outputs[tf32] = agent.get_value(obs).double()
    torch.backends.cuda.matmul.allow_tf32 = False  # torch's default
    scale = exact.abs().max()
    assert (outputs[False] - exact).abs().max() <= 1e-4 * scale
    assert not torch.equal(outputs[True], outputs[False])
    assert (outputs[True] - exact).abs().max() <= 2e-2 * scale


@pytest.mark.slow
def test_each_agent_of_the_seeds_script_on_cuda_computes_what_the_single_script_computes(tmp_path, monkeypatch):
    """tests/test_seeds.py's comparison on CUDA: each agent's action noise comes from its own CUDA generator, seeded as
    torch.manual_seed seeds the single script's; Pendulum with two envs per agent, B1, M5 and M7, one update."""
    from test_seeds import CASES, assert_same_computation, train_both

    batched, singles, tolerance = train_both(CASES["envs-b1-m5-m7"] | {"cuda": True}, tmp_path, monkeypatch)
    assert next(batched["agent"].parameters()).is_cuda
    for agent, single in enumerate(singles):
        assert_same_computation(batched, single, agent, tolerance)
