"""An outside change touches one file: value normalization (tests/fixtures/norm_value.py, a flag with state in the
agent's module, its names starting with probe) applied to a copy of ppo_continuous_action.py alone, in a copy of the
project, where the scripts' tests and the family's report run as a contributor runs them. The change trains,
checkpoints, resumes and plays; checkpoints written before it load; the batched script beside it trains at the flag's
default and refuses the flag in one line; its agents still compute what the changed parent computes."""

import os
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = importlib.util.spec_from_file_location("norm_value", ROOT / "tests" / "fixtures" / "norm_value.py")
norm_value = importlib.util.module_from_spec(FIXTURE)  # loaded from its file: sys.path stays as it was
FIXTURE.loader.exec_module(norm_value)

PENDULUM = ["--env-id", "Pendulum-v1", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "2"]


@pytest.fixture(scope="module")
def changed(tmp_path_factory):
    """A copy of the project (scripts, ppo_utils, tests, pyproject.toml) with the change made to its continuous script."""
    copy = tmp_path_factory.mktemp("outside") / "project"
    copy.mkdir()
    for path in [*ROOT.glob("ppo*.py"), ROOT / "pyproject.toml"]:
        shutil.copy(path, copy / path.name)
    for folder in ("ppo_utils", "tests", "benchmark"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__", "runs", "results"))
    script = copy / "ppo_continuous_action.py"
    script.write_text(norm_value.apply(script.read_text()))
    return copy


def run(copy, *words, timeout=600):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "PYTHONPATH"))}
    done = subprocess.run([sys.executable, *map(str, words)], cwd=copy, env=env | {"PYTHONWARNINGS": "ignore"},
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


@pytest.mark.long
def test_the_changed_script_trains_resumes_and_plays_with_its_flag(changed):
    code, out = run(changed, "ppo_continuous_action.py", *PENDULUM, "--total-timesteps", "256", "--checkpoint-interval",
                    "1", "--probe-norm-value")  # fmt: skip
    assert code == 0, out
    (checkpoint,) = changed.glob("runs/*/agent.pt")
    import torch

    saved = torch.load(checkpoint, weights_only=True)
    assert saved["args"]["probe_norm_value"] is True
    assert saved["model"]["probe_value_norm.count"] > 256  # its statistics are kept
    code, out = run(changed, "ppo_continuous_action.py", "--eval-checkpoint", checkpoint, "--eval-episodes", "1")
    assert code == 0 and "mean return" in out, out


@pytest.mark.long
def test_the_batched_script_trains_at_the_flags_default_and_refuses_it_set(changed):
    code, out = run(changed, "ppo_continuous_action_seeds.py", *PENDULUM, "--seeds", "1", "2", "--total-timesteps", "128",
                    "--probe-norm-value")  # fmt: skip
    assert code == 1 and out.strip().splitlines() == [
        "error: --probe-norm-value is a flag of ppo_continuous_action.py that ppo_continuous_action_seeds.py does not "
        "batch yet (neither its PER_AGENT nor its SHARED names it); leave it at its default (False), or train each seed with "
        "ppo_continuous_action.py and these flags (--seed N for each of --seeds); to batch it, make "
        "ppo_continuous_action_seeds.py compute what the flag changes and add it to PER_AGENT or SHARED there"
    ], out
    assert not (changed / "runs").exists() or not any((changed / "runs").glob("*seeds*")), "refused, yet wrote a run"
    code, out = run(changed, "ppo_continuous_action_seeds.py", *PENDULUM, "--seeds", "1", "2", "--total-timesteps", "128")
    assert code == 0, out
    (one, _) = sorted(changed.glob("runs/*seeds__*/agent.pt"))
    code, out = run(changed, "ppo_continuous_action.py", "--eval-checkpoint", one, "--eval-episodes", "1")  # the parent's
    assert code == 0 and "mean return" in out, out


@pytest.mark.long
def test_the_copys_tests_pass_on_the_change(changed):
    """The tests that cover the changed script, run in the copy: checkpoints from before the flag, the contract, the
    batched agents against their changed parent (its equivalence test, its probe, its flags)."""
    tests = ["tests/test_checkpoint_versions.py", "tests/test_contract.py", "tests/test_seeds.py", "-k",
             "not seeds or computes_what_the_single_script_computes_for_its_seed or refuses or every_flag"]  # fmt: skip
    code, out = run(changed, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, timeout=1200)
    assert code == 0, out[-3000:]
    assert " passed" in out.splitlines()[-1] and "failed" not in out.splitlines()[-1], out[-500:]


@pytest.mark.long
def test_the_family_report_names_the_one_definition_the_change_made_differ(changed):
    """The change keeps the copy's layout tests green and the family's report names what it made depart: its ppo_loss
    now differs from that of the neighbours that share it (ppo.py, ppo_atari.py); to carry the change into the family,
    allow it there or change them alike. The rest the change touched (Args, Agent, train, a new class) may differ."""
    code, out = run(changed, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "tests/test_layout.py")
    assert code == 0, out[-3000:]
    code, out = run(changed, "tests/family_report.py")
    departures = [line.strip() for line in out.splitlines() if "ALLOWED_TO_DIFFER" in line]
    assert code == 0 and departures == [f"ppo_loss differs between {a}.py and {b}.py: allow it in ALLOWED_TO_DIFFER or "
                                        "change both alike" for a, b in (("ppo", "ppo_continuous_action"),
                                                                         ("ppo_continuous_action", "ppo_atari"))], out
