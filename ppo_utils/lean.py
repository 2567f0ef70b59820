"""The per-step path without the libraries' per-call overhead, computing the very numbers the libraries compute:
`forward(module, x)`, module(x) for the layers the agents are made of without nn.Module's call machinery (its hook
checks cost about 5 us a layer on a CPU, as much as a batch-1 layer's own arithmetic), and `RunningMeanStd`,
gymnasium's normalization statistics with a leaner update. It decides no PPO detail."""

import gymnasium.wrappers.utils as gym_utils
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def forward(module, x):
    """module(x), where module is a layer or an nn.Sequential of them. Linear, Conv2d (zero padding), Tanh, ReLU and
    Flatten run as the functions their forward() calls; any other module, or one with hooks, is called as usual."""
    if type(module) is nn.Sequential:
        for layer in module:
            x = forward(layer, x)
        return x
    kind = type(module)
    if module._forward_hooks or module._forward_pre_hooks:
        return module(x)
    if kind is nn.Linear:
        return F.linear(x, module.weight, module.bias)
    if kind is nn.Tanh:
        return torch.tanh(x)
    if kind is nn.ReLU and not module.inplace:
        return torch.relu(x)
    if kind is nn.Conv2d and module.padding_mode == "zeros":
        return F.conv2d(x, module.weight, module.bias, module.stride, module.padding, module.dilation, module.groups)
    if kind is nn.Flatten:
        return x.flatten(module.start_dim, module.end_dim)
    return module(x)


class RunningMeanStd(gym_utils.RunningMeanStd):
    """gymnasium's running mean and variance (M1's and M3's statistics), its update without numpy's per-call overhead:
    np.mean and np.var of the batch are the same sums and divisions, written as the ufunc calls numpy makes for them
    (the same numbers, bit for bit; a third of the time for a batch of one)."""

    def update(self, x):
        n = x.shape[0]
        batch_mean = np.add.reduce(x, axis=0, keepdims=True) / n  # np.mean(x, axis=0), kept 2-D for the next line
        deviation = x - batch_mean
        batch_var = np.add.reduce(deviation * deviation, axis=0) / n  # np.var(x, axis=0)
        self.update_from_moments(batch_mean[0], batch_var, n)
