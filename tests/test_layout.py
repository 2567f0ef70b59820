"""The six scripts' structure: each keeps the definitions the family shares (the tests call them by name), and the
batched variant takes from its parent every definition batching does not change. Whether the shared definitions still
read alike, and the scripts' sizes, is a developer's report, `python tests/family_report.py`, never a failure: a
researcher's change to one script's algorithm touches that file alone. The report itself is tested here, on a copy."""

import difflib
import shutil
import subprocess

import pytest
from conftest import ROOT, load_script
from family_report import (CONTINUOUS, MASKED, PPO, RNN, RNN_CONTINUOUS, changed_lines, readme_report, text_report,
                           top_level_definitions)

NAMES = (PPO, CONTINUOUS, "ppo_atari", RNN, RNN_CONTINUOUS, MASKED)
# the top-level definitions all six scripts have, and those only some have
SHARED = {"Args", "make_env", "make_envs", "layer_init", "Agent", "compute_gae", "normalize_advantages", "policy_loss",
          "value_loss", "adapt_kl_beta", "ppo_loss", "ppo_backward", "update_policy", "batch_kl", "truncation_bootstrap",
          "act", "train"}  # fmt: skip
# M1/M2's observation wrapper (gymnasium's refuses SAME_STEP autoreset); B3's minibatches of whole env sequences and the
# env that needs memory; D3's observed space and D1's masks read from an observation
ONLY_IN = {PPO: set(), CONTINUOUS: {"NormalizeObservation"}, "ppo_atari": set(), RNN: {"env_minibatches",
           "cartpole_no_velocity"}, RNN_CONTINUOUS: {"NormalizeObservation", "env_minibatches"},
           MASKED: {"observed_space", "observe"}}  # fmt: skip


def definitions(name):
    return top_level_definitions((ROOT / f"{name}.py").read_text())


def test_changed_lines_counts_what_diff_counts():
    a = "x = 1\n\ny = 2\nz = 3\n"
    b = "x = 1\n\ny = 20\nz = 3\nw = 4\n"
    # diff -u: "-y = 2", "+y = 20", "+w = 4"
    assert changed_lines(a, b) == 3
    assert changed_lines(a, a) == 0
    unified = list(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True)))
    assert sum(line.startswith(("+", "-")) for line in unified[2:]) == 3  # the same count from unified_diff here


@pytest.mark.parametrize("name", NAMES)
def test_each_script_has_the_expected_top_level_definitions(name):
    """A script may gain definitions of its own (a researcher's new class or function touches that script alone); it
    keeps those all scripts share and its own of today."""
    found = set(definitions(name))
    assert ONLY_IN[name] - found == set(), "a definition of this script's own that it lost"
    assert SHARED - found == set(), "a shared definition this script lacks"


def test_the_report_names_each_departure_from_the_shared_text(tmp_path):
    """On a copy of the six scripts: a shared definition changed in ppo.py alone is named once per neighbour that
    shares its text, a definition allowed to differ made alike is named, a recurrent line changed in
    ppo_rnn_continuous_action.py alone is named (ppo.py's act() in the Atari script reads as the continuous one's too)."""
    for name in NAMES:
        shutil.copy(ROOT / f"{name}.py", tmp_path)
    clean = text_report(tmp_path)
    ppo = (tmp_path / "ppo.py").read_text()
    old = definitions(PPO)["value_loss"]
    (tmp_path / "ppo.py").write_text(ppo.replace(old, old + "\n\n\ndef value_loss_kept_apart():\n    pass", 1)
                                     .replace("def value_loss(", "def value_loss(*_, extra=None, ", 1))  # fmt: skip
    departed = set(text_report(tmp_path)) - set(clean)
    neighbours = ("ppo_atari", CONTINUOUS, MASKED)  # ppo.py's neighbours in ALLOWED_TO_DIFFER
    assert departed == {f"value_loss differs between ppo.py and {b}.py: allow it in ALLOWED_TO_DIFFER or change both "
                        "alike" for b in neighbours}  # fmt: skip
    (tmp_path / "ppo.py").write_text(ppo)
    atari = (tmp_path / "ppo_atari.py").read_text()  # ppo.py's act() into the Atari script: allowed, now alike
    (tmp_path / "ppo_atari.py").write_text(atari.replace(definitions("ppo_atari")["act"], definitions(PPO)["act"], 1))
    assert set(text_report(tmp_path)) - set(clean) == {f"act reads the same in {a}.py and ppo_atari.py: drop it from "
                                                       "ALLOWED_TO_DIFFER" for a in (PPO, CONTINUOUS)}  # fmt: skip
    shutil.copy(ROOT / "ppo_atari.py", tmp_path)
    rnn_continuous = (tmp_path / f"{RNN_CONTINUOUS}.py").read_text()
    line = next(line for line in rnn_continuous.splitlines() if "next_state" in line and "self.recur(" in line)
    (tmp_path / f"{RNN_CONTINUOUS}.py").write_text(rnn_continuous.replace(line, line + "  # changed", 1))
    assert set(text_report(tmp_path)) - set(clean) == {f"{RNN_CONTINUOUS}.py adds a line ppo_rnn.py lacks: {line.strip()}  "
                                                       "# changed"}  # fmt: skip


# ppo_continuous_action_seeds.py, the batched variant of the continuous script: every definition batching does not
# change it takes from its parent, imported (a changed function in ppo_continuous_action.py is the batched script's too)
SEEDS = "ppo_continuous_action_seeds"
SEEDS_IMPORTED = {"Args", "make_env", "Agent", "compute_gae", "normalize_advantages", "policy_loss", "value_loss",
                  "adapt_kl_beta", "batch_kl"}  # fmt: skip


def test_the_batched_variant_takes_what_batching_does_not_change_from_its_parent():
    """No act(): its agents' checkpoints are its parent's, which evaluates them."""
    assert SEEDS_IMPORTED & set(definitions(SEEDS)) == set(), "a definition of the parent written anew in the variant"
    parent, variant = load_script(CONTINUOUS), load_script(SEEDS)
    assert [name for name in SEEDS_IMPORTED if getattr(variant, name) is not getattr(parent, name)] == []
    assert issubclass(variant.SeedsArgs, parent.Args) and not hasattr(variant, "act")


def test_the_report_names_a_readme_whose_diff_figures_are_stale(tmp_path):
    """The README's size of `diff ppo.py ppo_masked.py` against the diff program's own count, on a copy: a README that
    states diff's count is not named, one whose figures went stale is (the project's README is not pinned here)."""
    if shutil.which("diff") is None:
        pytest.skip("no diff program on this machine")
    for name in (PPO, MASKED):
        shutil.copy(ROOT / f"{name}.py", tmp_path)
    def counted():  # the diff program's lines, and its lines added and removed
        lines = subprocess.run(["diff", "ppo.py", "ppo_masked.py"], cwd=tmp_path, capture_output=True, text=True).stdout
        lines = lines.splitlines()
        return len(lines), sum(line.startswith("> ") for line in lines), sum(line.startswith("< ") for line in lines)

    before = counted()
    said = "`diff ppo.py ppo_masked.py` is what masking costs: {} lines ({} added, {} removed), each marked."
    (tmp_path / "README.md").write_text(said.format(*before))
    assert readme_report(tmp_path) == []
    (tmp_path / "ppo_masked.py").write_text((ROOT / "ppo_masked.py").read_text() + "\n\nA_NEW_LINE = 1\n")
    after = counted()
    assert after != before
    assert readme_report(tmp_path) == [
        "README.md says diff ppo.py ppo_masked.py is {} lines ({} added, {} removed); diff counts {} ({} added, {} "
        "removed)".format(*before, *after)
    ]
