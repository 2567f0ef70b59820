"""--compile: a minibatch's loss and gradients as one torch.compile'd graph, with the same gradients as the plain
backward; the plain backward where inductor cannot build. It decides no PPO detail."""

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
            if process_rank() == 0:
                reason = (str(e).strip().splitlines() or [""])[0][:200]
                print(f"warning: --compile could not build its graph here ({type(e).__name__}: {reason}); running "
                      "eagerly (slower, the same gradients)", file=sys.stderr)  # fmt: skip
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
