"""What the benchmark tests share (tests/test_runner.py, test_report.py): the runner on a tiny matrix and the report
built from a folder, each run as a user runs it. A helper module, not a test module: no test module imports another."""

import subprocess
import sys

from conftest import ROOT

TINY = ["--script", "ppo_continuous_action.py", "--env-ids", "InvertedPendulum-v5", "--seeds", "1", "2"]
TINY += ["--total-timesteps", "2048"]


def runner(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "run.py"), *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def tiny_matrix(tmp_path_factory):
    """Two 2k-step runs on two workers, then the same command again: (out folder, first run, second run, the mtime of
    each done.json after the first)."""
    out = tmp_path_factory.mktemp("bench") / "tiny"
    first = runner(*TINY, "--workers", "2", "--out", str(out))
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/*/*/done.json")}
    second = runner(*TINY, "--workers", "2", "--out", str(out))
    return out, first, second, stamps


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
