"""The scripts' sizes against their targets, a developer's check read before a change lands (never a test: a clarifying
comment must not fail the suite): each script's lines and train()'s, and the diff between neighbours.

    python tests/script_sizes.py
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# lowered by the reading pass (issue 71): the shared flags' ranges and batch checks in ppo_utils/flag_checks.py, each
# flag's help one comment on its line; a script that gains a feature first looks for what it can lose
LINE_TARGETS = {"ppo": 435, "ppo_continuous_action": 560, "ppo_atari": 500, "ppo_rnn": 590, "ppo_rnn_continuous_action": 615,
                "ppo_masked": 485}  # fmt: skip
TRAIN_TARGET = 115  # lines of each train(); each Args shorter than its train()
# ppo.py (issue 72) leads to the Atari, continuous and masked scripts: their diffs from it at their sizes when it came
DIFF_TARGETS = {("ppo", "ppo_atari"): 150, ("ppo", "ppo_continuous_action"): 200, ("ppo", "ppo_masked"): 130,
                ("ppo_continuous_action", "ppo_atari"): 280, ("ppo_atari", "ppo_rnn"): 160,
                ("ppo_continuous_action", "ppo_rnn_continuous_action"): 140,
                ("ppo_continuous_action", "ppo_continuous_action_seeds"): 420}  # lines of diff -u A B  # fmt: skip


def changed_lines(a, b):
    """The count `diff -u A B | tail -n +3 | grep -c '^[-+]'` gives: lines deleted plus lines inserted. difflib's
    unified_diff always turns on SequenceMatcher's autojunk, which leaves lines frequent in a file (blank lines,
    closing brackets) unmatched and counts a few more than diff; without it the count is diff's."""
    import difflib

    matcher = difflib.SequenceMatcher(None, a.splitlines(keepends=True), b.splitlines(keepends=True), autojunk=False)
    return sum((i2 - i1) + (j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")


def layout_report():
    """One line per size with its target, "over" where it is missed."""
    import ast

    lines = []
    for name, target in LINE_TARGETS.items():
        text = (ROOT / f"{name}.py").read_text()
        size = {node.name: node.end_lineno - node.lineno + 1 for node in ast.parse(text).body if hasattr(node, "name")}
        sizes = [("lines", len(text.splitlines()), target), ("train()", size["train"], TRAIN_TARGET)]
        sizes.append(("Args", size["Args"], size["train"] - 1))
        for what, size, most in sizes:
            lines.append(f"{name}.py {what}: {size} (target {most}){'  over' if size > most else ''}")
    for (a, b), target in DIFF_TARGETS.items():
        size = changed_lines((ROOT / f"{a}.py").read_text(), (ROOT / f"{b}.py").read_text())
        lines.append(f"diff {a}.py {b}.py: {size} lines (target {target}){'  over' if size > target else ''}")
    return lines


if __name__ == "__main__":
    print("\n".join(layout_report()))
