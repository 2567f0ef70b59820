"""The family's report, a developer's check read before a change lands (never a test: a researcher's change to one
script's algorithm must not fail the suite):

- the shared text: the six scripts are one algorithm told six times, so every top-level function and class two
  neighbours (ppo.py, the root, and each script it leads to) share by name has the same source text, except the
  definitions ALLOWED_TO_DIFFER; the recurrent continuous script adds to the continuous one ppo_rnn.py's lines, besides
  ADAPTED's. A definition that departs is named, to be allowed here or carried to the neighbours alike;
- the sizes against their targets: each script's lines and train()'s, and the diff between neighbours.

    python tests/family_report.py
"""

import ast
import difflib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTINUOUS, ATARI, RNN, RNN_CONTINUOUS = "ppo_continuous_action", "ppo_atari", "ppo_rnn", "ppo_rnn_continuous_action"
PPO, MASKED = "ppo", "ppo_masked"

# the definitions each pair of neighbouring scripts may word differently; everything else they share is byte-identical
ALLOWED_TO_DIFFER = {
    # the root against the Atari script: the wrappers and the CNN (A1-A10), frames kept as uint8 (act, train)
    (PPO, ATARI): {"Args", "make_env", "make_envs", "Agent", "act", "train"},
    # the root against the continuous script: the Gaussian policy and observation normalization (M1-M8)
    (PPO, CONTINUOUS): {"Args", "make_env", "make_envs", "Agent", "train"},
    # the root against the masked script: D1's mask through the agent, the loss and the rollout, D2's action columns,
    # D3's flattened observations (and its final observations under B1), envpool's tasks
    (PPO, MASKED): {"Args", "make_envs", "Agent", "ppo_loss", "batch_kl", "truncation_bootstrap", "act", "train"},
    # Box actions and observation normalization (M1-M8) against discrete actions and frames (A1-A10)
    (CONTINUOUS, ATARI): {"Args", "make_env", "make_envs", "Agent", "act", "train"},
    # memory (B2, B3): the recurrent state goes through the agent, the loss, the minibatches and the rollout
    (ATARI, RNN): {"Args", "make_env", "Agent", "ppo_loss", "update_policy", "batch_kl", "truncation_bootstrap", "act",
                   "train"},
    # the same memory for continuous actions
    (CONTINUOUS, RNN_CONTINUOUS): {"Args", "Agent", "ppo_loss", "update_policy", "batch_kl", "truncation_bootstrap", "act",
                                   "train"},
}  # fmt: skip

# the lines ppo_rnn_continuous_action.py adds to ppo_continuous_action.py that ppo_rnn.py does not have, besides its
# docstring: its batch's shape (B3 needs envs to split), the order its layers are built in, and the recurrent lines that
# meet the MLP's 64 units and the Gaussian head
ADAPTED = {
    "        # ppo_continuous_action.py's build order (the critic whole, then the actor), each body before its LSTM",
    "    num_envs: int = 32  # (G10) number of parallel environments",
    "    num_steps: int = 64  # (G10) steps per environment in each rollout (the paper's horizon T)",
    '            cell = {"lstm": nn.LSTM, "gru": nn.GRU}[args.rnn](64, args.rnn_hidden_size)',
    "        self.actor_mean = layer_init(nn.Linear(args.rnn_hidden_size, heads * act_dim), std=0.01, ortho=ortho)",
    "                nn.Linear(args.rnn_hidden_size, act_dim), std=0.01, bias_const=args.log_std_init, ortho=ortho",
    "        hidden, _ = self.recur(self.critic_body, self.critic_rnn, x, state[-self.num_state_tensors :], done)",
    # M9's Beta returns before the Gaussian is built: the critic's hidden state comes first, under its own name
    "            critic_hidden, critic_state = self.recur(",
    "        value = self.critic(hidden if self.shared_network else critic_hidden)",
    "            return action, logprob, probs.entropy().sum(1), value, next_state",
    "            return action, logprob, -logprob, value, next_state",
    "        return action, logprob, probs.entropy().sum(1), value, next_state",
}

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
    matcher = difflib.SequenceMatcher(None, a.splitlines(keepends=True), b.splitlines(keepends=True), autojunk=False)
    return sum((i2 - i1) + (j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")


def top_level_definitions(text):
    """{name: source text} of a script's top-level functions and classes, read with ast."""
    return {node.name: ast.get_source_segment(text, node) for node in ast.parse(text).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}  # fmt: skip


def text_report(root=ROOT):
    """One line per departure from the shared text: a definition two neighbours word differently without being allowed
    to, one allowed to differ that reads the same, a line the recurrent continuous script adds that ppo_rnn.py lacks."""
    read = {name: (root / f"{name}.py").read_text() for name in (PPO, CONTINUOUS, ATARI, RNN, RNN_CONTINUOUS, MASKED)}
    lines = []
    for (a, b), allowed in ALLOWED_TO_DIFFER.items():
        da, db = top_level_definitions(read[a]), top_level_definitions(read[b])
        differ = {name for name in da.keys() & db.keys() if da[name] != db[name]}
        for name in sorted(differ - allowed):
            lines.append(f"{name} differs between {a}.py and {b}.py: allow it in ALLOWED_TO_DIFFER or change both alike")
        for name in sorted(allowed - differ):
            lines.append(f"{name} reads the same in {a}.py and {b}.py: drop it from ALLOWED_TO_DIFFER")
    parent, variant = read[CONTINUOUS].splitlines(), read[RNN_CONTINUOUS].splitlines()
    after_docstring = ast.parse(read[RNN_CONTINUOUS]).body[0].end_lineno  # the index of its first line after it
    matcher = difflib.SequenceMatcher(None, parent, variant, autojunk=False)
    added = {line for tag, _, _, j1, j2 in matcher.get_opcodes() if tag != "equal"
             for line in variant[max(j1, after_docstring) : j2]}  # fmt: skip
    for line in sorted(added - set(read[RNN].splitlines()) - ADAPTED):
        lines.append(f"{RNN_CONTINUOUS}.py adds a line ppo_rnn.py lacks: {line.strip()}")
    for line in sorted(ADAPTED - added):
        lines.append(f"ADAPTED names a line {RNN_CONTINUOUS}.py no longer adds: {line.strip()}")
    return lines


def size_report(root=ROOT):
    """One line per size with its target, "over" where it is missed."""
    lines = []
    for name, target in LINE_TARGETS.items():
        text = (root / f"{name}.py").read_text()
        size = {node.name: node.end_lineno - node.lineno + 1 for node in ast.parse(text).body if hasattr(node, "name")}
        sizes = [("lines", len(text.splitlines()), target), ("train()", size["train"], TRAIN_TARGET)]
        sizes.append(("Args", size["Args"], size["train"] - 1))
        for what, size, most in sizes:
            lines.append(f"{name}.py {what}: {size} (target {most}){'  over' if size > most else ''}")
    for (a, b), target in DIFF_TARGETS.items():
        size = changed_lines((root / f"{a}.py").read_text(), (root / f"{b}.py").read_text())
        lines.append(f"diff {a}.py {b}.py: {size} lines (target {target}){'  over' if size > target else ''}")
    return lines


def readme_report(root=ROOT):
    """The README's figures for `diff ppo.py ppo_masked.py` (its lines, added, removed) against diff's count."""
    import re
    import subprocess

    if not (root / "README.md").exists():  # a copy of the scripts alone
        return []
    text = " ".join((root / "README.md").read_text().split())
    said = re.search(r"`diff ppo.py ppo_masked.py` [^:]*: (\d+) lines \((\d+) added, (\d+) removed\)", text)
    lines = subprocess.run(["diff", "ppo.py", "ppo_masked.py"], cwd=root, capture_output=True, text=True).stdout.splitlines()
    counted = (len(lines), sum(line.startswith("> ") for line in lines), sum(line.startswith("< ") for line in lines))
    if not said:
        return ["README.md no longer states the size of diff ppo.py ppo_masked.py"]
    if tuple(map(int, said.groups())) != counted:
        return [f"README.md says diff ppo.py ppo_masked.py is {said.group(1)} lines ({said.group(2)} added, "
                f"{said.group(3)} removed); diff counts {counted[0]} ({counted[1]} added, {counted[2]} removed)"]
    return []


def reading_report(root=ROOT):
    """Per script: its comments (# ... on a line of their own or after code, read with tokenize) and its long lines."""
    import io
    import tokenize

    lines = []
    for name in LINE_TARGETS:
        text = (root / f"{name}.py").read_text()
        comments = sum(token.type == tokenize.COMMENT for token in tokenize.generate_tokens(io.StringIO(text).readline))
        widths = [len(line) for line in text.splitlines()]
        over_100, over_110 = sum(w > 100 for w in widths), sum(w > 110 for w in widths)
        lines.append(f"{name}.py: {comments} comments, {over_100} lines over 100, {over_110} over 110")
    return lines


if __name__ == "__main__":
    departures = text_report() + readme_report()
    print("shared text:", "as allowed" if not departures else f"{len(departures)} departures")
    for line in departures:
        print(f"  {line}")
    print("reading (comments, lines over 100 and 110 characters):")
    print("\n".join(f"  {line}" for line in reading_report()))
    print("sizes:")
    print("\n".join(f"  {line}" for line in size_report()))
