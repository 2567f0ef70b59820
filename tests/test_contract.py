"""ppo_utils/contract.py: every script defines what the package reads of it, a script that does not is told in one line
before anything starts, and the package reads no script's flag by name but those the contract lists."""

import dataclasses
import re
from typing import ClassVar

import pytest
from conftest import ROOT, load_script
from ppo_utils.contract import BATCH_FLAGS, RUN_FLAGS, ContractError, check_script

SCRIPTS = ["ppo", "ppo_atari", "ppo_continuous_action", "ppo_masked", "ppo_rnn", "ppo_rnn_continuous_action"]


@pytest.mark.parametrize("name", SCRIPTS + ["ppo_continuous_action_seeds"])
def test_every_script_keeps_the_contract(name):
    module = load_script(name)
    Args = getattr(module, "SeedsArgs", module.Args)
    check_script(Args(), module.train, module.make_envs, module.Agent, getattr(module, "act", None))


def test_a_script_that_breaks_it_is_told_in_one_line_what_is_wrong():
    cont = load_script("ppo_continuous_action")
    good = (cont.train, cont.make_envs, cont.Agent, cont.act)

    @dataclasses.dataclass
    class NoKinds(cont.Args):
        env_kinds: ClassVar[tuple] = ("mujoco",)

    @dataclasses.dataclass
    class OldRules(cont.Args):
        flag_rules: ClassVar[dict] = {"clip_observations": (lambda v: v >= 0, "pass a bound")}

    cases = [
        (NoKinds(), good, r"^ppo_continuous_action.py: Args.env_kinds \('mujoco',\): name one or more of continuous, atari"),
        (OldRules(), good, r"^ppo_continuous_action.py: Args.flag_rules names clip_observations, which is not one of its"),
        (
            cont.Args(),
            (lambda args: None, *good[1:]),
            r"^ppo_continuous_action.py: train does not take \(args, stop_signals\)",
        ),
        (cont.Args(), (*good[:2], object, cont.act), r"^ppo_continuous_action.py: Agent is not a torch.nn.Module class"),
    ]
    for args, functions, message in cases:
        with pytest.raises(ContractError, match=message) as error:
            check_script(args, *functions)
        assert "\n" not in str(error.value)


def test_the_package_reads_no_flag_by_name_but_the_contracts():
    """`args.NAME` and `getattr(args, "NAME")` in ppo_utils/ (the batched script's own plumbing, seeds.py, apart: it
    reads its parent's flags) name the contract's flags, its class variables and properties, or Python's."""
    allowed = set(RUN_FLAGS + BATCH_FLAGS) | {"script", "env_kinds", "eval_flags", "flag_rules", "check", "batch_size",
                                              "minibatch_size", "num_iterations", "exc_value", "thread", "get"}  # fmt: skip
    for path in sorted((ROOT / "ppo_utils").glob("*.py")):
        if path.name == "seeds.py":
            continue
        text = path.read_text()
        read = set(re.findall(r"\bargs\.([a-z_]+)", text)) | set(re.findall(r"getattr\(args, \"([a-z_]+)\"", text))
        assert read <= allowed, f"{path.name} reads {sorted(read - allowed)}"
