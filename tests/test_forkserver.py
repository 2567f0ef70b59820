"""tests/forkserver.py against a fresh `python`: a run through the fork server must be the run a new interpreter makes.
The reference is subprocess.run of `python SCRIPT FLAGS...`, which is what a user types; the probe script below
prints what a run could tell apart (argv, cwd, sys.path, the environment, __name__, stdin, atexit, exit status)."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import ROOT, ForkServer, script_env

PROBE = textwrap.dedent(
    """
    import atexit, json, os, sys
    import probe_helper  # found only through PYTHONPATH
    atexit.register(lambda: print("atexit ran"))
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path": sys.path, "name": __name__, "file": __file__,
                      "stdin": sys.stdin.read(), "env": dict(os.environ), "helper": probe_helper.VALUE,
                      "main_is_this": sys.modules["__main__"].__dict__.get("probe_helper") is probe_helper}))
    MARK = "main"
    print("to stderr", file=sys.stderr)
    how = sys.argv[1]
    if how == "code":
        sys.exit(3)
    if how == "message":
        sys.exit("a message for stderr")
    if how == "signal":
        sys.stdout.flush()
        os.kill(os.getpid(), 15)
    if how == "raise":
        raise ValueError("from the probe")
    """
)


def both(args, cwd, env):
    """The run through the fork server and through a fresh python, in cwd/forked and cwd/fresh."""
    if not ForkServer.takes(env):
        pytest.skip("PPO_TESTS_FORK=0: the fork server is off")
    forked = ForkServer.run(args, cwd / "forked", env, timeout=300)
    fresh = subprocess.run(args, cwd=cwd / "fresh", env=env, capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)  # fmt: skip
    return forked, fresh


def facts(result, cwd):
    """The probe's first line, read, with the folder it ran in checked and taken out."""
    told = json.loads(result.stdout.splitlines()[0])
    assert told.pop("cwd") == str(cwd)
    return told


@pytest.fixture
def probe(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "probe_helper.py").write_text("VALUE = 7\n")
    (tmp_path / "probe.py").write_text(PROBE)
    for side in ("forked", "fresh"):
        (tmp_path / side).mkdir()
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("how", ["end", "code", "message", "signal"])
def test_a_run_through_the_fork_server_is_the_run_a_fresh_python_makes(probe, how):
    env = script_env({"PYTHONPATH": str(probe / "lib")})
    forked, fresh = both([sys.executable, str(probe / "probe.py"), how], probe, env)
    assert forked.returncode == fresh.returncode == {"end": 0, "code": 3, "message": 1, "signal": -15}[how]
    assert forked.stderr == fresh.stderr
    assert facts(forked, probe / "forked") == facts(fresh, probe / "fresh")
    assert forked.stdout.splitlines()[1:] == fresh.stdout.splitlines()[1:] == ([] if how == "signal" else ["atexit ran"])
    told = facts(fresh, probe / "fresh")
    assert told["helper"] == 7 and told["name"] == "__main__" and told["main_is_this"] and told["stdin"] == ""


@pytest.mark.slow
def test_an_uncaught_exception_ends_both_alike(probe):
    env = script_env({"PYTHONPATH": str(probe / "lib")})
    forked, fresh = both([sys.executable, str(probe / "probe.py"), "raise"], probe, env)
    assert forked.returncode == fresh.returncode == 1
    # the traceback's frames differ (runpy's sit above the script's in the copy); its first and last lines do not
    for result in (forked, fresh):
        lines = result.stderr.splitlines()
        assert lines[0] == "to stderr" and lines[1].startswith("Traceback") and lines[-1] == "ValueError: from the probe"
    assert forked.stdout.splitlines()[1:] == fresh.stdout.splitlines()[1:] == ["atexit ran"]


@pytest.mark.slow
def test_a_training_run_through_the_fork_server_learns_the_same_numbers(tmp_path):
    """ppo.py for two updates: the saved agent, optimizer and statistics equal to the bit, and the same exit."""
    for side in ("forked", "fresh"):
        (tmp_path / side).mkdir()
    flags = ["--env-id", "CartPole-v1", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "256", "--seed", "3"]
    forked, fresh = both([sys.executable, str(ROOT / "ppo.py"), *flags], tmp_path, script_env())
    assert forked.returncode == fresh.returncode == 0, (forked.stderr, fresh.stderr)
    paths = [next((tmp_path / side / "runs").glob("*/agent.pt")) for side in ("forked", "fresh")]
    saved = [torch.load(path, weights_only=True) for path in paths]
    for part in ("model", "optimizer"):
        flat = [torch.cat(list(_tensors(s[part]))) for s in saved]
        assert len(flat[0]) > 1000 and torch.equal(*flat), part  # the network's or Adam's numbers, to the bit


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree.float().flatten()
    elif isinstance(tree, dict):
        for key in sorted(tree, key=str):
            yield from _tensors(tree[key])
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _tensors(item)


def test_the_server_takes_only_its_own_environment():
    if not ForkServer.takes(script_env()):
        pytest.skip("PPO_TESTS_FORK=0: the fork server is off")
    assert ForkServer.takes(script_env({"PYTHONPATH": "/elsewhere"}))
    assert not ForkServer.takes(script_env({"OMP_NUM_THREADS": "2"}))
    assert not ForkServer.takes(script_env({"SOME_FLAG": "1"}))
