"""benchmark/speed.py's tuner race, without training: tune.py's commands and CleanRL's tuner's search (cleanrl-tuner),
made from the same flags, carry the same space, sampler seed, trials, seeds, steps and per-run flags, and CleanRL's
tuner's params_fn draws the flags tune.py's trials draw."""

import argparse
import shlex

import optuna
import pytest
import speed  # benchmark/speed.py
import tune  # benchmark/tune.py


def tune_argv(words):
    """The options of a tune.py command line that make its search."""
    p = argparse.ArgumentParser()
    p.add_argument("--env-id")
    p.add_argument("--space", action="append")
    p.add_argument("--trials", type=int)
    p.add_argument("--seeds", nargs="+", type=int)
    p.add_argument("--total-timesteps", type=int)
    p.add_argument("--sampler")
    p.add_argument("--sampler-seed", type=int)
    p.add_argument("--flags")
    p.add_argument("--no-batch", action="store_true")
    p.add_argument("--no-test", action="store_true")
    p.add_argument("--agents", type=int)
    p.add_argument("--workers", type=int)
    p.add_argument("--out")
    return p.parse_known_args(words)[0]


@pytest.fixture
def cleanrl_dir(tmp_path, monkeypatch):
    """A stand-in CLEANRL_DIR with the two files cleanrl-tuner needs."""
    (tmp_path / "cleanrl" / "cleanrl_utils").mkdir(parents=True)
    (tmp_path / "cleanrl" / "ppo_continuous_action.py").write_text("")
    (tmp_path / "cleanrl" / "cleanrl_utils" / "tuner.py").write_text("")
    monkeypatch.setenv("CLEANRL_DIR", str(tmp_path / "cleanrl"))
    return tmp_path / "cleanrl"


def test_the_three_commands_run_the_same_search(cleanrl_dir):
    search = ("--env-id Pendulum-v1 --trials 5 --seeds 0 1 2 --total-timesteps 4096 --sampler tpe --sampler-seed 7 "
              "--flags='--num-envs 1 --num-steps 512 --update-epochs 2' --space ent-coef=0..0.01 "
              "--space learning-rate=1e-4..1e-3:log --no-test --workers 2")  # fmt: skip
    made = speed.configurations(["a=benchmark/tune.py --agents 6", "b=benchmark/tune.py --no-batch", "c=cleanrl-tuner"],
                                search, checkout=None)  # fmt: skip
    a, b = tune_argv(made["a"][0].words), tune_argv(made["b"][0].words)
    spec = speed.cleanrl_search(made["c"][0].words)
    for ours in (a, b):
        assert ours.env_id == spec["env_id"] == "Pendulum-v1"
        dims = tune.parse_space(ours.space, "ppo_continuous_action.py", tune.load_script("ppo_continuous_action.py").Args)
        assert [(d.option[2:], d.low, d.high, d.log) for d in dims] == [(d["option"], d["low"], d["high"], d["log"])
                                                                        for d in spec["space"]]  # fmt: skip
        assert [d.spec() for d in dims] == ["ent-coef=0.0..0.01", "learning-rate=0.0001..0.001:log"]
        assert ours.trials == spec["trials"] == 5
        assert ours.seeds == list(range(spec["seeds"])) == [0, 1, 2]  # CleanRL's tuner's seeds: range(num_seeds)
        assert ours.total_timesteps == int(spec["fixed"]["total-timesteps"]) == 4096
        assert ours.sampler == spec["sampler"] == "tpe" and ours.sampler_seed == spec["sampler_seed"] == 7
        assert ours.no_test and ours.workers == 2 and ours.out == "out"  # its own scratch folder's study
        words = shlex.split(ours.flags)
        assert dict(zip(words[::2], words[1::2])) == {f"--{k}": v for k, v in spec["fixed"].items() if k != "total-timesteps"}
        assert dict(zip(words[::2], words[1::2])) == {"--num-envs": "1", "--num-steps": "512", "--update-epochs": "2"}
    assert not a.no_batch and a.agents == 6 and b.no_batch
    assert spec["script"] == str(cleanrl_dir.resolve() / "ppo_continuous_action.py")
    assert speed.steps_of(made["a"][0]) == speed.steps_of(made["c"][0]) == 5 * 3 * 4096  # trials x seeds x steps


def test_cleanrl_params_draw_what_tune_draws(cleanrl_dir):
    """The same seeded TPE gives CleanRL's params_fn (asked and told one trial at a time, as its tuner does) the values
    tune.py's trials draw (asked several at once, with the constant liar), under the same names."""
    specs = ["ent-coef=0..0.01", "clip-coef=0.1,0.2,0.3", "learning-rate=1e-4..3e-3:log"]
    search = ["--env-id", "Hopper-v5", "--sampler-seed", "3", "--seeds", "0", "1", "--total-timesteps", "20480"]
    search += ["--flags=--num-envs 1 --num-steps 2048"] + [w for s in specs for w in ("--space", s)]
    spec = speed.cleanrl_search(search)
    space = tune.parse_space(specs, "ppo_continuous_action.py", tune.load_script("ppo_continuous_action.py").Args)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ours = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=3, constant_liar=True), direction="maximize")
    theirs = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=3), direction="maximize")
    asked = [ours.ask() for _ in range(4)]
    drawn = [[w for d in space for w in d.words(d.suggest(trial))] for trial in asked]
    for flags in drawn:
        trial = theirs.ask()
        params = speed.cleanrl_params(spec, trial)
        assert [w for k in ("ent-coef", "clip-coef", "learning-rate") for w in (f"--{k}", str(params[k]))] == flags
        assert params["total-timesteps"] == "20480" and params["num-steps"] == "2048"
        theirs.tell(trial, 0.0)
    assert len({tuple(flags) for flags in drawn}) == 4


@pytest.mark.parametrize(
    "words,named",
    [
        (["--seeds", "1", "2"], "--seeds 1 2"),
        (["--flags=--cuda"], "--cuda has no value"),
        (["--space", "norm-adv=true,false"], "norm-adv"),
    ],
)
def test_a_search_cleanrl_tuner_cannot_run_is_one_line(cleanrl_dir, words, named):
    with pytest.raises(SystemExit) as stopped:
        speed.cleanrl_search(["--env-id", "Hopper-v5", "--total-timesteps", "2048", "--space", "ent-coef=0..0.01",
                              "--seeds", "0", *words])
    assert str(stopped.value.code).startswith("error: ") and named in str(stopped.value.code), stopped.value.code
