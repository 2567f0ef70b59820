"""Loads the scripts as modules (they are files at the repository's top level, not a package) and runs them."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the scripts import run_plumbing from beside them
# every script whose GAE and loss pieces the shared tests check; later scripts join this list
SCRIPTS = [name for name in ("ppo_continuous_action", "ppo_atari", "ppo_rnn") if (ROOT / f"{name}.py").exists()]


def load_script(name):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(params=SCRIPTS)
def script(request):
    """Each script in turn, for the tests of the pieces they share."""
    return load_script(request.param)


@pytest.fixture
def cont():
    return load_script("ppo_continuous_action")


def run_script(name, *flags, cwd, timeout=600, env=None):
    """Runs a script as a user would, in `cwd`, with one torch thread so that runs do not fight over the two cores."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", **(env or {})}
    return subprocess.run(
        [sys.executable, str(ROOT / f"{name}.py"), *flags],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_scalars(run_dir, tag):
    """The (step, value) pairs of one TensorBoard tag in a run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]
