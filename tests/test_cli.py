"""The command line: every flag of docs/details.md that a script should have exists with its id in the help and
parses to a non-default value; bad input ends with a one-line error naming the flag, never a traceback."""

import dataclasses
import os
import re
import runpy
import signal
import sys
import typing

import pytest
from ppo_utils import checkpoints
from ppo_utils import evaluation
import tyro
from conftest import COLUMNS, ROOT, contract_flags, forget_modules, load_script, pythonpath_first, run_main_here
from conftest import run_script, write_checkpoint


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


SCRIPTS_HERE = [name for name in COLUMNS if (ROOT / f"{name}.py").exists()]
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
        help_text = re.search(rf"^    {field.name}: .*  # \(([A-Z0-9, ]+)\)", source, re.M)  # tyro's help: the comment
        assert help_text and detail in help_text.group(1).split(", "), f"--{flag}'s help does not start with ({detail})"


# the scripts whose help starts with what its ids and "the reference" are
HELP_SCRIPTS = ["ppo", "ppo_masked", "ppo_atari", "ppo_continuous_action", "ppo_continuous_action_seeds", "ppo_rnn",
                "ppo_rnn_continuous_action"]


@pytest.mark.parametrize("name", HELP_SCRIPTS)
def test_the_help_says_what_its_ids_and_the_reference_are(name, monkeypatch, capsys):
    """`python <script> --help` (its __main__ block, run here) speaks of ids (G1, M3, ...) and "the reference": its first
    line after the usage says what they are."""
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as end:
        runpy.run_path(str(ROOT / f"{name}.py"), run_name="__main__")
    assert end.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())  # tyro wraps its lines to the terminal
    expected = (
        "Ids in parentheses, such as (G1) or (M3), name PPO's implementation details, one flag each (docs/details.md): G "
        "general, M MuJoCo, A Atari, D discrete actions, X auxiliary, B beyond the blog's 32; \"the reference\" is "
        "openai/baselines' ppo2, where the details and the defaults come from."
    )
    assert expected in help_text and help_text.index(expected) < help_text.index("--exp-name"), help_text[:1000]


def write_cont_checkpoint(path, **flags):
    write_checkpoint(path, load_script("ppo_continuous_action").Args(**flags))


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
    ("ppo_continuous_action", ["--norm-per-env", "--vector-env", "async"], "--vector-env sync"),
    ("ppo_continuous_action", ["--env-id", "MountainCarContinuous-v0", "--mask-velocity"], "--mask-velocity"),
    # gymnasium's module:EnvId (MY_ENVS' module is on PYTHONPATH): a module that is not there, one that registers no such
    # env, and an env of the other kind
    ("ppo_continuous_action", ["--env-id", "nosuchmodule:X-v0"],
     "error: --env-id nosuchmodule:X-v0: cannot import nosuchmodule (ModuleNotFoundError"),
    ("ppo_continuous_action", ["--env-id", "ppo_tests_own_envs_q7:Other-v0"],
     "error: --env-id ppo_tests_own_envs_q7:Other-v0: ppo_tests_own_envs_q7 registers no env Other-v0"),
    ("ppo_continuous_action", ["--env-id", "ppo_tests_own_envs_q7:MyCartPole-v0"], "Discrete action space; use ppo.py or"),
    # a module whose own code fails (FAULTY_MODULES): each script names it, the error's last line and its place
    ("ppo_continuous_action", ["--env-id", "ppo_tests_raises_on_import:Foo-v0"],
     ("error: --env-id ppo_tests_raises_on_import:Foo-v0: importing ppo_tests_raises_on_import failed (RuntimeError: no "
      "licence server, at ppo_tests_raises_on_import.py:3); fix the module")),
    ("ppo", ["--env-id", "ppo_tests_exits_on_import:Foo-v0"],
     ("error: --env-id ppo_tests_exits_on_import:Foo-v0: importing ppo_tests_exits_on_import called sys.exit(3) (at "
      "ppo_tests_exits_on_import.py:4)")),
    ("ppo_atari", ["--env-id", "ppo_tests_constructor_raises:Broken-v0"],
     ("error: --env-id ppo_tests_constructor_raises:Broken-v0 cannot be created: making it raised ValueError: size must "
      "be positive, not 0 (at ppo_tests_constructor_raises.py:6 in __init__)")),
    ("ppo_rnn", ["--env-id", "ppo_tests_constructor_raises:Broken-v0"], "making it raised ValueError: size must be"),
    ("ppo_rnn_continuous_action", ["--env-id", "ppo_tests_exits_on_import:Foo-v0"], "called sys.exit(3)"),
    ("ppo_atari", ["--env-id", "Hopper-v5"], "ppo_continuous_action.py"),
    ("ppo_atari", ["--env-id", "CartPole-v1"], "not an Atari game"),
    ("ppo_atari", ["--env-id", "NoSuchGameNoFrameskip-v4"], "--env-id"),
    ("ppo_atari", ["--env-id", "ALE/Breakout-v5"], "NoFrameskip"),
    ("ppo_atari", ["--frame-stack", "0"], "--frame-stack"),
    ("ppo_atari", ["--num-minibatches", "3"], "--num-minibatches"),
    ("ppo_atari", ["--vector-env", "envpool", "--capture-video"], "--vector-env sync"),
    ("ppo_atari", ["--vector-env", "envpool", "--gray-after-resize"], "--gray-after-resize"),
    ("ppo_atari", ["--no-warp-frame", "--gray-after-resize"], "--gray-after-resize"),
    ("ppo_atari", ["--eval-checkpoint", "corrupt.pt"], "--eval-checkpoint"),
    ("ppo_atari", ["--torch-threads", "-1"], "--torch-threads"),
    ("ppo_rnn", ["--num-envs", "6", "--num-minibatches", "4"], "--num-envs"),
    ("ppo_rnn", ["--env-id", "Hopper-v5"], "ppo_continuous_action.py"),
    ("ppo_rnn", ["--env-id", "CartPoleNoVelocity-v1", "--vector-env", "envpool"], "--vector-env"),
    ("ppo_rnn", ["--rnn-hidden-size", "0"], "--rnn-hidden-size"),
    ("ppo_rnn", ["--env-id", "ppo_tests_own_envs_q7:MyPendulum-v0"], "use ppo_continuous_action.py"),
    ("ppo_rnn", ["--resume", "corrupt.pt"], "--resume"),
    ("ppo_continuous_action_seeds", ["--env-id", "BreakoutNoFrameskip-v4"], "ppo_atari.py"),
    ("ppo_continuous_action_seeds", ["--num-minibatches", "7"], "--num-minibatches"),
    ("ppo_continuous_action_seeds", ["--norm-per-env", "--vector-env", "async"], "--vector-env sync"),
    ("ppo_continuous_action_seeds", ["--vector-env", "envpool", "--env-id", "Pendulum-v1"], "has no Pendulum-v1"),
    ("ppo_continuous_action", ["--vector-env", "envpool", "--env-id", "Pendulum-v1"],
     "error: --vector-env envpool has no Pendulum-v1; it makes Ant-v5, HalfCheetah-v5, Hopper-v5, Humanoid-v5, "
     "HumanoidStandup-v5, InvertedDoublePendulum-v5, InvertedPendulum-v5, Pusher-v5, Reacher-v5, Swimmer-v5, Walker2d-v5; "
     "add --vector-env sync"),
    ("ppo_continuous_action", ["--vector-env", "envpool", "--capture-video"], "--capture-video needs frames that envpool"),
    ("ppo_continuous_action", ["--vector-env", "envpool", "--norm-per-env"], "--norm-per-env keeps the statistics in each"),
    ("ppo_continuous_action", ["--vector-env", "envpool", "--env-id", "gymnasium.envs.mujoco:Hopper-v5"], "pass --env-id Hopper-v5"),
    ("ppo_rnn_continuous_action", ["--vector-env", "envpool", "--env-id", "ppo_tests_own_envs_q7:MyPendulum-v0"],
     "--vector-env envpool takes the task's registered id"),
    ("ppo_continuous_action_seeds", ["--seeds", "1", "1"], "--seeds 1 1"),
    ("ppo_continuous_action_seeds", ["--seeds", "-1"], "--seeds -1"),
    ("ppo_continuous_action_seeds", ["--track", "--seeds", "1", "2"], "--track"),
    ("ppo_continuous_action_seeds", ["--resume", "corrupt.pt"], "--resume"),
    ("ppo_continuous_action_seeds", ["--resume", "hopper.pt", "--seeds", "2"], "drop --seeds"),
    ("ppo_continuous_action_seeds", ["--resume", "hopper.pt", "hopper.pt"], "seed 1"),
    ("ppo_continuous_action_seeds", ["--resume", "hopper.pt", "--learning-rate", "0.1"], "--learning-rate"),
    ("ppo_continuous_action_seeds", ["--eval-checkpoint", "hopper.pt"], "holds a model that is not a set of named tensors"),
    # --setting: a flag that shapes the batch, the network, the loop or the shared envs is refused with
    # its reason, as are a malformed setting, a name given twice, a flag the script lacks, a bad value and one out of range
    ("ppo_continuous_action_seeds", ["--setting", "wide=--num-envs 2"],
     "error: --setting wide: --num-envs changes the batch's shape; pass it outside --setting"),
    ("ppo_continuous_action_seeds", ["--setting", "relu=--activation relu"], "--setting relu: --activation changes the"),
    ("ppo_continuous_action_seeds", ["--setting", "raw=--no-norm-obs"], "--setting raw: --no-norm-obs changes the vector"),
    ("ppo_continuous_action_seeds", ["--setting", "e=--update-epochs 5"], "--setting e: --update-epochs changes the update's"),
    ("ppo_continuous_action_seeds", ["--setting", "lr=--learning-rate -1"], "--setting lr: --learning-rate -1.0: pass"),
    ("ppo_continuous_action_seeds", ["--setting", "s=--seed 2"], "--setting s: --seed is the process's (its devices"),
    ("ppo_continuous_action_seeds", ["--setting", "clip-0.1 --clip-coef 0.1"], "--setting clip-0.1 --clip-coef 0.1: write"),
    ("ppo_continuous_action_seeds", ["--setting", "a=", "--setting", "a=--clip-coef 0.1"], "--setting a: the name is given"),
    ("ppo_continuous_action_seeds", ["--setting", "a=--clip-cof 0.1"], "--setting a: --clip-cof is not a flag of"),
    ("ppo_continuous_action_seeds", ["--setting", "a=--surrogate kl"], "--setting a: --surrogate kl: pass one of clip,"),
    ("ppo_continuous_action_seeds", ["--setting", "a=--clip-coef"], "--setting a: --clip-coef takes a value"),
    ("ppo_continuous_action_seeds", ["--setting", "a=--surrogate 'clip"],
     "error: --setting a=--surrogate 'clip: its flags do not split as a shell's words (No closing quotation); close the"),
    ("ppo_continuous_action_seeds", ["--setting", "a=--clip-coef 0.1\\"], "(No escaped character); close the quote"),
    ("ppo_continuous_action_seeds", ["--setting", "a=--norm-adv=False"], "--setting a: --norm-adv=False: a switch takes"),
    ("ppo_continuous_action_seeds", ["--setting", "a=--clip-coef -1"], "--setting a: --clip-coef -1.0: pass"),
    ("ppo_continuous_action_seeds", ["--resume", "hopper.pt", "--setting", "a="], "drop --setting"),
    # a string or path flag given an empty value is an error, not the default (each of these started a new default run:
    # Hopper-v5 for 1M steps, Knapsack-v1 for 500k); the first, a --resume whose glob matched nothing
    ("ppo_continuous_action_seeds", ["--resume"],
     "error: --resume was given no value (a glob that matched nothing?): pass the agent.pt of each run to continue"),
    ("ppo_continuous_action_seeds", ["--resume", ""], "error: --resume was given an empty value: pass the agent.pt"),
    ("ppo_continuous_action_seeds", ["--resume", "hopper.pt", ""], "error: --resume was given an empty value"),
    ("ppo_continuous_action_seeds", ["--eval-checkpoint", ""], "error: --eval-checkpoint was given an empty value: pass"),
    ("ppo_continuous_action_seeds", ["--seeds"], "error: --seeds was given no value (a glob that matched nothing?): pass "
     "a value, or leave --seeds out for its default (1)"),
    ("ppo_continuous_action_seeds", ["--setting", ""], "error: --setting was given an empty value"),
    ("ppo_masked", ["--resume", ""], "error: --resume was given an empty value: pass the agent.pt to continue"),
    ("ppo_masked", ["--eval-checkpoint", ""], "error: --eval-checkpoint was given an empty value: pass the agent.pt"),
    ("ppo_masked", ["--env-id", ""], "error: --env-id was given an empty value: pass an env id, e.g. Knapsack-v1"),
    ("ppo", ["--env-id", "Pendulum-v1"], "use ppo_continuous_action.py"),
    ("ppo", ["--env-id", "BreakoutNoFrameskip-v4"], "use ppo_atari.py"),
    ("ppo", ["--env-id", "Knapsack-v1"], "use ppo_masked.py"),
    ("ppo", ["--num-minibatches", "3"], "--num-minibatches 3"),
    ("ppo", ["--resume", "corrupt.pt"], "--resume"),
    ("ppo_masked", ["--env-id", "CartPole-v1"], "add --no-mask-actions, or use ppo.py"),
    ("ppo_masked", ["--env-id", "Knapsack-v1", "--vector-env", "sync"], "add --vector-env envpool"),
    ("ppo_masked", ["--capture-video"], "add --vector-env sync"),
    ("ppo_masked", ["--env-id", "Pendulum-v1", "--no-mask-actions", "--vector-env", "sync"], "use ppo_continuous_action.py"),
]
# each numeric flag's range, checked before a run folder exists
OUT_OF_RANGE = [
    ("ppo_continuous_action", ["--clip-coef", "-0.2"], "--clip-coef -0.2"),
    ("ppo_continuous_action", ["--clip-coef", "0"], "--surrogate unclipped"),
    ("ppo_continuous_action", ["--max-grad-norm", "-1"], "--max-grad-norm -1"),
    ("ppo_continuous_action", ["--target-kl", "-1"], "--target-kl -1"),
    ("ppo_continuous_action", ["--learning-rate", "-1"], "--learning-rate -1"),
    ("ppo_continuous_action", ["--kl-beta", "0"], "--kl-beta 0"),
    ("ppo_continuous_action", ["--kl-dtarg", "0"], "--kl-dtarg 0"),
    ("ppo_continuous_action", ["--ent-coef", "-0.01"], "--ent-coef -0.01"),
    ("ppo_continuous_action", ["--vf-coef", "-1"], "--vf-coef -1"),
    ("ppo_continuous_action", ["--adam-eps", "0"], "--adam-eps 0"),
    ("ppo_continuous_action", ["--gamma", "1.5"], "--gamma 1.5"),
    ("ppo_continuous_action", ["--clip-obs", "-1"], "--clip-obs -1"),
    ("ppo_continuous_action", ["--clip-reward", "-1"], "--clip-reward -1"),
    ("ppo_continuous_action", ["--log-std-init", "nan"], "--log-std-init nan"),
    ("ppo_continuous_action", ["--checkpoint-interval", "-1"], "--checkpoint-interval -1"),
    ("ppo_continuous_action", ["--seed", "-1"], "--seed -1"),
    ("ppo_continuous_action", ["--eval-checkpoint", "hopper.pt", "--eval-episodes", "0"], "--eval-episodes 0"),
    ("ppo_continuous_action", ["--eval-checkpoint", "hopper.pt", "--env-id", "Walker2d-v5"], "trained on Hopper-v5"),
    ("ppo_continuous_action", ["--resume", "saved/"], "--resume saved/: is a folder"),
    ("ppo_continuous_action", ["--eval-checkpoint", "saved"], "--eval-checkpoint saved: is a folder"),
    ("ppo_atari", ["--clip-coef", "-0.1"], "--clip-coef -0.1"),
    ("ppo_atari", ["--noop-max", "-1"], "--noop-max -1"),
    ("ppo_rnn", ["--learning-rate", "-1"], "--learning-rate -1"),
    ("ppo_rnn", ["--max-grad-norm", "-0.5"], "--max-grad-norm -0.5"),
    ("ppo_rnn_continuous_action", ["--num-envs", "6", "--num-minibatches", "4"], "--num-envs 6 (minibatches are made"),
    ("ppo_rnn_continuous_action", ["--rnn-hidden-size", "0"], "--rnn-hidden-size 0"),
    ("ppo_rnn_continuous_action", ["--env-id", "CartPole-v1"], "Discrete action space; use ppo.py or ppo_rnn.py"),
    ("ppo_rnn_continuous_action", ["--env-id", "Pendulum-v1", "--mask-velocity", "--clip-obs", "-1"], "--clip-obs -1"),
    ("ppo", ["--learning-rate", "-1"], "--learning-rate -1"),
    ("ppo", ["--gae-lambda", "1.5"], "--gae-lambda 1.5"),
    # an empty string or path: an error, not the flag's default (test_bad_input_gives_one_line_error has the others')
    *[(name, [flag, ""], f"error: {flag} was given an empty value: {fix}")
      for name in ("ppo", "ppo_atari", "ppo_continuous_action", "ppo_rnn", "ppo_rnn_continuous_action")
      for flag, fix in (("--resume", "pass the agent.pt to continue (runs/<run>/agent.pt), or leave --resume out"),
                        ("--eval-checkpoint", "pass the agent.pt to play (runs/<run>/agent.pt)"),
                        ("--env-id", "pass an env id, e.g. "),
                        ("--exp-name", "pass a value, or leave --exp-name out for its default ('"),
                        ("--wandb-project-name", "pass a value, or leave --wandb-project-name out for its default"),
                        ("--wandb-entity", "pass a wandb entity (team), or leave --wandb-entity out"))],
    ("ppo_masked", ["--clip-coef", "-0.2"], "--clip-coef -0.2"),
    ("ppo_masked", ["--ent-coef", "-0.01"], "--ent-coef -0.01"),
]
BAD_INPUTS = [case for case in BAD_INPUTS if (ROOT / f"{case[0]}.py").exists()]
OUT_OF_RANGE = [case for case in OUT_OF_RANGE if (ROOT / f"{case[0]}.py").exists()]


# a module of one's own envs, for --env-id ppo_tests_own_envs_q7:MyPendulum-v0 (Box actions) and :MyCartPole-v0
# (Discrete). Its name is one no user picks: a user's module beside the scripts (the README's myenvs.py, say) comes
# before PYTHONPATH on the path of a script run from the clone, and would be imported in its place
OWN = "ppo_tests_own_envs_q7"
MY_ENVS = """import gymnasium

classic = "gymnasium.envs.classic_control"
gymnasium.register(id="MyPendulum-v0", entry_point=f"{classic}.pendulum:PendulumEnv", max_episode_steps=200)
gymnasium.register(id="MyCartPole-v0", entry_point=f"{classic}.cartpole:CartPoleEnv", max_episode_steps=500)
"""
# modules whose own code fails (a bug, or a script's sys.exit), each with its line numbers: the one line names the
# module or env, the error's last line and where it was raised
FAULTY_MODULES = {
    "ppo_tests_raises_on_import": 'import gymnasium\n\nraise RuntimeError("cannot start:\\nno licence server")\n',
    "ppo_tests_exits_on_import": "import sys\n\nif True:\n    sys.exit(3)\n",
    "ppo_tests_constructor_raises": """import gymnasium


class Broken(gymnasium.Env):
    def __init__(self, size=0):
        raise ValueError(f"size must be positive, not {size}")


gymnasium.register(id="Broken-v0", entry_point=Broken)
""",
}


def write_bad_files(folder):
    """What the bad inputs name: a file that is no checkpoint, a Hopper checkpoint, a run folder holding one, the
    module OWN (MY_ENVS) and the faulty modules of FAULTY_MODULES (the subprocess cases put `folder` on PYTHONPATH)."""
    (folder / "corrupt.pt").write_bytes(b"this is not a checkpoint")
    (folder / f"{OWN}.py").write_text(MY_ENVS)
    for module, text in FAULTY_MODULES.items():
        (folder / f"{module}.py").write_text(text)
    write_cont_checkpoint(folder / "hopper.pt", env_id="Hopper-v5")
    write_cont_checkpoint(folder / "saved" / "Hopper-v5__run__1__1" / "agent.pt", env_id="Hopper-v5")


def assert_one_error_line(stderr, named):
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip() and "Powered by Stella" not in line]
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], stderr


@pytest.fixture
def bad_files(tmp_path):
    """write_bad_files in tmp_path; afterwards the modules it holds are forgotten (imported in this process by a case
    run here, with the env ids they register), so that each case imports its own as a new process would."""
    forget = lambda: forget_modules([OWN, *FAULTY_MODULES], ["MyPendulum-v0", "MyCartPole-v0", "Broken-v0"])  # noqa: E731
    forget()
    write_bad_files(tmp_path)
    yield tmp_path
    forget()


@pytest.mark.parametrize("name,flags,named", BAD_INPUTS, ids=[f"{n}:{' '.join(f)}" for n, f, _ in BAD_INPUTS])
def test_bad_input_gives_one_line_error(bad_files, monkeypatch, capfd, name, flags, named):
    """Each bad command line through the script's own __main__ block in this process (run_main_here: tyro's parsing,
    main(), the checks of check_args, the checkpoint and --setting; a new process per case spent ~2.7 s importing
    torch): exit 1, one line "error: ..." naming the fix on stderr, no traceback, no warning, no run folder.
    test_bad_input_reaches_the_shell_as_one_line runs some of them as a user does."""
    code, stderr = run_main_here(name, *flags, cwd=bad_files, monkeypatch=monkeypatch, capfd=capfd, path_first=bad_files)
    assert code == 1, stderr
    assert_one_error_line(stderr, named)
    assert not (bad_files / "runs").exists()  # nothing started


# BAD_INPUTS' cases that also run as a user runs them, in a new process (run_script), one or two per script: the one
# line reaches the shell without a traceback and the process exits 1 where what fails is a module's sys.exit(), a
# module that raises on import or in its constructor, a shell's glob that matched nothing (tyro's parsing of the real
# command line), an unclosed quote in --setting, a file that is no checkpoint
END_TO_END_CASES = [
    ("ppo", ["--env-id", "ppo_tests_exits_on_import:Foo-v0"]),
    ("ppo_masked", ["--env-id", ""]),
    ("ppo_atari", ["--env-id", "ppo_tests_constructor_raises:Broken-v0"]),
    ("ppo_continuous_action", ["--env-id", "ppo_tests_raises_on_import:Foo-v0"]),
    ("ppo_continuous_action", ["--eval-checkpoint", "corrupt.pt"]),
    ("ppo_rnn", ["--resume", "corrupt.pt"]),
    ("ppo_rnn_continuous_action", ["--env-id", "ppo_tests_exits_on_import:Foo-v0"]),
    ("ppo_continuous_action_seeds", ["--resume"]),
    ("ppo_continuous_action_seeds", ["--setting", "a=--surrogate 'clip"]),
]
END_TO_END_CASES = [case for case in END_TO_END_CASES if (ROOT / f"{case[0]}.py").exists()]
END_TO_END = [case for case in BAD_INPUTS if (case[0], case[1]) in END_TO_END_CASES]


@pytest.mark.slow
@pytest.mark.parametrize("name,flags,named", END_TO_END, ids=[f"{n}:{' '.join(f)}" for n, f, _ in END_TO_END])
def test_bad_input_reaches_the_shell_as_one_line(tmp_path, name, flags, named):
    write_bad_files(tmp_path)
    result = run_script(name, *flags, cwd=tmp_path, timeout=120, env={"PYTHONPATH": pythonpath_first(tmp_path)})
    assert result.returncode == 1, result.stderr
    assert_one_error_line(result.stderr, named)
    assert not (tmp_path / "runs").exists()  # nothing started


def test_the_end_to_end_cases_cover_each_script():
    """Every script that has bad-input cases has one run in a new process too, and each case named there is one of
    BAD_INPUTS (the one line it must give is BAD_INPUTS')."""
    assert len(END_TO_END) == len(END_TO_END_CASES), "an END_TO_END case that BAD_INPUTS no longer holds"
    assert {name for name, _, _ in END_TO_END} == {name for name, _, _ in BAD_INPUTS}


MODULE_ENVS = [  # each script trains on its kind of env from one's own module; "short": flags that make the run short
    ("ppo_continuous_action", f"{OWN}:MyPendulum-v0", ["--num-steps", "64", "--total-timesteps", "128", "--no-compile"]),
    ("ppo_rnn", f"{OWN}:MyCartPole-v0", ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "64"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,env_id,short", MODULE_ENVS, ids=[f"{n}:{e}" for n, e, _ in MODULE_ENVS])
def test_an_env_of_ones_own_module_trains(tmp_path, name, env_id, short):
    """gymnasium's "module:EnvId" form, which gym.make takes by importing the module (that registers EnvId): the checks
    import it too, and the run folder's name holds the env as one folder name (':' becomes '-', as '/' does)."""
    (tmp_path / f"{OWN}.py").write_text(MY_ENVS)
    flags = ["--env-id", env_id, "--num-minibatches", "2", "--no-cuda", *short]
    result = run_script(name, *flags, cwd=tmp_path, timeout=300, env={"PYTHONPATH": pythonpath_first(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith(env_id.replace(":", "-") + "__"), run.name


def test_a_module_env_id_is_one_folder_name_and_its_faults_are_one_line(tmp_path, monkeypatch):
    """Malformed ids (gym.make fails on each, some with a traceback), and a module found that fails to import: its
    missing dependency is named as what to install, another ImportError as the import to fix."""
    from ppo_utils import flag_checks

    assert flag_checks.run_name_part("pkg.sub:MyEnv-v0") == "pkg.sub-MyEnv-v0"
    assert flag_checks.run_name_part("pkg:ns/MyEnv-v0") == "pkg-ns-MyEnv-v0"
    for env_id in ("a:b:C-v0", ":C-v0", "pkg:", ".rel:C-v0"):
        with pytest.raises(flag_checks.ArgError, match=f"^--env-id {re.escape(env_id)}: pass one module:EnvId"):
            flag_checks.find_spec(env_id)
    (tmp_path / "needs_a_dependency.py").write_text("import nosuchdependency\n")
    (tmp_path / "imports_a_wrong_name.py").write_text("from gymnasium import nosuchname\n")
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(flag_checks.ArgError, match=r"\(ModuleNotFoundError: .*'nosuchdependency'\); it needs nosuchdep"):
        flag_checks.find_spec("needs_a_dependency:MyEnv-v0")
    with pytest.raises(flag_checks.ArgError, match=r"^--env-id .*: cannot import imports_a_wrong_name \(ImportError: "):
        flag_checks.find_spec("imports_a_wrong_name:MyEnv-v0")


def test_a_fault_in_ones_own_module_is_named_at_its_own_line(tmp_path, monkeypatch):
    """A module whose line calls into a library that raises (json's decoder here, frames deep in Python's library): the
    line named is the module's own, and the error is its last line; a file outside the working folder is named by its
    full path."""
    from ppo_utils import flag_checks

    (tmp_path / "ppo_tests_calls_a_library.py").write_text('import json\n\nSETTINGS = json.loads("{")\n')
    monkeypatch.syspath_prepend(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    expected = (
        "--env-id ppo_tests_calls_a_library:X-v0: importing ppo_tests_calls_a_library failed (JSONDecodeError: Expecting "
        f"property name enclosed in double quotes: line 1 column 2 (char 1), at {tmp_path}/ppo_tests_calls_a_library.py:3); "
        "fix the module, or pass another --env-id"
    )
    with pytest.raises(flag_checks.ArgError) as error:
        flag_checks.check_env_id("ppo_tests_calls_a_library:X-v0", ("continuous",))
    assert str(error.value) == expected


@pytest.mark.parametrize("name,flags,named", OUT_OF_RANGE, ids=[f"{n}:{' '.join(f)}" for n, f, _ in OUT_OF_RANGE])
def test_out_of_range_value_gives_one_line_error(tmp_path, monkeypatch, capsys, name, flags, named):
    """The script's own last line, main(tyro.cli(Args), ...), in this process: a new one per case (as above) would
    spend most of its ~5 s importing torch. A training value let through fails at the run's first step after the
    checks instead of training here (an evaluation one fails on the stand-in checkpoint, which holds no agent). main()
    sets SIGINT and SIGTERM handlers; the test puts pytest's back."""
    write_bad_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    module = load_script(name)

    def run_started(cuda):
        raise AssertionError(f"{' '.join(flags)} was let through: the run started")

    monkeypatch.setattr(module, "distributed_setup", run_started)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as exit_info:
            module.main(tyro.cli(module.Args, args=flags), module.train, module.make_envs, module.Agent, module.act)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert exit_info.value.code == 1
    assert_one_error_line(capsys.readouterr().err, named)
    assert not (tmp_path / "runs").exists()  # nothing started


@pytest.mark.slow
@pytest.mark.parametrize("render", [True, False])
def test_a_gl_backend_without_its_library_is_one_line(tmp_path, monkeypatch, render):
    """MuJoCo loads the MUJOCO_GL backend when it is imported; one whose library is missing (osmesa here: no libOSMesa
    on the test machine; egl on some GPU machines) dies deep in PyOpenGL, with --capture-video or without it (a
    MUJOCO_GL left in the shell). The run stops before its folder with one line that names the backend and both
    fixes."""
    import ctypes.util

    if ctypes.util.find_library("OSMesa"):
        pytest.skip("libOSMesa is installed here: MUJOCO_GL=osmesa would work")
    flags = ["--env-id", "InvertedPendulum-v5", "--total-timesteps", "2048"] + ["--capture-video"] * render
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)  # set by MuJoCo in this process if a test here rendered
    result = run_script("ppo_continuous_action", *flags, cwd=tmp_path, env={"MUJOCO_GL": "osmesa"})
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "MuJoCo cannot load with MUJOCO_GL=osmesa here (AttributeError" in lines[0]
    assert "MUJOCO_GL=egl" in lines[0] and not (tmp_path / "runs").exists() and not (tmp_path / "videos").exists()


def test_a_folder_passed_as_checkpoint_names_the_agent_pt_under_it(tmp_path):
    args = load_script("ppo_continuous_action").Args()
    (tmp_path / "empty").mkdir()
    with pytest.raises(checkpoints.ArgError, match=r"^--resume .*empty: is a folder; .* e\.g\. runs/<run>/agent\.pt$"):
        checkpoints.load_checkpoint(str(tmp_path / "empty"), "--resume", args)
    older, newer = tmp_path / "runs" / "a" / "agent.pt", tmp_path / "runs" / "b" / "agent.pt"
    write_cont_checkpoint(older)
    with pytest.raises(checkpoints.ArgError, match=f"^--eval-checkpoint .*/runs: is a folder; .*: {older}$"):
        checkpoints.load_checkpoint(str(tmp_path / "runs"), "--eval-checkpoint", args)
    write_cont_checkpoint(newer)
    os.utime(older, (1, 1))  # written long before `newer`
    for folder in (tmp_path, tmp_path / "runs"):  # runs/<run>/agent.pt below the working folder, or below runs/
        with pytest.raises(checkpoints.ArgError, match=f"one of the 2 agent.pt files under it; the newest: {newer}$"):
            checkpoints.load_checkpoint(str(folder), "--resume", args)


@pytest.mark.slow
def test_evaluation_names_the_env_it_plays_and_refuses_another(tmp_path, monkeypatch, capsys):
    """--eval-checkpoint plays the checkpoint's env; an --env-id other than the default and the checkpoint's is refused
    (passing the default itself cannot be told from passing nothing)."""
    cont = load_script("ppo_continuous_action")
    monkeypatch.chdir(tmp_path)
    flags = dict(env_id="Pendulum-v1", num_steps=64, total_timesteps=64, num_minibatches=2, compile=False, save_model=True)
    cont.train(cont.Args(**flags))
    (path,) = (tmp_path / "runs").glob("*/agent.pt")
    for env_id in ("Hopper-v5", "Pendulum-v1"):  # the default (not passed), and the checkpoint's own
        capsys.readouterr()
        args = cont.Args(eval_checkpoint=str(path), eval_episodes=1, env_id=env_id)
        evaluation.evaluate(args, cont.make_envs, cont.Agent, cont.act)
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 2 and all(" on Pendulum-v1" in line for line in lines), lines
    with pytest.raises(checkpoints.ArgError, match="^--env-id Walker2d-v5 .* --eval-checkpoint .*Pendulum-v1"):
        evaluation.evaluate(cont.Args(eval_checkpoint=str(path), env_id="Walker2d-v5"), cont.make_envs, cont.Agent, cont.act)


@pytest.mark.slow
def test_evaluation_names_what_the_agent_saw_of_its_env(tmp_path, monkeypatch, capsys):
    """An agent trained with its velocities hidden (--mask-velocity) is played so, and both evaluation lines say so: its
    return is one on that env, not on the plain Pendulum-v1. The Atari scripts' frame flags are named the same way
    where a checkpoint's are not the script's default."""
    cont = load_script("ppo_continuous_action")
    monkeypatch.chdir(tmp_path)
    flags = dict(env_id="Pendulum-v1", mask_velocity=True, num_steps=64, total_timesteps=64, num_minibatches=2)
    cont.train(cont.Args(**flags, compile=False))
    (path,) = (tmp_path / "runs").glob("*/agent.pt")
    capsys.readouterr()
    evaluation.evaluate(cont.Args(eval_checkpoint=str(path), eval_episodes=1), cont.make_envs, cont.Agent, cont.act)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"evaluating {path} on Pendulum-v1 with --mask-velocity (velocities hidden) over 1 episodes"
    assert lines[1].startswith(f"eval {path} on Pendulum-v1 with --mask-velocity (velocities hidden): mean return ")
    atari = load_script("ppo_atari").Args
    saved = dataclasses.asdict(atari(frame_stack=1, warp_frame=False, noop_max=0))  # A1 changes no observation
    assert evaluation.env_as_trained(atari, saved) == "BreakoutNoFrameskip-v4 with --no-warp-frame (raw RGB frames), --frame-stack 1"
    assert evaluation.env_as_trained(atari, dataclasses.asdict(atari())) == "BreakoutNoFrameskip-v4"
