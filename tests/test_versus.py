"""benchmark/versus.py: our script and a peer's run alternately, the ratios of their speeds, and its errors."""

import subprocess
import sys

import pytest
from conftest import ROOT


# a stand-in for a training script: checks the flags it is given, notes that it ran, logs one charts/SPS
STAND_IN = """
import sys
from torch.utils.tensorboard import SummaryWriter
flags = dict(zip(sys.argv[1::2], sys.argv[2::2]))
assert flags == {{"--env-id": "Fake-v0", "--total-timesteps": "1000", "--seed": "3", **{extra}}}, flags
with open({log!r}, "a") as f:
    f.write("{name}\\n")
writer = SummaryWriter("runs/stand-in")
writer.add_scalar("charts/SPS", {sps}, 1000)
writer.close()
"""


@pytest.mark.slow
def test_versus_alternates_the_two_scripts_and_reports_the_ratios(tmp_path, monkeypatch):
    """versus.py on two stand-ins, 'ours' (SPS 300) and 'peer' (SPS 100), run from their own folder; it alternates
    them, gives each the same env, steps and seed (and ours its extra flags), and reports the medians' ratios. Wall time
    is read from a fake clock (versus.py's time.perf_counter) that says ours ran 2 s then 3 s and the peer 5 s then 8 s:
    by hand the medians are 2.5 and 6.5 s, the peer's wall time / ours 2.60x; the logged SPS 300 / 100 = 3.00x."""
    import types

    import versus

    readings = iter([0.0, 2.0, 10.0, 15.0, 20.0, 23.0, 30.0, 38.0])  # start and end of each run, in the order they run
    monkeypatch.setattr(versus, "time", types.SimpleNamespace(perf_counter=lambda: next(readings)))
    log = tmp_path / "order.txt"
    for name, sps, extra in (("ours", 300, {"--fast": "yes"}), ("peer", 100, {})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.py").write_text(STAND_IN.format(name=name, sps=sps, log=str(log), extra=extra))
    output = tmp_path / "results" / "versus.md"
    wall_ratio, sps_ratio = versus.main([str(tmp_path / "ours" / "train.py"), str(tmp_path / "peer" / "train.py"),
                                         "--env-id", "Fake-v0", "--total-timesteps", "1000", "--seed", "3",
                                         "--rounds", "2", "--output", str(output), "--", "--fast", "yes"])  # fmt: skip
    assert log.read_text().split() == ["ours", "peer", "ours", "peer"]
    assert sps_ratio == pytest.approx(3.0) and wall_ratio == pytest.approx(2.6)
    lines = output.read_text().splitlines()
    rows = ["| 1 | 2.0 | 300 | 5.0 | 100 |", "| 2 | 3.0 | 300 | 8.0 | 100 |", "| median | 2.5 | 300 | 6.5 | 100 |"]
    assert lines[-5:-2] == rows
    assert lines[-1] == "Peer's wall time / ours (medians): **2.60x**; our logged SPS / the peer's (medians): 3.00x."
    assert "CPUs" in lines[4]


@pytest.mark.slow
def test_versus_stops_with_the_scripts_error(tmp_path):
    (tmp_path / "fails.py").write_text("import sys\nsys.exit('error: --env-id Fake-v0 is not registered')\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "versus.py"), str(tmp_path / "fails.py"), str(tmp_path / "fails.py"),
         "--env-id", "Fake-v0", "--total-timesteps", "1000"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "fails.py exited with 1: error: --env-id Fake-v0 is not registered" in result.stderr


@pytest.mark.slow
def test_versus_names_the_timeout_of_a_run_too_slow(tmp_path):
    (tmp_path / "slow.py").write_text("import time\ntime.sleep(30)\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "versus.py"), str(tmp_path / "slow.py"), str(tmp_path / "slow.py"),
         "--env-id", "Fake-v0", "--total-timesteps", "1000", "--timeout", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "slow.py ran past --timeout 1 s; raise --timeout" in result.stderr


def test_seeds_speed_passes_its_defaults_and_reports_the_aggregate_rates(tmp_path, monkeypatch):
    """seeds_speed.py with its processes stood in for: a run of the single script takes 2 s, one of N seeds in one
    process N / 2 s, and the env-only ceiling is 1,000 SPS per env. Its defaults reach the scripts (Hopper-v5, 102,400
    steps per seed, three single-seed runs, a timeout of 3,600 s) and each rate is steps over wall time: the single
    script 3 x 102,400 / 6 s = 51,200 SPS, 4 seeds in one process 4 x 102,400 / 2 s = 204,800 (4.00x); each is 5,120%
    of its ceiling (1,000 and 4,000)."""
    import seeds_speed

    calls = []

    def run_once(script, flags, env, timeout):
        calls.append((script.name, flags, timeout))
        return (len(flags[flags.index("--seeds") + 1 :]) / 2 if "--seeds" in flags else 2.0), None

    monkeypatch.setattr(seeds_speed, "run_once", run_once)
    monkeypatch.setattr(seeds_speed, "env_ceilings", lambda env_id, counts, steps: {0: 1000, **{n: 1000 * n for n in counts}})
    seeds_speed.main(["--seeds-counts", "4", "--rounds", "1", "--output", str(tmp_path / "out" / "speed.md")])
    common = ["--env-id", "Hopper-v5", "--total-timesteps", "102400"]
    assert calls == [("ppo_continuous_action.py", common + ["--seed", str(seed)], 3600) for seed in (1, 2, 3)] + [
        ("ppo_continuous_action_seeds.py", common + ["--seeds", "1", "2", "3", "4"], 3600)
    ]
    lines = (tmp_path / "out" / "speed.md").read_text().splitlines()
    assert "| 1 | 6.0 / 51200 | 2.0 / 204800 / 4.00x |" in lines
    assert "| single script (1 env) | 1000 | 5120% |" in lines
    assert "| 4 seeds in one process (4 envs) | 4000 | 5120% |" in lines
