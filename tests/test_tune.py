"""benchmark/tune.py: the space's parsing and its one-line refusals (nothing written), a tiny study run by two workers
on one journal (each trial once, the cap exact), a worker killed mid-batch and the study completed by the same command,
a pruned agent stopping while the other agents of its process finish, and the held-out seeds (disjoint from the
search's) with the report and its rebuild."""

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import optuna
import pytest
from conftest import ROOT, load_script
from optuna.trial import TrialState

import tune  # benchmark/tune.py
import tune_optuna  # benchmark/tune_optuna.py

CONTINUOUS = load_script("ppo_continuous_action").Args
# a tiny Pendulum run: 4 updates of 256 steps
TINY = ["--env-id", "Pendulum-v1", "--flags=--num-steps 256 --num-minibatches 4 --update-epochs 2 --no-compile"]
SPACE = ["--space", "ent-coef=0..0.01", "--space", "clip-coef=0.1,0.2,0.3"]


def tuner(out, *words, steps=1024, **kwargs):
    """A tuner process on <out> (its runs there, the report in <out>/results), with the tiny flags and space."""
    command = [sys.executable, str(ROOT / "benchmark" / "tune.py"), *TINY, *SPACE, "--total-timesteps", str(steps),
               "--out", str(out / "runs"), "--results", str(out / "results"), "--last", "5", *words]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def study_of(out, name="tune-Pendulum-v1"):
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / "runs" / "study.journal")))
    return optuna.load_study(study_name=name, storage=storage)


# ------------------------------------------------------------------------------------------------------------- space
def test_the_space_reads_ranges_log_ranges_and_choices_of_the_flags_types():
    space = tune.parse_space(
        ["learning-rate=1e-5..1e-3:log", "update-epochs=1..10", "num-envs=1,2,4", "surrogate=clip,kl-fixed",
         "norm-adv=true,false", "--ent-coef=0..0.01"],
        "ppo_continuous_action.py", CONTINUOUS,
    )  # fmt: skip
    by_flag = {d.flag: d for d in space}
    assert (by_flag["learning_rate"].kind, by_flag["learning_rate"].low, by_flag["learning_rate"].log) == ("float", 1e-5, True)
    assert (by_flag["update_epochs"].kind, by_flag["update_epochs"].high) == ("int", 10)
    assert by_flag["num_envs"].choices == (1, 2, 4) and by_flag["surrogate"].choices == ("clip", "kl-fixed")
    assert by_flag["norm_adv"].choices == (True, False)
    assert by_flag["norm_adv"].words(False) == ["--no-norm-adv"] and by_flag["num_envs"].words(4) == ["--num-envs", "4"]
    assert (by_flag["ent_coef"].low, by_flag["ent_coef"].high, by_flag["ent_coef"].log) == (0.0, 0.01, False)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):  # what a trial draws stays in the space, of the flag's type
        trial = study.ask()
        params = {d.flag: d.suggest(trial) for d in space}
        assert 1e-5 <= params["learning_rate"] <= 1e-3 and isinstance(params["update_epochs"], int)
        assert params["surrogate"] in ("clip", "kl-fixed") and params["norm_adv"] in (True, False)


REFUSED = {
    "unknown flag": (["--space", "no-such-flag=1..2"], "ppo_continuous_action.py has no flag --no-such-flag"),
    "the rules refuse the range": (["--space", "gamma=0.9..1.5"], "--gamma 1.5: pass a discount in [0, 1]"),
    "the rules refuse a choice": (["--space", "num-minibatches=0,4"], "--num-minibatches 0: pass a positive count"),
    "a choice of the wrong type": (["--space", "num-envs=4,eight"], "'eight' is no value of --num-envs; pass a whole number"),
    "a choice not in the Literal": (["--space", "surrogate=clip,ppo"], "'ppo' is no value of --surrogate; pass one of clip"),
    "a range of a switch": (["--space", "norm-adv=0..1"], "--norm-adv takes choices, not a range"),
    "a log range from 0": (["--space", "ent-coef=0..0.1:log"], "a log range needs a low end > 0"),
    "an empty range": (["--space", "clip-coef=0.3..0.1"], "the range's low end must be below its high end"),
    "one choice": (["--space", "num-envs=4"], "give two or more distinct choices"),
    "the study's own flag": (["--space", "total-timesteps=1000..2000"], "--total-timesteps is the study's"),
    "a searched flag in --flags": (["--space", "gamma=0.9,0.99", "--flags=--gamma 0.9"], "--gamma is searched"),
    "held-out seeds the search trains": (["--space", "gamma=0.9,0.99", "--test-seeds", "2", "3"], "--test-seeds 2"),
    # issue 95: what the study sets or needs, in --flags; counts out of range; non-finite bounds
    "--seed in --flags": (["--flags=--num-steps 32 --seed 7"], "--flags --num-steps 32 --seed 7: --seed is the study's"),
    "--seed= in --flags": (["--flags=--seed=7"], "--seed is the study's"),
    "--env-id in --flags": (["--flags=--env-id Acrobot-v1"], "--env-id is the study's (pass tune.py's --env-id)"),
    "--total-timesteps in --flags": (["--flags=--total-timesteps 9"], "--total-timesteps is the study's"),
    "--exp-name in --flags": (["--flags=--exp-name x"], "--exp-name is the study's"),
    "--resume in --flags": (["--flags=--resume a.pt"], "--resume is the study's"),
    "--no-save-model in --flags": (["--flags=--no-save-model"], "--save-model is the study's"),
    "--checkpoint-interval in --flags": (["--flags=--checkpoint-interval 0"], "--checkpoint-interval is the study's"),
    "--last 0": (["--last", "0"], "--last 0: pass a positive count"),
    "--last -3": (["--last", "-3"], "--last -3: pass a positive count"),
    "--prune-after -1": (["--prune-after", "-1"], "--prune-after -1: pass a count >= 0"),
    "--seeds -1": (["--seeds", "-1"], "--seeds and --test-seeds -1:"),
    "--test-seeds 2**32": (["--test-seeds", str(2**32)], f"--seeds and --test-seeds {2**32}:"),
    "--grace 0": (["--grace", "0"], "--grace 0.0: pass the seconds (> 0)"),
    "--grace -5": (["--grace", "-5"], "--grace -5.0: pass the seconds (> 0)"),
    "--grace nan": (["--grace", "nan"], "--grace nan: pass the seconds (> 0)"),
    "--test-timesteps 0": (["--test-timesteps", "0"], "--test-timesteps 0: pass a positive count"),
    "an infinite bound": (["--space", "ent-coef=0..inf"], "--space ent-coef=0..inf: --ent-coef inf: pass finite numbers"),
    "a nan choice": (["--space", "gamma=0.9,nan"], "--gamma nan: pass finite numbers"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_bad_input_is_one_line_and_nothing_written(case, tmp_path):
    words, message = REFUSED[case]
    words = words if "--space" in words else ["--space", "clip-coef=0.1,0.2", *words]
    out = tmp_path / "runs"
    with pytest.raises(SystemExit) as refused:
        tune.main(["--env-id", "Pendulum-v1", "--total-timesteps", "2048", "--out", str(out), "--results",
                   str(tmp_path / "results"), *words])  # fmt: skip
    said = str(refused.value)
    assert said.startswith("error: ") and "\n" not in said and message in said, said
    assert not out.exists() and not (tmp_path / "results").exists()


def test_a_storage_that_cannot_be_opened_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    for storage in [str(tmp_path / "file" / "study.journal"), f"sqlite:///{tmp_path}/no/such/folder/study.db"]:
        with pytest.raises(SystemExit) as refused:
            tune.main(["--env-id", "Pendulum-v1", "--total-timesteps", "2048", "--out", str(tmp_path / "runs"),
                       "--storage", storage, *SPACE])  # fmt: skip
        said = str(refused.value)
        assert said.startswith(f"error: --storage {storage}: ") and "\n" not in said, said
    assert not (tmp_path / "runs").exists()


def test_a_study_that_exists_with_another_space_is_refused_and_left_as_it_was(tmp_path):
    journal = tmp_path / "study.journal"
    options = SimpleNamespace(script="ppo_continuous_action.py", env_id="Pendulum-v1", seeds=[1, 2], total_timesteps=2048,
                              flags="", last=100, study="s", trials=3, argv=[], rungs=3, pruner="none", prune_after=4,
                              test_seeds=[101, 102, 103, 104, 105], test_timesteps=None, baseline=[], grace=600)  # fmt: skip
    storage = tune.open_storage(str(journal), tmp_path)
    space = tune.parse_space(["ent-coef=0..0.01"], "ppo_continuous_action.py", CONTINUOUS)
    study, created, _ = tune.join_study(options, space, storage, None, None, tmp_path)
    assert created and len(study.trials) == 3 and all(t.state == TrialState.WAITING for t in study.trials)
    before = journal.read_bytes()
    for words, differ in [(["--space", "ent-coef=0..0.02"], "another space"), (SPACE, "another space"),
                          (["--space", "ent-coef=0..0.01", "--seeds", "1"], "another seeds")]:  # fmt: skip
        with pytest.raises(SystemExit) as refused:
            tune.main(["--env-id", "Pendulum-v1", "--total-timesteps", "2048", "--study", "s", "--storage", str(journal),
                       "--trials", "3", "--out", str(tmp_path / "runs"), *words])  # fmt: skip
        said = str(refused.value)
        assert said.startswith(f"error: --study s exists in this storage with {differ}") and "\n" not in said, said
    assert journal.read_bytes() == before and not (tmp_path / "runs").exists()


# ------------------------------------------------------------------------------------------------------------ studies
def finished_slots(study):
    return sorted(t.user_attrs["slot"] for t in study.trials if t.state == TrialState.COMPLETE)


@pytest.mark.long
def test_two_workers_on_one_journal_run_each_trial_once(tmp_path):
    """Two tuner processes started together share the study's cap: 4 trials complete, each slot once, none failed,
    each run trained once (one run folder per seed folder), and both workers took trials."""
    workers = [tuner(tmp_path, "--trials", "4", "--seeds", "1", "--agents", "1", "--workers", "1", "--no-test")
               for _ in range(2)]  # fmt: skip
    outputs = [worker.communicate(timeout=300)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs
    study = study_of(tmp_path)
    assert finished_slots(study) == [0, 1, 2, 3] and len(study.trials) == 4, [(t.state, t.user_attrs) for t in study.trials]
    assert len({t.user_attrs["worker"] for t in study.trials}) == 2
    for slot in range(4):
        folder = tmp_path / "runs" / "Pendulum-v1" / f"trial-{slot}" / "seed1"
        assert (folder / "done.json").exists() and len(list((folder / "runs").iterdir())) == 1


@pytest.mark.long
def test_a_worker_killed_mid_batch_leaves_its_trials_to_the_same_command_which_continues_them(tmp_path):
    """SIGKILL to the tuner while its batched process trains two trials: its trials stay running in the storage; the
    same command again marks them failed (its worker died), queues them with the same flags, continues their runs from
    the checkpoints the killed process saved (its children get SIGTERM when the tuner dies) and completes the study."""
    words = ["--trials", "3", "--seeds", "1", "2", "--agents", "4", "--workers", "1", "--no-test"]
    first = tuner(tmp_path, *words, steps=8192)
    log = tmp_path / "runs" / "Pendulum-v1" / "trial-0+1" / "output.log"
    deadline = time.time() + 120
    while not (log.exists() and "step " in log.read_text()) and time.time() < deadline:
        time.sleep(0.5)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    running = study_of(tmp_path).trials
    assert sorted(t.state for t in running if t.user_attrs["slot"] in (0, 1)) == [TrialState.RUNNING] * 2
    second = tuner(tmp_path, *words, steps=8192)
    output = second.communicate(timeout=300)[0]
    assert second.returncode == 0, output
    study = study_of(tmp_path)
    assert finished_slots(study) == [0, 1, 2]
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert sorted(t.user_attrs["slot"] for t in failed) == [0, 1] and all("died" in t.user_attrs["failed"] for t in failed)
    for slot in (0, 1):  # the same flags, continued from the killed process's checkpoints
        retry = next(t for t in study.trials if t.state == TrialState.COMPLETE and t.user_attrs["slot"] == slot)
        assert retry.params == next(t for t in failed if t.user_attrs["slot"] == slot).params
    logs = "".join(path.read_text() for path in (tmp_path / "runs" / "Pendulum-v1").glob("*/output.log"))
    resumed = [line for line in logs.splitlines() if line.startswith("resumed ")]
    assert sorted(line.split("__")[1][-7:] + line.split("__")[2] for line in resumed) == [
        "trial-01",
        "trial-02",
        "trial-11",
        "trial-12",
    ], logs  # both trials, both seeds, from their checkpoints
    for slot in (0, 1):
        for seed in (1, 2):
            assert (tmp_path / "runs" / "Pendulum-v1" / f"trial-{slot}" / f"seed{seed}" / "done.json").exists()


class PruneSlot(optuna.pruners.BasePruner):
    """Prunes the trial of one slot at its first rung, the others never."""

    def __init__(self, slot):
        self.slot = slot

    def prune(self, study, trial):
        return trial.user_attrs["slot"] == self.slot


@pytest.mark.long
def test_a_pruned_agent_stops_while_the_others_of_its_process_finish(tmp_path, monkeypatch):
    """Two trials x two seeds as four agents of one process; the pruner stops trial 1 at its first rung: the process
    saves every agent and ends, trial 1's runs are recorded as pruned (pruned.json, their logs short of the budget), and
    trial 0's continue from their checkpoints in a process of their own to the end and complete."""
    monkeypatch.setattr(tune, "make_pruner", lambda options: PruneSlot(1))
    monkeypatch.setattr(tune.signal, "signal", lambda signum, handler: None)  # the test process keeps its handlers
    monkeypatch.setenv("PPO_PROGRESS_SECONDS", "0")  # a progress line every update
    out = tmp_path / "runs"
    tune.main([*TINY, *SPACE, "--total-timesteps", "8192", "--out", str(out), "--results", str(tmp_path / "results"),
               "--trials", "2", "--seeds", "1", "2", "--agents", "4", "--workers", "1", "--pruner", "median", "--rungs", "3",
               "--last", "5", "--no-test"])  # fmt: skip
    study = study_of(tmp_path)
    states = {t.user_attrs["slot"]: t.state for t in study.trials}
    assert states == {0: TrialState.COMPLETE, 1: TrialState.PRUNED}
    pruned = next(t for t in study.trials if t.state == TrialState.PRUNED)
    assert list(pruned.intermediate_values) == [1]  # its first rung, at step 8192 / 4
    import report_data

    for seed in (1, 2):
        stopped = out / "Pendulum-v1" / "trial-1" / f"seed{seed}"
        assert json.loads((stopped / "pruned.json").read_text())["pruned_at_step"] == 2048
        assert not (stopped / "done.json").exists() and report_data.read_run(stopped)[3] < 8192
        finished = out / "Pendulum-v1" / "trial-0" / f"seed{seed}"
        assert (finished / "done.json").exists() and report_data.read_run(finished)[3] == 8192

    def commands(folder):  # the processes started there
        return [
            line for line in (out / "Pendulum-v1" / folder / "output.log").read_text().splitlines() if line.startswith("$ ")
        ]

    assert len(commands("trial-0+1")) == 1 and "--resume" not in commands("trial-0+1")[0]
    [resumed] = commands("trial-0")
    assert "--resume" in resumed and resumed.count("agent.pt") == 2 and "trial-1" not in resumed  # the survivors alone


@pytest.mark.long
def test_a_study_ends_with_the_best_flags_and_the_defaults_on_held_out_seeds_and_its_report(tmp_path):
    """Four trials on seed 1, then the best trial's flags and the defaults on seeds 7 and 8 (none of the search's):
    the report has the trials table, the best flags, the held-out comparison and the PNGs, and --report rebuilds it."""
    worker = tuner(tmp_path, "--trials", "4", "--seeds", "1", "--test-seeds", "7", "8", "--agents", "4", "--workers", "1")
    output = worker.communicate(timeout=300)[0]
    assert worker.returncode == 0, output
    runs, results = tmp_path / "runs", tmp_path / "results"
    searched = {path.name for path in runs.glob("Pendulum-v1/trial-*/seed*")}
    held = {path.name for path in runs.glob("held-out/Pendulum-v1/*/seed*")}
    assert searched == {"seed1"} and held == {"seed7", "seed8"}
    assert {path.parent.name for path in runs.glob("held-out/Pendulum-v1/*/seed*")} == {"default", "best"}
    study = study_of(tmp_path)
    best = max((t for t in study.trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    readme = (results / "README.md").read_text()
    assert f"`{best.user_attrs['flags']}`" in readme and "| trial | state | value |" in readme
    assert "best against default" in readme and (results / "history.png").exists() and (results / "importance.png").exists()
    held_runs = (results / "held-out" / "data" / "runs.csv").read_text()
    assert "best,7" in held_runs and "default,8" in held_runs
    (results / "README.md").unlink()
    os.remove(results / "history.png")
    rebuilt = subprocess.run([sys.executable, str(ROOT / "benchmark" / "tune.py"), "--report", str(results)], cwd=ROOT,
                             capture_output=True, text=True)  # fmt: skip
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (results / "README.md").read_text() == readme and (results / "history.png").exists()


def test_the_slurm_script_runs_workers_of_the_same_study(tmp_path):
    path = tmp_path / "tune.sbatch"
    tune.main(["--env-id", "Pendulum-v1", "--total-timesteps", "2048", *SPACE, "--storage", "postgresql://u@db/optuna",
               "--slurm", str(path), "--slurm-workers", "6", "--workers", "2", "--out", str(tmp_path / "runs")])  # fmt: skip
    script = path.read_text()
    assert "#SBATCH --array=0-5" in script and "--cpus-per-task=2" in script
    worker = script.strip().splitlines()[-1]
    assert "benchmark/tune.py" in worker and "--storage postgresql://u@db/optuna" in worker and "--slurm" not in worker
    assert not (tmp_path / "runs").exists()  # no study was made: the array job's workers make it


# ------------------------------------------------------------------------------------------- Optuna's private member
def test_the_optuna_that_is_installed_still_has_what_tune_optuna_relies_on(tmp_path, monkeypatch):
    """benchmark/tune_optuna.py against the installed Optuna, on a journal (the RDB storages: test_tune_postgres.py's
    tuners): Study._storage is the storage a study was made with, and its absence is said naming it; a waiting trial is
    taken by one worker only, even one that read the queue before another took it, and none is made where none waits;
    another worker's running trial is failed once. Each assert names what Optuna changed."""

    def journal():
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "s.journal")))

    storage = journal()
    study = optuna.create_study(storage=storage, study_name="s")
    assert tune_optuna.storage_of(study) is storage, "optuna.study.Study._storage is not the storage the study was made with"
    with pytest.raises(RuntimeError, match=r"optuna\.study\.Study\._storage is no storage here \(NoneType\)"):
        tune_optuna.storage_of(SimpleNamespace(study_name="s"))
    for slot in (0, 1):
        study.enqueue_trial({}, user_attrs={"slot": slot})
    other = optuna.load_study(study_name="s", storage=journal())  # another worker: a storage of its own
    stale = other.get_trials(deepcopy=False, states=[TrialState.WAITING])  # what it read before this worker took one
    taken = tune_optuna.take_waiting(study)
    assert isinstance(taken, optuna.Trial) and taken.user_attrs == {"slot": 0}
    monkeypatch.setattr(other, "get_trials", lambda **kwargs: stale)
    second = tune_optuna.take_waiting(other)
    assert second is not None and second.user_attrs == {"slot": 1}, (
        "BaseStorage.set_trial_state_values(RUNNING) no longer refuses a trial another worker set RUNNING"
    )
    assert tune_optuna.take_waiting(study) is None and len(study.get_trials()) == 2  # none waits: none made
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING] * 2
    assert tune_optuna.fail_running(other, study.get_trials()[0], "its worker died")
    assert not tune_optuna.fail_running(study, study.get_trials()[0], "again"), "a finished trial was failed again"
    failed = study.get_trials()[0]
    assert failed.state == TrialState.FAIL and failed.user_attrs == {"slot": 0, "failed": "its worker died"}
