"""The scripts' sizes against their targets, a developer's check read before a change lands (never a test: a clarifying
comment must not fail the suite): each script's lines and train()'s, and the diff between neighbours.

    python tests/script_sizes.py
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# raised when each script took its own flag rules (about 50 lines beside Args), the continuous one M1/M2's wrapper (38)
# and ppo_rnn.py CartPoleNoVelocity-v1 (13), train() CleanRL's four seeding lines (issue 64), and the continuous ones
# --mask-velocity's table of positions (26, issue 65)
LINE_TARGETS = {"ppo_continuous_action": 625, "ppo_atari": 590, "ppo_rnn": 675, "ppo_rnn_continuous_action": 685}
TRAIN_TARGET = 115  # lines of each train()
DIFF_TARGETS = {("ppo_continuous_action", "ppo_atari"): 320, ("ppo_atari", "ppo_rnn"): 170,
                ("ppo_continuous_action", "ppo_rnn_continuous_action"): 140,
                ("ppo_continuous_action", "ppo_continuous_action_seeds"): 455}  # lines of diff -u A B


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
        (train,) = [node for node in ast.parse(text).body if getattr(node, "name", None) == "train"]
        sizes = [("lines", len(text.splitlines()), target), ("train()", train.end_lineno - train.lineno + 1, TRAIN_TARGET)]
        for what, size, most in sizes:
            lines.append(f"{name}.py {what}: {size} (target {most}){'  over' if size > most else ''}")
    for (a, b), target in DIFF_TARGETS.items():
        size = changed_lines((ROOT / f"{a}.py").read_text(), (ROOT / f"{b}.py").read_text())
        lines.append(f"diff {a}.py {b}.py: {size} lines (target {target}){'  over' if size > target else ''}")
    return lines


if __name__ == "__main__":
    print("\n".join(layout_report()))
