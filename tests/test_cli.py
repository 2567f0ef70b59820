"""The command line: every flag of ../shared/DETAILS.md that a script should have exists with its id in the help and
parses to a non-default value; bad input ends with a one-line error naming the flag, never a traceback."""

import dataclasses
import re
import typing

import pytest
import tyro
from conftest import COLUMNS, DETAILS, ROOT, contract_flags, load_script, run_script


def field_name(flag):
    return re.sub(r"^no-", "", flag).replace("-", "_")


def non_default_cli(field, hint):
    """A command line that sets `field` to something other than its default, and the value expected."""
    flag, default = "--" + field.name.replace("_", "-"), field.default
    if hint is bool:
        return ([f"--no-{flag[2:]}"], False) if default else ([flag], True)
    if typing.get_origin(hint) is typing.Literal:
        choice = next(c for c in typing.get_args(hint) if c != default)
        return [flag, choice], choice
    base = {int: int, float: float, str: str}.get(hint) or next(a for a in typing.get_args(hint) if a is not type(None))
    value = {int: 7, float: 0.125, str: "other"}[base]
    return [flag, str(value)], value


# the contract lives beside the repository (../shared/DETAILS.md) in the project's checkout; without it this test is skipped
SCRIPTS_HERE = [name for name in COLUMNS if (ROOT / f"{name}.py").exists()] if DETAILS.exists() else []
SCRIPT_FLAGS = [(name, flag, detail) for name in SCRIPTS_HERE for flag, detail in contract_flags(name)]


@pytest.mark.parametrize("name,flag,detail", SCRIPT_FLAGS, ids=[f"{n}:{f}" for n, f, _ in SCRIPT_FLAGS])
def test_contract_flag_exists_parses_and_names_its_detail(name, flag, detail):
    module = load_script(name)
    fields = {f.name: f for f in dataclasses.fields(module.Args)}
    field = fields.get(field_name(flag))
    assert field is not None, f"{name}.py has no --{flag}"
    hint = typing.get_type_hints(module.Args)[field.name]
    argv, expected = non_default_cli(field, hint)
    assert getattr(tyro.cli(module.Args, args=argv), field.name) == expected
    if detail is not None:
        source = (ROOT / f"{name}.py").read_text()
        help_text = re.search(rf"^    {field.name}: .*\n    \"\"\"\(([A-Z0-9, ]+)\)", source, re.M)
        assert help_text and detail in help_text.group(1).split(", "), f"--{flag}'s help does not start with ({detail})"


BAD_INPUTS = [
    ("ppo_continuous_action", ["--env-id", "NoSuchEnv-v0"], "--env-id"),
    ("ppo_continuous_action", ["--env-id", "BreakoutNoFrameskip-v4"], "ppo_atari.py"),
    ("ppo_continuous_action", ["--env-id", "CartPole-v1"], "Discrete"),
    ("ppo_continuous_action", ["--num-minibatches", "7"], "--num-minibatches"),
    ("ppo_continuous_action", ["--num-steps", "0"], "--num-steps"),
    ("ppo_continuous_action", ["--total-timesteps", "100"], "--total-timesteps"),
    ("ppo_continuous_action", ["--eval-checkpoint", "missing.pt"], "--eval-checkpoint"),
    ("ppo_continuous_action", ["--eval-checkpoint", "corrupt.pt"], "--eval-checkpoint"),
    ("ppo_continuous_action", ["--resume", "corrupt.pt"], "--resume"),
    ("ppo_continuous_action", ["--resume", "missing.pt"], "--resume"),
    ("ppo_atari", ["--env-id", "Hopper-v5"], "ppo_continuous_action.py"),
    ("ppo_atari", ["--env-id", "CartPole-v1"], "not an Atari game"),
    ("ppo_atari", ["--env-id", "NoSuchGameNoFrameskip-v4"], "--env-id"),
    ("ppo_atari", ["--env-id", "ALE/Breakout-v5"], "NoFrameskip"),
    ("ppo_atari", ["--frame-stack", "0"], "--frame-stack"),
    ("ppo_atari", ["--num-minibatches", "3"], "--num-minibatches"),
    ("ppo_atari", ["--vector-env", "envpool", "--capture-video"], "--vector-env sync"),
    ("ppo_atari", ["--eval-checkpoint", "corrupt.pt"], "--eval-checkpoint"),
    ("ppo_atari", ["--torch-threads", "-1"], "--torch-threads"),
    ("ppo_rnn", ["--num-envs", "6", "--num-minibatches", "4"], "--num-envs"),
    ("ppo_rnn", ["--env-id", "Hopper-v5"], "ppo_continuous_action.py"),
    ("ppo_rnn", ["--env-id", "CartPoleNoVelocity-v1", "--vector-env", "envpool"], "--vector-env"),
    ("ppo_rnn", ["--rnn-hidden-size", "0"], "--rnn-hidden-size"),
    ("ppo_rnn", ["--resume", "corrupt.pt"], "--resume"),
]
BAD_INPUTS = [case for case in BAD_INPUTS if (ROOT / f"{case[0]}.py").exists()]


@pytest.mark.parametrize("name,flags,named", BAD_INPUTS, ids=[f"{n}:{' '.join(f)}" for n, f, _ in BAD_INPUTS])
def test_bad_input_gives_one_line_error(tmp_path, name, flags, named):
    (tmp_path / "corrupt.pt").write_bytes(b"this is not a checkpoint")
    result = run_script(name, *flags, cwd=tmp_path, timeout=120)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and "Powered by Stella" not in line]
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()  # nothing started
