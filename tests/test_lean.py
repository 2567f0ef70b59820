"""ppo_utils/lean.py computes what the libraries compute, bit for bit: forward(layer, x) against the layer's own call
(nn.Module's), its RunningMeanStd against gymnasium's on the batches M1 and M3 give it."""

import numpy as np
import pytest
import torch
import torch.nn as nn
from gymnasium.wrappers.utils import RunningMeanStd as GymRunningMeanStd

from ppo_utils.lean import RunningMeanStd, forward

LAYERS = {
    "mlp": (nn.Sequential(nn.Linear(11, 64), nn.Tanh(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3)), (5, 11)),
    "cnn": (
        nn.Sequential(nn.Conv2d(4, 8, 8, stride=4), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.Flatten(),
                      nn.Linear(16 * 9 * 9, 7)),  # fmt: skip
        (2, 4, 40, 40),
    ),
    "inplace relu": (nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True)), (2, 3)),  # called as the module
    "other module": (nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4)), (2, 3)),  # called as the module
}


@pytest.mark.parametrize("name", LAYERS)
def test_forward_is_the_modules_own_call(name):
    torch.manual_seed(0)
    module, shape = LAYERS[name]
    x = torch.randn(shape)
    assert torch.equal(forward(module, x.clone()), module(x.clone()))
    assert torch.equal(forward(module[0], x), module[0](x))  # a layer alone


def test_forward_calls_a_hooked_layer_through_its_hooks():
    """A layer with a forward hook (a researcher's probe, say) is called as a module, so its hook runs."""
    layer, seen = nn.Linear(3, 2), []
    layer.register_forward_hook(lambda module, inputs, output: seen.append(output.sum().item()))
    out = forward(nn.Sequential(layer, nn.Tanh()), torch.ones(1, 3))
    assert len(seen) == 1 and torch.equal(out, torch.tanh(layer(torch.ones(1, 3))))


@pytest.mark.parametrize(
    "shape,batch,dtype",
    [((11,), 1, np.float64), ((), 1, np.float64), ((17,), 8, np.float32), ((3, 2), 5, np.float64), ((), 4, np.float64)],
)
def test_running_mean_std_is_gymnasiums_bit_for_bit(shape, batch, dtype):
    """1,000 batches of a drifting, scaled signal (M1's observations: float32 or float64 rows; M3's discounted returns:
    one value per env): mean, variance and count equal gymnasium's exactly after every update."""
    ours, gyms = RunningMeanStd(shape=shape), GymRunningMeanStd(shape=shape)
    rng = np.random.default_rng(1)
    for i in range(1000):
        x = (rng.normal(size=(batch,) + shape) * (1 + i / 100) + i / 10).astype(dtype)
        ours.update(x)
        gyms.update(x)
        assert np.array_equal(ours.mean, gyms.mean) and np.array_equal(ours.var, gyms.var) and ours.count == gyms.count
    assert ours.mean.dtype == gyms.mean.dtype and ours.var.shape == gyms.var.shape
