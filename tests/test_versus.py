"""benchmark/speed.py side by side: configurations run alternately, each process in a fresh folder, the ratios of their
speeds to a base, a configuration of several processes, the share of a ceiling, and its errors."""

import subprocess
import sys

import pytest
from conftest import ROOT


# a stand-in for a training script: checks the flags it is given, notes that it ran and where, logs one charts/SPS
STAND_IN = """
import os, sys
from torch.utils.tensorboard import SummaryWriter
flags = dict(zip(sys.argv[1::2], sys.argv[2::2]))
assert flags == {{"--env-id": "Fake-v0", "--total-timesteps": "1000", "--seed": "3", **{extra}}}, flags
with open({log!r}, "a") as f:
    f.write("{name} " + os.getcwd() + "\\n")
writer = SummaryWriter("runs/stand-in")
writer.add_scalar("charts/SPS", {sps}, 1000)
writer.close()
"""


@pytest.mark.slow
def test_speed_alternates_the_configurations_and_reports_the_ratios(tmp_path, monkeypatch):
    """speed.py on two stand-ins, 'ours' (SPS 300) and 'peer' (SPS 100), each run in a folder of its own; it alternates
    them, gives each the common flags (and ours its own), and reports each round's ratios and their median. Wall time is
    read from a fake clock (speed.py's time.perf_counter) that says ours ran 2 s then 3 s and the peer 5 s then 8 s:
    by hand, 1000 steps each, ours 500 and 333 SPS, the peer 200 and 125; ours / the peer's SPS 2.50x and 2.67x, their
    median 2.58x (the medians' ratio would be 2.60x); the logged SPS 300 / 100 = 3.00x in both rounds."""
    import types

    import speed

    readings = iter([0.0, 2.0, 10.0, 15.0, 20.0, 23.0, 30.0, 38.0])  # start and end of each run, in the order they run
    monkeypatch.setattr(speed, "time", types.SimpleNamespace(perf_counter=lambda: next(readings)))
    log = tmp_path / "order.txt"
    for name, sps, extra in (("ours", 300, {"--fast": "yes"}), ("peer", 100, {})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.py").write_text(STAND_IN.format(name=name, sps=sps, log=str(log), extra=extra))
    output = tmp_path / "results" / "speed.md"
    summary = speed.main([f"ours={tmp_path / 'ours' / 'train.py'} --fast yes", f"peer={tmp_path / 'peer' / 'train.py'}",
                          "--flags", "--env-id Fake-v0 --total-timesteps 1000 --seed 3", "--base", "peer",
                          "--rounds", "2", "--output", str(output)])  # fmt: skip
    ran = [line.split(" ", 1) for line in log.read_text().splitlines()]
    assert [name for name, _ in ran] == ["ours", "peer", "ours", "peer"]
    assert len({folder for _, folder in ran}) == 4 and str(tmp_path) not in {folder for _, folder in ran}
    assert summary["ours"]["ratio"] == pytest.approx((5 / 2 + 8 / 3) / 2) and summary["ours"]["logged_ratio"] == 3.0
    lines = output.read_text().splitlines()
    assert lines[2].startswith("`python benchmark/speed.py 'ours=") and "--base peer --rounds 2" in lines[2]
    assert "CPUs" in lines[4]
    rows = ["| ours | 1 | 2.0 | 500 | 300 | 2.50x / 3.00x |", "| ours | 2 | 3.0 | 333 | 300 | 2.67x / 3.00x |",
            "| ours | median | 2.5 | 417 | 300 | **2.58x** / 3.00x (peer) |", "| peer | 1 | 5.0 | 200 | 100 | - / - |",
            "| peer | 2 | 8.0 | 125 | 100 | - / - |", "| peer | median | 6.5 | 162 | 100 | base |"]  # fmt: skip
    assert lines[-6:] == rows


@pytest.mark.slow
def test_speed_stops_with_the_scripts_error(tmp_path):
    (tmp_path / "fails.py").write_text("import sys\nsys.exit('error: --env-id Fake-v0 is not registered')\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "speed.py"), f"a={tmp_path / 'fails.py'}", f"b={tmp_path / 'fails.py'}",
         "--flags", "--env-id Fake-v0 --total-timesteps 1000"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "fails.py exited with 1: error: --env-id Fake-v0 is not registered" in result.stderr


@pytest.mark.slow
def test_speed_names_the_timeout_of_a_run_too_slow(tmp_path):
    (tmp_path / "slow.py").write_text("import time\ntime.sleep(30)\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "speed.py"), f"a={tmp_path / 'slow.py'}", f"b={tmp_path / 'slow.py'}",
         "--flags", "--env-id Fake-v0 --total-timesteps 1000", "--timeout", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "slow.py ran past --timeout 1 s; raise --timeout" in result.stderr


def test_processes_one_after_another_sum_and_ceilings_share(tmp_path, monkeypatch):
    """Many seeds in one process against one process per seed, with the processes stood in for: a run of the single
    script takes 2 s, one of N seeds in one process N / 2 s, and the env-only ceiling measures 1,000 SPS per env. The
    flags reach each process in order ({1..4} written out, the common flags after each command's own, a timeout of
    3,600 s) and each rate is steps over wall time: the single script's three seeds one after another 3 x 102,400 / 6 s
    = 51,200 SPS, 4 seeds in one process 4 x 102,400 / 2 s = 204,800 (4.00x); each is 5,120% of its ceiling (1,000 and
    4,000)."""
    import speed

    calls = []

    def run_process(proc, folder, env, timeout, until):
        calls.append((proc.kind, proc.script.name, proc.words, timeout))
        seeds = proc.words.index("--env-id") - proc.words.index("--seeds") - 1 if "--seeds" in proc.words else 1
        if proc.kind == "env-only":
            return 5.0, 1000.0 * seeds, {}, None
        return (seeds / 2 if "--seeds" in proc.words else 2.0), None, {}, None

    monkeypatch.setattr(speed, "run_process", run_process)
    single = " ; ".join(f"ppo_continuous_action.py --seed {seed}" for seed in (1, 2, 3))
    speed.main([f"single={single}", "seeds4=ppo_continuous_action_seeds.py --seeds {1..4}",
                "env1=env-only ppo_continuous_action.py", "env4=env-only ppo_continuous_action_seeds.py --seeds {1..4}",
                "--flags", "--env-id Hopper-v5 --total-timesteps 102400", "--ceiling", "single=env1", "--ceiling",
                "seeds4=env4", "--rounds", "1", "--output", str(tmp_path / "out" / "speed.md")])  # fmt: skip
    common = ["--env-id", "Hopper-v5", "--total-timesteps", "102400"]
    seeds = ["--seeds", "1", "2", "3", "4"]
    assert calls == [("script", "ppo_continuous_action.py", ["--seed", str(seed), *common], 3600) for seed in (1, 2, 3)] + [
        ("script", "ppo_continuous_action_seeds.py", seeds + common, 3600),
        ("env-only", "ppo_continuous_action.py", common, 3600),
        ("env-only", "ppo_continuous_action_seeds.py", seeds + common, 3600),
    ]
    lines = (tmp_path / "out" / "speed.md").read_text().splitlines()
    assert "| single | 1 | 6.0 | 51200 | - | - / - |" in lines
    assert "| seeds4 | 1 | 2.0 | 204800 | - | 4.00x / - |" in lines
    assert "| single | env1 | 1000 | 5120% | - |" in lines
    assert "| seeds4 | env4 | 4000 | 5120% | - |" in lines


@pytest.mark.parametrize(
    "args,named",
    [
        (["ours"], "NAME=COMMAND"),
        (["a=ppo.py", "a=ppo.py"], "given twice"),
        (["a=split --steps 5 ppo.py"], "--steps"),
        (["a=update --step fast ppo.py"], "--step"),
        (["a=env-only $CLEANRL_DIR/ppo.py"], "CLEANRL_DIR"),
        (["a=no_such_script.py"], "no_such_script.py"),
        (["a=no-such-revision:ppo.py"], "no-such-revision"),
        (["a=cleanrl-tuner --env-id Hopper-v5 --total-timesteps 2048"], "CLEANRL_DIR"),
    ],
)
def test_bad_configurations_are_one_line_before_anything_runs(tmp_path, monkeypatch, args, named):
    import speed

    monkeypatch.delenv("CLEANRL_DIR", raising=False)
    monkeypatch.setattr(speed, "run_rounds", lambda *a: pytest.fail("it ran"))
    with pytest.raises(SystemExit) as stopped:
        speed.main(args)
    message = str(stopped.value.code)
    assert message.startswith("error: ") and "\n" not in message and named in message, message


@pytest.mark.parametrize("args,named", [(["a=ppo.py", "--base", "b"], "--base b"),
                                        (["a=ppo.py", "--ceiling", "a"], "--ceiling a")])
def test_a_base_or_ceiling_that_names_no_configuration_is_refused(capsys, monkeypatch, args, named):
    import speed

    monkeypatch.setattr(speed, "run_rounds", lambda *a: pytest.fail("it ran"))
    with pytest.raises(SystemExit):
        speed.main(args)
    assert named in capsys.readouterr().err.splitlines()[-1]
