"""benchmark/run.py: the runner on a tiny matrix (layout, skipping finished runs, commands, Slurm script), peers and
presets, stopping and continuing runs, and the ablation preset against docs/details.md."""

import json
import shutil
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import tyro
from benchmark_helpers import TINY, read_only_folder, report_of, runner, tiny_matrix  # noqa: F401 (a fixture)
from conftest import ROOT, SCRIPTS, contract_flags, load_script
from ppo_utils.flag_checks import check_flags

import report_data  # benchmark/report_data.py (pyproject.toml puts benchmark/ on pytest's path)
import run  # benchmark/run.py


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two 2k-step runs on two workers, then the same command again (tiny_matrix)."""
    return tiny_matrix(tmp_path_factory)


@pytest.mark.slow
def test_runner_writes_one_folder_per_run_with_logs(tiny):
    out, first, _, _ = tiny
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[2/2]" in first.stdout
    for seed in (1, 2):
        folder = out / "InvertedPendulum-v5" / "default" / f"seed{seed}"
        record = json.loads((folder / "done.json").read_text())
        assert record["returncode"] == 0 and f"--seed {seed}" in record["command"]
        assert "CPUs" in record["machine"] and record["commit"]  # what the report states of each run
        assert len(list(folder.glob("runs/*/events.out.tfevents*"))) == 1
        assert "step 2048/2048" in (folder / "output.log").read_text()


@pytest.mark.slow
def test_runner_skips_finished_runs(tiny):
    out, _, second, stamps = tiny
    assert second.returncode == 0, second.stdout + second.stderr
    assert "2 already done, 0 to run" in second.stdout
    assert len(stamps) == 2 and all(p.stat().st_mtime_ns == t for p, t in stamps.items())


@pytest.mark.slow
def test_runner_records_the_commit_a_run_started_from(tmp_path, monkeypatch):
    """A commit made while a run trains is not the code it ran: done.json names the checkout at the run's start."""
    import threading

    head = {"now": "abc1234"}

    class Training:  # the run's process, during which somebody commits
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait(self):
            head["now"] = "def5678"
            return 0

    monkeypatch.setattr(run, "commit", lambda: head["now"])
    monkeypatch.setattr(run.subprocess, "Popen", Training)
    monkeypatch.setattr(run, "machine", lambda: "a machine")  # it would start processes too
    one = run.PlannedRun("ppo_continuous_action.py", "InvertedPendulum-v5", "default", 1, 2048)
    assert run.execute(one, tmp_path, threading.Event())[2] == "done"
    assert json.loads((one.folder(tmp_path) / "done.json").read_text())["commit"] == "abc1234"


@pytest.mark.slow
def test_runner_marks_a_commit_changed_only_when_its_code_differs(tmp_path):
    """Editing a report while runs start leaves their commit clean; an edited script or requirements.txt marks it."""

    def git(*args):
        command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
        subprocess.run(command, cwd=tmp_path, check=True, capture_output=True)

    files = {"train.py": "x = 1\n", "requirements.txt": "torch\n", "notes.md": "a\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "first")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True, text=True)
    head = head.stdout.strip()
    assert run.commit(tmp_path) == head
    (tmp_path / "notes.md").write_text("b\n")
    (tmp_path / "untracked.py").write_text("y = 2\n")
    assert run.commit(tmp_path) == head
    for name in ("train.py", "requirements.txt"):
        (tmp_path / name).write_text("changed\n")
        assert run.commit(tmp_path) == head + "+changes", name
        git("checkout", "--", name)


PEER = """import json, os, sys
json.dump({"argv": sys.argv[1:], "threads": os.environ.get("OMP_NUM_THREADS"), "gl": os.environ.get("MUJOCO_GL")},
          open("seen.json", "w"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_runner_runs_a_peer_with_its_own_defaults_and_shares_the_cpus(tmp_path, workers):
    """A peer is one more variant: its script gets --env-id, --seed and --total-timesteps alone (no --flags, which
    are ours), in <out>/<env>/<peer name>/seed<k>/. Each run gets the CPUs divided among the workers as torch
    threads, and MUJOCO_GL is not set for it (nothing renders)."""
    peer = tmp_path / "elsewhere" / "their_ppo.py"
    peer.parent.mkdir()
    peer.write_text(PEER)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "run.py"), *TINY, "--out", str(out), "--workers", str(workers)]
        + ["--peer", f"theirs={peer}", "--flags=--no-gae", "--print-commands"],
        capture_output=True,
        text=True,
        env=env,
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 4 and sum("their_ppo.py" in line for line in lines) == 2 and "--no-gae" not in lines[-1]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "ppo_atari.py", "--env-ids", "Pong", "Breakout"]
        + ["--seeds", "3", "--total-timesteps", "7", "--peer", f"theirs={peer}", "--variant", "skip=--no-gae"]
        + ["--out", str(out), "--workers", str(workers), "--index", "1"],  # runs only the matrix's second run
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads((out / "Pong" / "theirs" / "seed3" / "seen.json").read_text())
    assert seen["argv"] == ["--env-id", "Pong", "--seed", "3", "--total-timesteps", "7"]
    assert seen["threads"] == str(max(1, os.cpu_count() // workers)) and seen["gl"] is None
    assert (out / "Pong" / "theirs" / "seed3" / "done.json").exists() and not (out / "Pong" / "skip").exists()


@pytest.mark.slow
def test_a_peers_own_flags_go_to_it_alone_and_its_runs_are_marked_as_a_peers(tmp_path):
    """--peer 'NAME=SCRIPT FLAGS': the peer gets FLAGS after the three it always gets; --flags and the variants' flags
    do not reach it, and its done.json names it as a peer (report.py's "Ours against peers")."""
    peer = tmp_path / "elsewhere" / "their_ppo.py"
    peer.parent.mkdir()
    peer.write_text(PEER)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "ppo_atari.py", "--env-ids", "Pong"]
        + ["--seeds", "3", "--total-timesteps", "7", "--peer", f"theirs={peer} --gamma 1 --num-envs 8"]
        + ["--variant", "skip=--no-gae", "--flags=--no-gae", "--out", str(out), "--workers", "1", "--index", "1"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads((out / "Pong" / "theirs" / "seed3" / "seen.json").read_text())
    assert seen["argv"] == ["--env-id", "Pong", "--seed", "3", "--total-timesteps", "7", "--gamma", "1", "--num-envs", "8"]
    assert json.loads((out / "Pong" / "theirs" / "seed3" / "done.json").read_text())["peer"] == "their_ppo.py"
    assert not (out / "Pong" / "skip").exists()


def test_runner_refuses_a_missing_peer_in_one_line(tmp_path):
    done = runner(*TINY, "--peer", f"theirs={tmp_path / 'nothing.py'}", "--print-commands")
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0 and "--peer theirs=" in done.stderr


@pytest.mark.slow
def test_a_presets_peer_is_found_through_its_environment_variable(tmp_path):
    """The atari preset runs CleanRL's ppo_atari.py beside ours, from the folder CLEANRL_DIR names; unset, or naming a
    folder without it, the runner stops with one line saying what to set (or --peer NAME=PATH)."""
    (tmp_path / "cleanrl").mkdir()
    (tmp_path / "cleanrl" / "ppo_atari.py").write_text("")
    preset = [
        "--preset",
        "atari",
        "--seeds",
        "1",
        "--env-ids",
        "PongNoFrameskip-v4",
        "--out",
        str(tmp_path / "x"),
        "--results",
        str(tmp_path / "no-results"),
    ]  # the committed Pong seed 1 would be skipped
    env = {key: value for key, value in os.environ.items() if key != "CLEANRL_DIR"}
    unset = subprocess.run([sys.executable, str(ROOT / "benchmark" / "run.py"), *preset, "--print-commands"], env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert unset.returncode == 1 and unset.stderr.count("\n") == 1, unset.stderr
    assert unset.stderr.startswith("error: peer cleanrl of --preset atari: CLEANRL_DIR is not set; set CLEANRL_DIR")
    found = subprocess.run([sys.executable, str(ROOT / "benchmark" / "run.py"), *preset, "--print-commands"],
                           env={**env, "CLEANRL_DIR": str(tmp_path / "cleanrl")}, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    lines = found.stdout.strip().splitlines()
    assert found.returncode == 0 and len(lines) == 2 and str(tmp_path / "cleanrl" / "ppo_atari.py") in lines[1], found.stderr


def test_runner_prints_commands_and_writes_a_slurm_array(tmp_path):
    printed = runner(*TINY, "--out", str(tmp_path / "x"), "--print-commands")
    lines = printed.stdout.strip().splitlines()
    assert printed.returncode == 0 and len(lines) == 2
    assert all(line.startswith("cd ") and "InvertedPendulum-v5" in line for line in lines)
    assert "--seed 1" in lines[0] and "--seed 2" in lines[1]
    assert not (tmp_path / "x").exists()  # printing runs nothing

    job = tmp_path / "job.sbatch"
    written = runner(*TINY, "--out", str(tmp_path / "x"), "--slurm", str(job))
    text = job.read_text()
    assert written.returncode == 0 and "#SBATCH --array=0-1" in text
    assert "--index $SLURM_ARRAY_TASK_ID" in text and "--slurm" not in text


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--variant", "no-equals-sign"], "--variant"),
        (["--index", "9"], "--index"),
        (["--script", "ppo_missing.py"], "--script"),
        (["--workers", "0"], "--workers"),
    ],
)
def test_runner_bad_input_is_one_line(tmp_path, args, flag):
    result = runner(*TINY, "--out", str(tmp_path / "x"), *args)
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert flag in message and "Traceback" not in result.stderr
    assert message.startswith(("error: ", "run.py: error: ")), message


@pytest.mark.slow
def test_runner_skips_runs_whose_data_are_committed(tiny, tmp_path):
    results = tmp_path / "results"
    folder = tmp_path / "one" / "InvertedPendulum-v5" / "default" / "seed1"
    shutil.copytree(tiny[0] / "InvertedPendulum-v5" / "default" / "seed1", folder)
    report_of(tmp_path / "one", results)  # data for seed 1 only
    printed = runner(*TINY, "--out", str(tmp_path / "fresh"), "--results", str(results), "--print-commands")
    lines = printed.stdout.strip().splitlines()
    assert printed.returncode == 0 and len(lines) == 1 and "--seed 2" in lines[0]


@pytest.mark.parametrize("name", SCRIPTS)
def test_ablation_preset_turns_off_each_detail_of_the_contract(name):
    module = load_script(name)
    variants = run.ablations(f"{name}.py")
    default = module.Args()
    covered = set()
    for variant, flags in variants.items():
        args = tyro.cli(module.Args, args=flags.split())
        check_flags(args)  # each value lies in its flag's range (the script's Args.flag_rules and the run flags' rules)
        if variant == "default":
            assert args == default
            continue
        assert args != default, variant  # the variant changes something
        covered.add(variant.split("-")[0])
    expected = {detail for _, detail in contract_flags(name) if detail is not None and not detail.startswith("B3")}
    assert covered == expected


@pytest.mark.long
def test_runner_interrupted_by_ctrl_c_continues_from_the_checkpoint(tmp_path):
    out = tmp_path / "x"
    args = [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "ppo_continuous_action.py"]
    args += ["--env-ids", "InvertedPendulum-v5", "--total-timesteps", "16384", "--flags=--checkpoint-interval=1"]
    args += ["--out", str(out), "--workers", "1"]
    runner_process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    folder = out / "InvertedPendulum-v5" / "default" / "seed1"
    deadline = time.time() + 300
    while not list(folder.glob("runs/*/agent.pt")) and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(runner_process.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the runner and its runs
    stdout, _ = runner_process.communicate(timeout=300)
    assert runner_process.returncode == 130 and "interrupted" in stdout
    assert not (folder / "done.json").exists()
    assert "stopped by a signal" in (folder / "output.log").read_text()

    again = runner(*args[2:])
    log = (folder / "output.log").read_text()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "--resume" in log and "resumed" in log and "step 16384/16384" in log
    assert (folder / "done.json").exists() and len(list(folder.glob("runs/*"))) == 1


@pytest.mark.long
def test_runner_does_not_call_a_run_stopped_by_its_own_signal_done(tmp_path):
    """A SIGTERM that reaches a training process but not the runner (a cluster's preemption, a kill): the run saves a
    checkpoint and exits 0 like a finished one, yet it is not done: no done.json, and the runner says so. The same
    command then continues it to its end, and that is done (its checkpoint is still the stop's: no periodic ones)."""
    out = tmp_path / "x"
    args = [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "ppo_continuous_action.py"]
    args += ["--env-ids", "InvertedPendulum-v5", "--total-timesteps", "16384", "--out", str(out), "--workers", "1"]
    every_update = {**os.environ, "PPO_PROGRESS_SECONDS": "0"}  # a progress line each update, not each 10 s
    runner_process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True, env=every_update)
    folder = out / "InvertedPendulum-v5" / "default" / "seed1"
    deadline = time.time() + 300
    while "step 2048/16384  SPS" not in ((folder / "output.log").read_text() if (folder / "output.log").exists() else ""):
        assert time.time() < deadline
        time.sleep(0.2)
    tasks = Path(f"/proc/{runner_process.pid}/task").glob("*/children")  # the runner's worker thread started it
    (training,) = [int(pid) for task in tasks for pid in task.read_text().split()]
    os.kill(training, signal.SIGTERM)  # after update 1 of 8, however fast the machine: 7 updates still to go
    stdout, _ = runner_process.communicate(timeout=300)
    assert "stopped by a signal" in (folder / "output.log").read_text()
    assert runner_process.returncode == 1 and "STOPPED by a signal" in stdout
    assert not (folder / "done.json").exists()

    again = runner(*args[2:])
    assert again.returncode == 0 and "seed 1: done" in again.stdout, again.stdout + again.stderr
    assert "step 16384/16384" in (folder / "output.log").read_text() and (folder / "done.json").exists()


@pytest.mark.long
def test_runner_stopped_by_sigterm_stops_its_runs_with_a_checkpoint(tmp_path):
    """A SIGTERM to the runner alone (kill, a scheduler) stops it as Ctrl-C does: its run saves a checkpoint and exits,
    no process is left behind, nothing is marked done."""
    out = tmp_path / "x"
    args = [sys.executable, str(ROOT / "benchmark" / "run.py"), "--script", "ppo_continuous_action.py"]
    args += ["--env-ids", "InvertedPendulum-v5", "--total-timesteps", "65536", "--flags=--checkpoint-interval=1"]
    runner_process = subprocess.Popen(
        [*args, "--out", str(out), "--workers", "1"], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    folder = out / "InvertedPendulum-v5" / "default" / "seed1"
    deadline = time.time() + 300
    while not list(folder.glob("runs/*/agent.pt")) and time.time() < deadline:
        time.sleep(0.2)
    (training,) = [
        int(pid) for task in Path(f"/proc/{runner_process.pid}/task").glob("*/children") for pid in task.read_text().split()
    ]
    runner_process.send_signal(signal.SIGTERM)
    stdout, _ = runner_process.communicate(timeout=300)
    assert runner_process.returncode == 130 and "interrupted" in stdout
    assert "stopped by a signal" in (folder / "output.log").read_text()
    assert not Path(f"/proc/{training}").exists() and not (folder / "done.json").exists()


@pytest.mark.long
def test_runner_batch_seeds_trains_a_tasks_seeds_in_one_process_and_continues_it(tmp_path):
    """--batch-seeds: the seeds of a task and variant train in one process of ppo_continuous_action_seeds.py; each
    run's folder ends where its own process would have put it, so that the report reads it as any run. Ctrl-C stops
    the process with a checkpoint of every seed, and the same command continues them together to the end."""
    out = tmp_path / "x"
    args = [*TINY[:-1], "16384", "--flags=--checkpoint-interval=1", "--batch-seeds", "--out", str(out), "--workers", "1"]
    runner_process = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmark" / "run.py"), *args], cwd=ROOT, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    task = out / "InvertedPendulum-v5" / "default"
    deadline = time.time() + 300
    while len(list(task.glob("runs/*/agent.pt"))) < 2 and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(runner_process.pid, signal.SIGINT)
    stdout, _ = runner_process.communicate(timeout=300)
    assert runner_process.returncode == 130 and "2 to run on 1 workers in 1 processes" in stdout, stdout
    for seed in (1, 2):  # each stopped run moved to its seed's folder, not done
        assert len(list((task / f"seed{seed}").glob(f"runs/*__{seed}__*/agent.pt"))) == 1
        assert not (task / f"seed{seed}" / "done.json").exists()

    again = runner(*args)
    assert again.returncode == 0 and "seed 1 2: done" in again.stdout, again.stdout + again.stderr
    log = (task / "output.log").read_text()
    assert "--resume" in log and log.count("step 16384/16384") == 2
    for seed in (1, 2):
        record = json.loads((task / f"seed{seed}" / "done.json").read_text())
        assert record["seeds_in_process"] == 2 and "--seeds 1 2" in record["command"]
        assert len(list((task / f"seed{seed}").glob("runs/*"))) == 1
    tables = report_data.read_runs_folder(out)
    assert sorted(tables.runs["seed"]) == [1, 2] and set(tables.episodes["seed"]) == {1, 2}


def test_batch_seeds_puts_the_variants_a_setting_tells_apart_in_one_process():
    """--batch-seeds groups a task's variants whose flags differ only in flags a --setting may set into one process, a
    --setting each: the table1 preset's eleven G1 settings x 3 seeds (33 agents a task), the ablation's G1 (SPO too),
    G3-G6, G8, G9, G11, X1, X3, X4 and X5 variants with the defaults; a variant that shapes the batch or the network, or
    changes the envs or the loop, trains alone; a variant with fewer seeds left to run goes apart."""
    import shlex

    tasks = ("Hopper-v5", "Walker2d-v5")
    table1 = [run.PlannedRun("ppo_continuous_action.py", env_id, name, seed, 10**6, shlex.split(flags))
              for env_id in tasks for seed in (1, 2, 3) for name, flags in run.TABLE1.items()]  # fmt: skip
    found = run.batches(table1)
    assert [(b.env_id, len(b.runs), b.variants, b.seeds) for b in found] == [
        (env_id, 33, list(run.TABLE1), [1, 2, 3]) for env_id in tasks
    ]
    command = found[0].command()
    assert command[2:9] == ["--env-id", "Hopper-v5", "--seeds", "1", "2", "3", "--total-timesteps"]
    assert [word for word in command if word.startswith("--setting=")] == [f"--setting={n}={f}" for n, f in run.TABLE1.items()]
    assert found[0].folder(Path("out")) == Path("out/Hopper-v5/unclipped+10")
    assert found[0].run_of("Hopper-v5__ppo_continuous_action_seeds-kl-fixed-10__3__17").key == ("Hopper-v5", "kl-fixed-10", 3)
    assert found[0].run_of("Hopper-v5__ppo_continuous_action_seeds-kl-fixed-1__3__17").key == ("Hopper-v5", "kl-fixed-1", 3)

    variants = run.ablations("ppo_continuous_action.py")
    ablation = [run.PlannedRun("ppo_continuous_action.py", "Hopper-v5", name, seed, 10**6, shlex.split(flags))
                for name, flags in variants.items() for seed in (1, 2) if (name, seed) != ("G3-no-norm-adv", 2)]  # fmt: skip
    groups = [b.variants for b in run.batches(ablation)]
    together = ["default", "G1-unclipped", "G1-kl-fixed", "G1-kl-adaptive", "G1-spo", "G4-no-clip-vloss", "G5-ent-coef",
                "G6-no-anneal-lr", "G8-no-grad-clip", "G9-no-ortho-init", "G11-adam-eps", "X1-anneal-clip-coef",
                "X3-target-kl", "X4-kl-adaptive-lr", "X5-norm-value"]  # fmt: skip
    assert groups[0] == together and groups[1] == ["G3-no-norm-adv"]  # its seed 2 is done: seed 1 alone
    assert sorted(map(tuple, groups[2:])) == sorted((name,) for name in set(variants) - set(together) - {"G3-no-norm-adv"})
    assert run.batches(ablation)[1].command()[-1] == "--no-norm-adv"  # alone: today's command, no --setting


def test_the_runner_knows_the_flags_a_setting_may_set():
    per_agent = load_script("ppo_continuous_action_seeds").PER_AGENT  # the batched script's

    assert run.PER_AGENT_VALUES | run.PER_AGENT_SWITCHES == set(per_agent)
    assert run.PER_AGENT_SWITCHES == {name for name, value in vars(load_script("ppo_continuous_action").Args()).items()
                                      if isinstance(value, bool) and name in per_agent}  # fmt: skip


@pytest.mark.long
def test_runner_batch_seeds_trains_a_tasks_variants_in_one_process(tmp_path):
    """Two variants that differ in G1's objective and one that changes the envs (G10), two seeds each: the first two
    train in one process (a --setting each), the third in another; every run's folder ends where its own process would
    have put it, with its done.json, and the report reads all six."""
    out = tmp_path / "x"
    variants = ["--variant", "clip=", "--variant", "kl=--surrogate kl-adaptive --clip-coef 0.1", "--variant",
                "envs=--num-envs 2 --num-steps 1024"]  # fmt: skip
    result = runner(*TINY, *variants, "--batch-seeds", "--out", str(out), "--workers", "1")
    assert result.returncode == 0 and "6 to run on 1 workers in 2 processes" in result.stdout, result.stdout + result.stderr
    task = out / "InvertedPendulum-v5"
    assert "--setting=kl=--surrogate kl-adaptive --clip-coef 0.1" in (task / "clip+1" / "output.log").read_text()
    for variant in ("clip", "kl", "envs"):
        for seed in (1, 2):
            (folder,) = (task / variant / f"seed{seed}").glob("runs/*")
            exp_name = "ppo_continuous_action_seeds" + ("" if variant == "envs" else f"-{variant}")  # its setting's
            assert folder.name.split("__")[1:3] == [exp_name, str(seed)]
            record = json.loads((task / variant / f"seed{seed}" / "done.json").read_text())
            assert record["seeds_in_process"] == (2 if variant == "envs" else 4)
            saved = torch.load(folder / "agent.pt", weights_only=True)["args"]
            assert saved["surrogate"] == ("kl-adaptive" if variant == "kl" else "clip") and saved["seed"] == seed
    tables = report_data.read_runs_folder(out)
    assert sorted(zip(tables.runs["variant"], tables.runs["seed"])) == sorted(
        (v, s) for v in ("clip", "kl", "envs") for s in (1, 2)
    )
    agents = dict(zip(tables.runs["variant"] + tables.runs["seed"].astype(str), tables.runs["agents"]))
    assert agents == {"clip1": 4, "clip2": 4, "kl1": 4, "kl2": 4, "envs1": 2, "envs2": 2}  # runs.csv's, for the report


def test_the_runner_looks_for_the_line_a_stopped_run_ends_with():
    from ppo_utils.run import STOPPED

    assert run.STOPPED_LINE == STOPPED


def test_an_out_that_is_a_file_and_batch_seeds_with_slurm_are_one_line_before_anything_is_written(tmp_path):
    (tmp_path / "afile").write_text("")
    for args, line in (
        (["--out", "afile"], "run.py: error: --out afile is a file; pass a folder"),
        (["--batch-seeds", "--slurm", "job.sbatch"], "run.py: error: --batch-seeds groups runs into processes;"),
    ):
        result = runner("--preset", "mujoco", *args, cwd=tmp_path)
        assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(line), result.stderr[-2000:]
        assert sorted(os.listdir(tmp_path)) == ["afile"]  # no job script, no runs folder


def tree(folder):
    """Every path under `folder` with its file's bytes (None for a folder): what the file system holds there."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("names", [["--env-ids", "../../victim"], ["--env-ids", "."], ["--variant", "..=--no-gae"]])
def test_a_name_that_leads_outside_out_is_one_line_before_anything_is_touched(tmp_path, names):
    """The issue's case: an env id ../../victim would put its run in victim/default/seed1/, two folders above --out
    bw/out. The runner refuses it (and "." and a variant "..", which would put runs where other runs' folders are)
    naming the flag, before it makes or empties any folder: victim's runs/ keeps its run, nothing else is written."""
    (tmp_path / "victim" / "default" / "seed1" / "runs" / "x").mkdir(parents=True)
    (tmp_path / "victim" / "default" / "seed1" / "runs" / "x" / "agent.pt").write_bytes(b"someone's run")
    before = tree(tmp_path)
    args = [*TINY, *names, "--seeds", "1", "--total-timesteps", "128", "--out", "bw/out", "--workers", "1"]
    result = runner(*args, cwd=tmp_path)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: {names[0]} {names[1]}: ") and "Traceback" not in result.stderr
    assert tree(tmp_path) == before


@pytest.mark.parametrize("inside", ["", "x"], ids=["the-folder", "a-new-folder-in-it"])
def test_an_out_it_cannot_write_is_one_line(read_only_folder, inside):  # noqa: F811 (the fixture)
    result = runner(*TINY, "--out", str(read_only_folder / inside), "--workers", "1")
    why = "Permission denied" if os.geteuid() != 0 else "Read-only file system"
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"run.py: error: --out {read_only_folder / inside}: cannot write in {read_only_folder} ({why}); pass --out a "
        "folder you can write to"
    ), result.stderr
    assert "Traceback" not in result.stderr and os.listdir(read_only_folder) == []


@pytest.mark.parametrize(
    "table,line",
    [("env_id,variant,seed\nInvertedPendulum-v5,default,1\nInvertedPendulum-v5,defa", 3),
     ("env_id,variant,seed\nInvertedPendulum-v5,default,one\n", 2)],
    ids=["cut", "seed-one"],
)  # fmt: skip
def test_a_results_folder_whose_runs_csv_is_damaged_is_one_line(tmp_path, table, line):
    """--results names the runs not to run again in its data/runs.csv: one cut mid-line, or with a seed that is no
    integer, is refused in one line naming the file and the line; no run starts, no folder is made."""
    (tmp_path / "results" / "data").mkdir(parents=True)
    (tmp_path / "results" / "data" / "runs.csv").write_text(table)
    result = runner(*TINY, "--out", str(tmp_path / "x"), "--results", str(tmp_path / "results"), "--workers", "1")
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: {tmp_path / 'results' / 'data' / 'runs.csv'}: line {line} ")
    assert "--results" in result.stderr and not (tmp_path / "x").exists()


def children(pid):
    """The pids of a process's children (those of all its threads: the runner's worker threads start its runs)."""
    return [int(child) for task in Path(f"/proc/{pid}/task").glob("*/children") for child in task.read_text().split()]


@pytest.mark.long
def test_a_sigkilled_runners_batch_stops_with_it_and_the_same_command_continues_it(tmp_path):
    """The issue's case: a --batch-seeds runner killed with SIGKILL while its process trains seeds 1 and 2 (their run
    folders still in the process's own folder, <out>/Pendulum-v1/default/runs/). The process does not outlive it: it
    gets SIGTERM, saves its checkpoints and exits. The same command then moves the two runs to their seeds' folders
    and continues them from those checkpoints to the end, deleting neither: each seed has the one run folder it had."""
    out = tmp_path / "out"
    args = ["--script", "ppo_continuous_action.py", "--env-ids", "Pendulum-v1", "--seeds", "1", "2", "--total-timesteps"]
    args += ["12800", "--batch-seeds", "--workers", "1", "--out", str(out), "--flags"]
    args += ["--num-steps 64 --num-minibatches 2 --update-epochs 1 --no-compile --checkpoint-interval 5"]
    runner_process = subprocess.Popen([sys.executable, str(ROOT / "benchmark" / "run.py"), *args], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    task = out / "Pendulum-v1" / "default"
    deadline = time.time() + 300
    while len(list(task.glob("runs/*/agent.pt"))) < 2 and time.time() < deadline:
        time.sleep(0.2)
    (training,) = children(runner_process.pid)
    names = sorted(path.name for path in task.glob("runs/*"))
    runner_process.kill()
    runner_process.wait()
    gone_by = time.time() + 30  # a stop saves and exits within seconds
    try:
        while Path(f"/proc/{training}").exists() and Path(f"/proc/{training}/stat").read_text().split()[2] != "Z":
            assert time.time() < gone_by, "the training process outlived its runner"
            time.sleep(0.2)
    finally:
        if Path(f"/proc/{training}").exists():
            os.kill(training, signal.SIGKILL)
    assert len(names) == 2 and "stopped by a signal" in (task / "output.log").read_text()

    again = runner(*args)
    assert again.returncode == 0 and "seed 1 2: done" in again.stdout, again.stdout + again.stderr
    log = (task / "output.log").read_text()
    assert "--resume" in log and log.count("step 12800/12800") == 2
    assert sorted(path.name for seed in (1, 2) for path in (task / f"seed{seed}").glob("runs/*")) == names
    assert not (task / "runs").exists() and all((task / f"seed{seed}" / "done.json").exists() for seed in (1, 2))


@pytest.mark.slow
@pytest.mark.parametrize("batched", [False, True], ids=["a-run", "a-batch"])
def test_a_run_another_process_trains_is_left_alone(tmp_path, batched):
    """A run folder whose flock another process holds (a script training in it: a second runner's, or one that outlived
    its runner) is live: the runner neither empties it nor starts the run, says so and exits 1. Where it is, the run's
    own folder or a batched process's (<out>/<env>/<variant>/runs/), does not matter."""
    out = tmp_path / "x"
    task = out / "InvertedPendulum-v5" / "default"
    folder = task / "runs" / "InvertedPendulum-v5__ppo_continuous_action_seeds__1__17" if batched else (
        task / "seed1" / "runs" / "InvertedPendulum-v5__ppo_continuous_action__1__17")  # fmt: skip
    folder.mkdir(parents=True)
    (folder / "events.out.tfevents.17.host").write_bytes(b"being written")
    lock = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    import fcntl

    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        before = tree(out)
        result = runner(*TINY, "--seeds", "1", "--out", str(out), "--workers", "1", *(["--batch-seeds"] if batched else []))
        assert result.returncode == 1 and "1 trained by another process now, left alone" in result.stdout, result.stdout
        assert result.stderr.strip().splitlines() == [
            "error: 1 runs are trained by another process now (it holds their run folders); run the same command again "
            "once it has ended, which continues or records them"
        ]
        assert {path: content for path, content in tree(out).items() if path != "command.txt"} == before
    finally:
        os.close(lock)


@pytest.mark.long
def test_a_finished_run_without_done_json_is_recorded_from_its_files_and_not_run_again(tmp_path):
    """A runner killed after its runs exited leaves them without done.json. One with a checkpoint of its last update
    (--save-model, the default), whose --resume would refuse it as finished, and one without (--no-save-model), whose
    logs reach its budget: the same command records both from their files, trains nothing (their folders and
    output.log as they were) and the report reads both."""
    out = tmp_path / "x"
    args = [*TINY, "--seeds", "1", "--variant", "saved=", "--variant", "unsaved=--no-save-model", "--out", str(out)]
    first = runner(*args, "--workers", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    task = out / "InvertedPendulum-v5"
    for variant in ("saved", "unsaved"):
        (task / variant / "seed1" / "done.json").unlink()
    assert [len(list((task / v / "seed1").glob("runs/*/agent.pt"))) for v in ("saved", "unsaved")] == [1, 0]
    before = tree(task)
    again = runner(*args, "--workers", "2")
    assert again.returncode == 0 and "2 already done, 0 to run" in again.stdout, again.stdout + again.stderr
    assert "2 of the done finished without a done.json, recorded now from their files" in again.stdout
    after = tree(task)
    for variant in ("saved", "unsaved"):
        record = json.loads(after.pop(f"{variant}/seed1/done.json"))
        assert record["returncode"] == 0 and "--seed 1 --total-timesteps 2048" in record["command"]
        assert record["recovered"].startswith("finished without done.json")
    assert after == before
    tables = report_data.read_runs_folder(out)
    assert sorted(tables.runs["variant"]) == ["saved", "unsaved"]


def test_a_batch_tells_the_run_of_a_folder_whose_variant_ends_in_an_underscore():
    """A variant a_ names its runs <env>__<exp name>-a___<seed>__<time>: its __ runs into the seed's, which is then read
    from the right. A name of no run of the batch is none of its runs."""
    a, b = (run.PlannedRun("ppo_continuous_action.py", "Hopper-v5", name, 1, 2048) for name in ("a_", "b"))
    batch = run.Batch([a, b])
    assert batch.run_of("Hopper-v5__ppo_continuous_action_seeds-a___1__1700000000") is a
    assert batch.run_of("Hopper-v5__ppo_continuous_action_seeds-b__1__1700000000-2") is b
    for other in ("Hopper-v5__ppo_continuous_action_seeds-b__2__17", "Hopper-v5__ppo_continuous_action_seeds-c__1__17",
                  "notes", "Hopper-v5__ppo_continuous_action_seeds-b__one__17"):  # fmt: skip
        assert batch.run_of(other) is None
    alone = run.Batch([b])  # one variant: its process names no setting, unless told it did (a <first>+<more> folder's)
    assert alone.run_of("Hopper-v5__ppo_continuous_action_seeds__1__17") is b
    assert alone.run_of("Hopper-v5__ppo_continuous_action_seeds-a___1__17", by_setting=True) is None


@pytest.mark.long
def test_runner_batch_seeds_with_a_variant_ending_in_an_underscore_puts_its_runs_in_place(tmp_path):
    """The issue's case: variants a_ and b of --clip-coef trained in one process; each run ends in its own folder with its
    done.json, none left in the process's folder."""
    out = tmp_path / "x"
    variants = ["--variant", "a_=--clip-coef 0.1", "--variant", "b=--clip-coef 0.3"]
    result = runner(*TINY, "--seeds", "1", *variants, "--batch-seeds", "--out", str(out), "--workers", "1")
    assert result.returncode == 0 and "in 1 processes" in result.stdout, result.stdout + result.stderr
    task = out / "InvertedPendulum-v5"
    for variant in ("a_", "b"):
        (folder,) = (task / variant / "seed1").glob("runs/*")
        assert folder.name.split("__")[1] == f"ppo_continuous_action_seeds-{variant}".rstrip("_")
        assert json.loads((task / variant / "seed1" / "done.json").read_text())["seeds_in_process"] == 2
    assert not (task / "a_+1" / "runs").exists()


def test_a_link_that_leads_outside_out_is_one_line_before_anything_is_touched(tmp_path):
    """<out>/<env id> a link to a folder elsewhere: the runner would make, empty and write run folders there. It refuses
    in one line naming the link; what is outside stays as it was, and nothing is written in --out."""
    (tmp_path / "elsewhere" / "default" / "seed1" / "runs" / "x").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "InvertedPendulum-v5").symlink_to(tmp_path / "elsewhere")
    before = tree(tmp_path)
    result = runner(*TINY, "--seeds", "1", "--out", str(tmp_path / "out"), "--workers", "1")
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"run.py: error: --out {tmp_path / 'out'}: {tmp_path / 'out' / 'InvertedPendulum-v5'} links to "
        f"{tmp_path / 'elsewhere'}, outside it; the runner writes and removes inside --out alone: put a folder in place "
        "of the link"
    ), result.stderr
    assert tree(tmp_path) == before
