"""Checkpoints across versions of a script: an agent.pt written before a flag existed loads in a later version with
that flag at its default, saying so in one line; one that holds a flag the script does not know is refused in one line.
The checkpoints are fixtures committed as today's scripts wrote them (tests/fixtures/make_checkpoints.py); the later
version is a copy of the script with a flag added, run as a user runs it."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "checkpoints"
SCRIPTS = ["ppo", "ppo_continuous_action"]
NEW_FLAG = "    probe_flag: bool = False  # (V1) a flag added after the fixture was written; off: as before\n"
NOTE = re.compile(r"was written before (--[\w-]+ )*--probe-flag( --[\w-]+)* existed; it loads with (.+, )?--probe-flag False")


def notes(err):
    """The lines of `err` that say the checkpoint loads --probe-flag at its default (among the flags added since)."""
    return [line for line in err.splitlines() if NOTE.search(line)]


def fixture(name):
    (folder,) = (FIXTURES / name).iterdir()
    return folder


def later_version(name, where):
    """A copy of script `name` in `where` with one flag more in its Args, before the class variables."""
    text = (ROOT / f"{name}.py").read_text()
    anchor = "    script: ClassVar[str]"
    assert text.count(anchor) == 1, f"{name}.py's Args no longer has one `script` class variable to add the flag before"
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{name}.py").write_text(text.replace(anchor, NEW_FLAG + anchor))
    return where / f"{name}.py"


def run(script, cwd, *flags):
    env = os.environ | {"PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, str(script), *flags], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def placed(name, runs):
    """The fixture's run folder copied under `runs` (a run resumes in a folder named after it)."""
    folder = fixture(name)
    shutil.copytree(folder, runs / folder.name)
    return runs / folder.name / "agent.pt"


def test_the_fixtures_are_checkpoints_the_scripts_still_know():
    """Each fixture names its script, stopped after its first update of two and holds only flags the script still has
    (a flag removed or renamed would leave every checkpoint written before unloadable); the script's flags added since
    load at their defaults."""
    for name in SCRIPTS:
        checkpoint = torch.load(fixture(name) / "agent.pt", weights_only=True)
        assert checkpoint["script"] == f"{name}.py" and checkpoint["iteration"] == 1
        text = (ROOT / f"{name}.py").read_text()
        args = text[text.index("class Args") : text.index("    script: ClassVar[str]")]
        flags = set(re.findall(r"^    (\w+): ", args, re.M))
        assert set(checkpoint["args"]) <= flags, f"{name}.py lost flags: {sorted(set(checkpoint['args']) - flags)}"


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_checkpoint_from_before_a_flag_plays_and_resumes_with_its_default(tmp_path, name):
    script = later_version(name, tmp_path / "later")
    checkpoint = placed(name, tmp_path / "runs")
    code, out, err = run(script, tmp_path, "--eval-checkpoint", str(checkpoint), "--eval-episodes", "1")
    assert code == 0, err
    (note,) = notes(err)
    assert note.startswith(f"note: --eval-checkpoint {checkpoint} was written before "), err
    assert re.search(r"mean return -?[0-9.]+ \+- [0-9.]+ over 1 episodes", out + err), out + err

    code, out, err = run(script, tmp_path, "--resume", str(checkpoint))
    assert code == 0, err
    assert len(notes(err)) == 1, err
    resumed = torch.load(checkpoint, weights_only=True)  # the finished run's agent.pt, written by the later version
    assert resumed["iteration"] == 2 and resumed["args"]["probe_flag"] is False

    # that checkpoint holds --probe-flag, which today's script does not know: refused in one line, the file kept
    before = checkpoint.read_bytes()
    code, out, err = run(ROOT / f"{name}.py", tmp_path, "--eval-checkpoint", str(checkpoint))
    assert code == 1 and err.strip().splitlines() == [
        f"error: --eval-checkpoint {checkpoint} was written by another version of {name}.py, with flags this one does not "
        "have (--probe-flag); load it with the version that wrote it"
    ], err
    assert checkpoint.read_bytes() == before
