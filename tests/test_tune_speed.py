"""benchmark/tune_speed.py, without training: the three searches' commands carry the same space, sampler seed, trials,
seeds, steps and per-run flags, and CleanRL's tuner's params_fn draws the flags tune.py's trials draw."""

import argparse
import json
import shlex

import optuna
import tune_speed  # benchmark/tune_speed.py


def tune_argv(argv):
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
    return p.parse_known_args(argv[2:])[0]


def test_the_three_commands_run_the_same_search(tmp_path):
    options = tune_speed.parser().parse_args(["--env-id", "Pendulum-v1", "--trials", "5", "--seeds", "3",
                                              "--total-timesteps", "4096", "--sampler-seed", "7", "--num-steps", "512",
                                              "--flags", "--update-epochs 2", "--space", "ent-coef=0..0.01", "--space",
                                              "learning-rate=1e-4..1e-3:log", "--agents", "6"])  # fmt: skip
    space = tune_speed.parse_space(options)
    made = tune_speed.commands(options, space, tmp_path, tmp_path / "cleanrl")
    a, b = tune_argv(made["a"][0]), tune_argv(made["b"][0])
    spec = json.loads(made["c"][0][made["c"][0].index("--cleanrl-child") + 1])
    for ours in (a, b):
        assert ours.env_id == spec["env_id"] == "Pendulum-v1"
        assert ours.space == [f"{d['option']}={d['low']}..{d['high']}" + (":log" if d["log"] else "") for d in spec["space"]]
        assert ours.space == ["ent-coef=0.0..0.01", "learning-rate=0.0001..0.001:log"]
        assert ours.trials == spec["trials"] == 5
        assert ours.seeds == list(range(spec["seeds"])) == [0, 1, 2]  # CleanRL's tuner's seeds: range(num_seeds)
        assert ours.total_timesteps == int(spec["fixed"]["total-timesteps"]) == 4096
        assert ours.sampler == "tpe" and ours.sampler_seed == spec["sampler_seed"] == 7
        assert ours.no_test and ours.workers == 2
        words = shlex.split(ours.flags)
        assert dict(zip(words[::2], words[1::2])) == {f"--{k}": v for k, v in spec["fixed"].items() if k != "total-timesteps"}
        assert dict(zip(words[::2], words[1::2])) == {"--num-envs": "1", "--num-steps": "512", "--update-epochs": "2"}
    assert not a.no_batch and a.agents == 6 and b.no_batch
    assert spec["script"] == str(tmp_path / "cleanrl" / "ppo_continuous_action.py")
    assert len({str(made[n][1]) for n in "abc"}) == 3  # a folder each


def test_cleanrl_params_draw_what_tune_draws():
    """The same seeded TPE gives CleanRL's params_fn (asked and told one trial at a time, as its tuner does) the values
    tune.py's trials draw (asked several at once, with the constant liar), under the same names."""
    options = tune_speed.parser().parse_args(["--sampler-seed", "3", "--space", "ent-coef=0..0.01", "--space",
                                              "clip-coef=0.1,0.2,0.3", "--space", "learning-rate=1e-4..3e-3:log"])  # fmt: skip
    space = tune_speed.parse_space(options)
    spec = json.loads(tune_speed.commands(options, space, "/tmp/x", "/tmp/cleanrl")["c"][0][-1])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ours = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=3, constant_liar=True), direction="maximize")
    theirs = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=3), direction="maximize")
    asked = [ours.ask() for _ in range(4)]
    drawn = [[w for d in space for w in d.words(d.suggest(trial))] for trial in asked]
    for flags in drawn:
        trial = theirs.ask()
        params = tune_speed.cleanrl_params(spec, trial)
        assert [w for k in ("ent-coef", "clip-coef", "learning-rate") for w in (f"--{k}", str(params[k]))] == flags
        assert params["total-timesteps"] == "20480" and params["num-steps"] == "2048"
        theirs.tell(trial, 0.0)
    assert len({tuple(flags) for flags in drawn}) == 4
