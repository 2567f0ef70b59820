"""--compile: a minibatch's optimizer step (loss, gradients, G8's clipping, Adam) as one torch.compile'd graph, or its
gradients alone where torchrun's ranks (X2) average them in between; the plain step where inductor cannot build, or
where the run is too short to pay for the build. It decides no PPO detail."""

import importlib
import os
import shutil
import sys

import torch

from .distributed import process_rank


class LossModule(torch.nn.Module):
    """loss_fn(agent, ...) as a module's forward: the form torch.func.functional_call differentiates."""

    def __init__(self, loss_fn, agent):
        super().__init__()
        self.loss_fn, self.agent = loss_fn, agent

    def forward(self, *args):
        return self.loss_fn(self.agent, *args)


# The scripts build the graph for a run of PAYS_AFTER minibatch steps or more (the MLP scripts; PAYS_AFTER_CNN the Atari
# one), where it pays for its build; a shorter run is faster eager. Measured on a 2-core CPU (docs/speed.md): the MLP's
# graph builds in 2.5 s with inductor's cache warm (it is kept between runs, under /tmp/torchinductor_$USER), 15-20 s
# cold, and saves 1.4 ms a minibatch step (Hopper-v5: 1.9 ms eager); the CNN's builds in 4.5 s warm, 31 s cold, and saves
# 75 ms a step (Breakout: 243 ms eager). Each threshold is about twice the steps that pay back a warm build.
PAYS_AFTER = 4000
PAYS_AFTER_CNN = 150


def compiled_step(loss_fn, plain_step, agent, optimizer, max_grad_norm, world_size, device):
    """--compile's twin of the script's `plain_step(agent, optimizer, mb, args, clip_coef, kl_beta, world_size,
    backward)`: zero the gradients, loss_fn's gradients, X2's average, G8's clipping at max_grad_norm (0: none), the
    optimizer's step. With one process and torch's Adam all of it is one graph, the parameters and Adam's state updated
    in place (optimizer.state holds them, as Adam's own step leaves them, so checkpoints are unchanged); under torchrun
    (X2) the gradients are the graph and plain_step does the rest. plain_step itself (with a warning) where inductor
    has nothing to build with or its build fails."""
    backward = compiled_backward(loss_fn, agent, device)
    if getattr(backward, "plain", False):
        return plain_step
    group = optimizer.param_groups[0]
    plain_adam = type(optimizer) is torch.optim.Adam and len(optimizer.param_groups) == 1
    if world_size > 1 or not plain_adam or group["amsgrad"] or group["weight_decay"] or group["maximize"]:
        return lambda *a, **k: plain_step(*a, **k, backward=backward)
    adam = importlib.import_module("torch.optim.adam").adam  # torch's functional Adam (what Adam.step calls)
    module = LossModule(loss_fn, agent)
    names, params = zip(*module.named_parameters())
    max_norm, (beta1, beta2), eps = max_grad_norm, group["betas"], group["eps"]

    @torch.compile(options={"cpp_wrapper": True, "size_asserts": False} if device.type == "cpu" else None)
    def step_graph(detached, exp_avgs, exp_avg_sqs, steps, lr, *loss_args):
        grads, stats = torch.func.grad(
            lambda p: torch.func.functional_call(module, p, loss_args, tie_weights=False), has_aux=True
        )(dict(zip(names, detached)))
        grads = [grads[name] for name in names]
        if max_norm > 0:  # G8 as nn.utils.clip_grad_norm_ computes it: the global L2 norm, the scale clamped to 1
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
            scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
            grads = [g * scale for g in grads]
        adam(list(detached), grads, exp_avgs, exp_avg_sqs, [], steps, foreach=False, amsgrad=False, beta1=beta1,
             beta2=beta2, lr=lr, weight_decay=0.0, eps=eps, maximize=False)  # fmt: skip
        return stats

    compiled = [True]  # until inductor fails to build the graph

    def step(agent_, optimizer_, mb, args_, clip_coef, kl_beta, world_size_=1):
        assert agent_ is agent and optimizer_ is optimizer, "compiled_step serves the agent and optimizer it was built for"
        if not compiled[0]:
            return plain_step(agent_, optimizer_, mb, args_, clip_coef, kl_beta, world_size_)
        state = [adam_state(optimizer, p) for p in params]
        lr = torch.tensor(group["lr"], device=device)  # G6 changes it each update: a tensor, so the graph is built once
        tensors = [torch.tensor(a, device=device) if isinstance(a, float) else a for a in (clip_coef, kl_beta)]
        return graph_or_plain(
            compiled,
            lambda: step_graph(
                [p.detach() for p in params], [s["exp_avg"] for s in state], [s["exp_avg_sq"] for s in state],
                [s["step"] for s in state], lr, mb, args_, *tensors,
            ),
            lambda: plain_step(agent_, optimizer_, mb, args_, clip_coef, kl_beta, world_size_),
        )  # fmt: skip

    return step


def compiled_agents_step(loss_fn, plain_step, agent, optimizer, clip_fn, device):
    """compiled_step's twin for ppo_continuous_action_seeds.py: its `plain_step(agent, optimizer, mb, args, clip_coef,
    kl_beta, running)` (the agents' gradients, G8 per agent with clip_fn(grads, max_grad_norm), AgentsAdam's step) as one
    graph over the stacked parameters, where every agent steps with one learning rate and epsilon and one step count (what
    AgentsAdam then does in one call of torch's functional Adam); plain_step with the compiled gradients otherwise (X3
    stopped an agent, or the agents' learning rates or epsilons differ), and plain_step where inductor cannot build."""
    backward = compiled_backward(loss_fn, agent, device)
    if getattr(backward, "plain", False):
        return plain_step
    adam = importlib.import_module("torch.optim.adam").adam
    module = LossModule(loss_fn, agent)
    names, params = zip(*module.named_parameters())

    @torch.compile(options={"cpp_wrapper": True, "size_asserts": False} if device.type == "cpu" else None)
    def step_graph(detached, exp_avgs, exp_avg_sqs, steps, lr, eps, max_grad_norm, *loss_args):
        grads, stats = torch.func.grad(
            lambda p: torch.func.functional_call(module, p, loss_args, tie_weights=False), has_aux=True
        )(dict(zip(names, detached)))
        grads = [grads[name] for name in names]
        clip_fn(grads, max_grad_norm)
        adam(list(detached), grads, exp_avgs, exp_avg_sqs, [], steps, foreach=False, amsgrad=False, beta1=0.9,
             beta2=0.999, lr=lr, weight_decay=0.0, eps=eps, maximize=False)  # fmt: skip
        return stats

    compiled = [True]  # until inductor fails to build the graph

    def step(agent_, optimizer_, mb, args_, clip_coef, kl_beta, running):
        assert agent_ is agent and optimizer_ is optimizer, "compiled_agents_step serves the agents it was built for"
        groups = {(group["lr"], group["eps"]) for group in optimizer.param_groups}
        counts = optimizer.counts
        if not compiled[0] or not running.all() or len(groups) > 1 or (counts != counts[0]).any():
            return plain_step(agent_, optimizer_, mb, args_, clip_coef, kl_beta, running, backward=backward)
        (lr, eps), k = groups.pop(), len(params)
        steps = list(optimizer.steps[:1].repeat(k).unbind())  # copies, which Adam counts up
        def graph_step():
            stats = step_graph(
                [p.detach() for p in params], optimizer.exp_avgs, optimizer.exp_avg_sqs, steps,
                torch.tensor(lr, device=device), eps, args_.max_grad_norm, mb, args_, clip_coef, kl_beta,
            )  # fmt: skip
            optimizer.steps += 1
            optimizer.counts += 1
            return stats

        plain = lambda: plain_step(agent_, optimizer_, mb, args_, clip_coef, kl_beta, running, backward=backward)
        return graph_or_plain(compiled, graph_step, plain)

    return step


def graph_or_plain(compiled, graph_call, plain_call):
    """graph_call() without autograd's recording; where inductor fails to build its graph, a warning, compiled[0] set to
    False (the later steps go plain at once) and plain_call()."""
    try:
        with torch.no_grad():
            return graph_call()
    except Exception as e:
        if not is_build_failure(e):
            raise
        compiled[0] = False
        say_build_failed(e)
        return plain_call()


def adam_state(optimizer, p):
    """Adam's state of parameter p, made as torch's Adam makes it where it has none yet (before the first step)."""
    state = optimizer.state[p]
    if not state:
        fused = bool(optimizer.param_groups[0]["fused"])
        state["step"] = torch.tensor(0.0, dtype=torch.float32, device=p.device if fused else "cpu")
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    return state


def say_build_failed(e):
    """The warning of a graph that inductor failed to build (once, by rank 0)."""
    if process_rank() == 0:
        reason = (str(e).strip().splitlines() or [""])[0][:200]
        print(f"warning: --compile could not build its graph here ({type(e).__name__}: {reason}); running "
              "eagerly (slower, the same gradients)", file=sys.stderr)  # fmt: skip


def compiled_backward(loss_fn, agent, device):
    """--compile (on by default): a function that does for `agent` what `loss, stats = loss_fn(agent, *args);
    loss.backward(); return stats` does, as one torch.compile'd graph. torch.func.grad traces the forward and the backward
    together, which spares the autograd engine's per-op work (benchmark/results/speed.md measures it); the
    gradients are added to the parameters' .grad, as backward() adds them. The plain backward runs instead, with a
    warning, where inductor has nothing to build with (no C++ compiler on a CPU) or its build fails (a compiler without
    Python's C headers, say: the first minibatch finds out and takes the plain backward). dynamo cannot trace nn.LSTM and
    nn.GRU, so ppo_rnn.py has no --compile and never calls this."""
    module = LossModule(loss_fn, agent)
    params = dict(module.named_parameters())

    def plain(agent_, *args):
        loss, stats = loss_fn(agent_, *args)
        loss.backward()
        return stats

    if device.type == "cpu" and shutil.which(os.environ.get("CXX", "g++")) is None:
        if process_rank() == 0:  # X2: said once
            print("warning: --compile needs a C++ compiler (g++) on a CPU; running eagerly (slower)", file=sys.stderr)
        plain.plain = True
        return plain

    # tie_weights=False: a shared body (M7 in the continuous script, A10 in Atari's) is one module object under two names,
    # which the substituted parameters serve as they are; tie_weights' bookkeeping of it trips AOTAutograd
    @torch.compile
    def grads_and_stats(detached, *args):
        return torch.func.grad(lambda p: torch.func.functional_call(module, p, args, tie_weights=False), has_aux=True)(
            detached
        )

    compiled = [True]  # until inductor fails to build the graph

    def backward(agent_, *args):
        assert agent_ is agent, "compiled_backward serves the agent it was built for"
        if not compiled[0]:
            return plain(agent_, *args)
        # floats (X1's annealed clip range, G1's adaptive beta) go in as tensors: the graph would be rebuilt for each value
        tensors = [torch.tensor(a, device=device) if isinstance(a, float) else a for a in args]
        try:
            grads, stats = grads_and_stats({name: p.detach() for name, p in params.items()}, *tensors)
        except Exception as e:  # the compiled graph failed to build (a compiler without Python's C headers, say)
            if not is_build_failure(e):
                raise
            compiled[0] = False
            say_build_failed(e)
            return plain(agent_, *args)
        for name, p in params.items():
            grad = grads[name] if p.grad is None else p.grad + grads[name]
            # laid out as its parameter, as backward() leaves it: CUDA's fused Adam refuses other strides, which inductor's
            # outputs may have where a dimension of size 1 leaves the stride free (a one-action agent's log std)
            p.grad = grad if grad.stride() == p.stride() else torch.empty_like(p).copy_(grad)
        return stats

    return backward


def is_build_failure(error):
    """Whether `error` is torch.compile failing to build a graph (inductor's C++ compile, a missing header or library),
    not an error of the computation itself."""
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import InductorError

    return isinstance(error, (BackendCompilerFailed, InductorError)) or type(error).__name__ in ("CppCompileError",)
