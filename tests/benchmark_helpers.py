"""What the benchmark tests share (tests/test_runner.py, test_report.py): the runner on a tiny matrix and the report
built from a folder, each run as a user runs it. A helper module, not a test module: no test module imports another."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from conftest import ROOT

TINY = ["--script", "ppo_continuous_action.py", "--env-ids", "InvertedPendulum-v5", "--seeds", "1", "2"]
TINY += ["--total-timesteps", "2048"]


def runner(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "run.py"), *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def tiny_matrix(tmp_path_factory):
    """Two 2k-step runs on two workers, then the same command again: (out folder, first run, second run, the mtime of
    each done.json after the first). Made once a session: under pytest-xdist each worker would otherwise make its own
    for each module that asks (three to four times, 15-28 s each), so the first to ask makes it in the session's common
    temporary folder under a lock, and the others read what it recorded. The tests only read the folder."""
    own = tmp_path_factory.getbasetemp()
    common = own.parent if os.environ.get("PYTEST_XDIST_WORKER") else own  # pytest-N/ above popen-gwK/ under xdist
    out, record = common / "tiny", common / "tiny.json"
    with FileLock(str(common / "tiny.lock")):
        if not record.exists():
            first = runner(*TINY, "--workers", "2", "--out", str(out))
            stamps = {str(p): p.stat().st_mtime_ns for p in out.glob("*/*/*/done.json")}
            second = runner(*TINY, "--workers", "2", "--out", str(out))
            runs = [{key: getattr(r, key) for key in ("args", "returncode", "stdout", "stderr")} for r in (first, second)]
            record.write_text(json.dumps({"runs": runs, "stamps": stamps}))
    recorded = json.loads(record.read_text())
    first, second = (subprocess.CompletedProcess(**r) for r in recorded["runs"])
    return out, first, second, {Path(p): t for p, t in recorded["stamps"].items()}


def report_of(folder, output, *flags):
    built = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "report.py"), str(folder), "--output", str(output), *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return (output / "README.md").read_text()


def score_row(text):
    return next(line for line in text.splitlines() if line.startswith("| InvertedPendulum-v5 | default |"))


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder no write gets into: chmod 555 where the tests run as a user; as root (which chmod does not stop) a
    tmpfs mounted read-only, skipped where mounting is not allowed."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"as root a read-only folder needs mount -t tmpfs (not allowed here: {mounted.stderr!r})")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)
