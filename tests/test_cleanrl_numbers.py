"""Ours against CleanRL's scripts, number for number (docs/cleanrl.md). From the same seed, with the flags that make ours
compute what CleanRL computes, both scripts run two updates, each under tests/numbers_tap.py, and must agree bit for bit
(tolerance 0) on the initial weights (mapped layer by layer), both rollouts (observations, actions, log-probabilities,
rewards, episode ends, values) and the weights after each update. A control run of ours from another seed must differ.

CleanRL's copy comes from the folder CLEANRL_DIR names, as for the benchmark runner (docs/benchmarks.md: CleanRL's
scripts at commit fe8d8a0 with the gymnasium 1.x API); without it these tests skip, naming why."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, pythonpath_first

CLEANRL_DIR = os.environ.get("CLEANRL_DIR", "")  # relative to where pytest starts, as a user types it
FOUND = bool(CLEANRL_DIR) and all(Path(CLEANRL_DIR, name).is_file() for name in ("ppo_atari.py", "ppo_continuous_action.py"))
pytestmark = [
    pytest.mark.long,
    pytest.mark.skipif(
        not FOUND,
        reason="needs CleanRL's ppo_atari.py and ppo_continuous_action.py in the folder CLEANRL_DIR names "
        f"({'unset' if not CLEANRL_DIR else CLEANRL_DIR + ': not there'}); e.g. CLEANRL_DIR=~/cleanrl/cleanrl",
    ),
]

# ours' flags that make it compute what CleanRL's script does (docs/cleanrl.md says why each is needed)
SAME_AS_CLEANRL = {
    "ppo_continuous_action.py": ["--norm-per-env", "--no-fused-adam", "--no-compile", "--torch-threads", "0"],
    "ppo_atari.py": ["--gray-after-resize", "--no-fused-adam", "--no-compile"],
}
# ours' layers by CleanRL's names
LAYERS = {
    "ppo_continuous_action.py": {
        "actor_logstd": "actor_logstd",
        "critic_body.0": "critic.0",
        "critic_body.2": "critic.2",
        "critic": "critic.4",
        "actor_body.0": "actor_mean.0",
        "actor_body.2": "actor_mean.2",
        "actor_mean": "actor_mean.4",
    },
    "ppo_atari.py": {"critic_body": "network", "actor": "actor", "critic": "critic"},
}
CASES = [  # script, env id, optimizer steps an update (epochs x minibatches of the defaults), two updates' steps
    ("ppo_continuous_action.py", "Hopper-v5", 10 * 32, 2 * 2048),  # terminations in both rollouts
    ("ppo_continuous_action.py", "HalfCheetah-v5", 10 * 32, 2 * 2048),  # time-limit truncations at steps 1000, 2000
    ("ppo_atari.py", "BreakoutNoFrameskip-v4", 4 * 4, 2 * 8 * 128),  # lost lives (A3) in the first rollout
]
SEED = 7


def tapped_run(script_path, steps_per_update, flags, cwd):
    """Runs a script under tests/numbers_tap.py in `cwd`; returns what the tap recorded."""
    out = Path(cwd) / "numbers.pt"
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "numbers_tap.py"), str(out), str(steps_per_update), str(script_path), *flags],
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath_first(Path(script_path).parent)},  # see the tap
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = torch.load(out, weights_only=True)
    assert len(record["rollouts"]) == 2 and len(record["updates"]) == 2  # the tap saw both updates
    return record


def cleanrl_name(script, name):
    """CleanRL's name of ours' parameter `name`: critic.weight -> critic.4.weight, critic_body.7.bias -> network.7.bias."""
    for ours, theirs in sorted(LAYERS[script].items(), key=lambda item: -len(item[0])):  # the longest match first
        if name == ours or name.startswith(ours + "."):
            return theirs + name[len(ours) :]
    raise KeyError(name)


def differences(ours, theirs, script):
    """What differs between two tapped runs, one line each: parameters compared by layer, storage by value."""
    found = []
    names = [cleanrl_name(script, name) for name in ours["names"]]
    assert sorted(names) == sorted(theirs["names"]), (names, theirs["names"])

    def compare(what, a, b):
        b = b.to(a.dtype) if a.shape == b.shape else b.reshape(a.shape).to(a.dtype)  # ours' frames: ([stack,] H, W, C)
        if not torch.equal(a, b):
            found.append(f"{what}: largest difference {(a.double() - b.double()).abs().max().item():.3g}")

    def by_layer(what, ours_values, their_values):
        theirs_by_name = dict(zip(theirs["names"], their_values))
        for name, value in zip(names, ours_values):
            compare(f"{what} {name}", theirs_by_name[name], value)

    by_layer("initial weights", ours["initial"], theirs["initial"])
    for update in range(2):
        for key, value in theirs["rollouts"][update].items():
            compare(f"rollout {update + 1} {key}", value, ours["rollouts"][update][key])
        by_layer(f"weights after update {update + 1}", ours["updates"][update], theirs["updates"][update])
    return found


@pytest.mark.parametrize("script, env_id, steps_per_update, total", CASES, ids=[case[1] for case in CASES])
def test_same_seed_same_numbers_as_cleanrl(tmp_path, script, env_id, steps_per_update, total):
    budget = ["--env-id", env_id, "--total-timesteps", str(total)]
    runs = {}
    for who, path, flags in [
        ("cleanrl", Path(CLEANRL_DIR).resolve() / script, [*budget, "--seed", str(SEED)]),
        ("ours", ROOT / script, [*budget, "--seed", str(SEED), *SAME_AS_CLEANRL[script]]),
        ("control", ROOT / script, [*budget, "--seed", str(SEED + 1), *SAME_AS_CLEANRL[script]]),
    ]:
        (tmp_path / who).mkdir()
        runs[who] = tapped_run(path, steps_per_update, flags, tmp_path / who)
    assert differences(runs["ours"], runs["cleanrl"], script) == []
    control = differences(runs["control"], runs["cleanrl"], script)
    assert any(line.startswith("initial weights") for line in control)
    assert any(line.startswith("weights after update 2") for line in control)
