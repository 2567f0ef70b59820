"""The six scripts stay one algorithm told six times: every top-level function and class they share by name has
the same source text, except the definitions allowed to differ between each pair of neighbours (ppo.py, the root, and
each script it leads to); the recurrent continuous script adds to the continuous one the lines of ppo_rnn.py. Their sizes against the targets
(each script's lines, train()'s, the diff between neighbours) are a developer's check, `python tests/script_sizes.py`:
a target missed is to read, never a failure, so that a clarifying comment never fails the suite."""

import ast
import difflib

import pytest
from conftest import ROOT, load_script
from script_sizes import changed_lines

CONTINUOUS, ATARI, RNN, RNN_CONTINUOUS = "ppo_continuous_action", "ppo_atari", "ppo_rnn", "ppo_rnn_continuous_action"
PPO, MASKED = "ppo", "ppo_masked"
NAMES = (PPO, CONTINUOUS, ATARI, RNN, RNN_CONTINUOUS, MASKED)

# the top-level definitions all six scripts have, and those only some have
SHARED = {"Args", "make_env", "make_envs", "layer_init", "Agent", "compute_gae", "normalize_advantages", "policy_loss",
          "value_loss", "adapt_kl_beta", "ppo_loss", "ppo_backward", "update_policy", "batch_kl", "truncation_bootstrap",
          "act", "train"}  # fmt: skip
# M1/M2's observation wrapper (gymnasium's refuses SAME_STEP autoreset); B3's minibatches of whole env sequences and the
# env that needs memory; D3's observed space and D1's masks read from an observation
ONLY_IN = {PPO: set(), CONTINUOUS: {"NormalizeObservation"}, ATARI: set(), RNN: {"env_minibatches", "cartpole_no_velocity"},
           RNN_CONTINUOUS: {"NormalizeObservation", "env_minibatches"}, MASKED: {"observed_space", "observe"}}  # fmt: skip

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
PAIRS = list(ALLOWED_TO_DIFFER)


def source(name):
    return (ROOT / f"{name}.py").read_text()


def top_level_definitions(name):
    """{name: source text} of the script's top-level functions and classes, read with ast."""
    text = source(name)
    return {
        node.name: ast.get_source_segment(text, node)
        for node in ast.parse(text).body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


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
    definitions = set(top_level_definitions(name))
    assert ONLY_IN[name] - definitions == set(), "a definition of this script's own that it lost"
    assert SHARED - definitions == set(), "a shared definition this script lacks"


@pytest.mark.parametrize("pair", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_shared_definitions_are_identical_except_the_allowed_ones(pair):
    a, b = (top_level_definitions(name) for name in pair)
    shared = a.keys() & b.keys()
    assert shared >= SHARED | (ONLY_IN[pair[0]] & ONLY_IN[pair[1]])  # a definition both gain is shared as the others
    differ = {name for name in shared if a[name] != b[name]}
    allowed = ALLOWED_TO_DIFFER[pair]
    assert differ - allowed == set(), f"differ between {pair[0]}.py and {pair[1]}.py without being allowed to"
    assert allowed - differ == set(), f"allowed to differ but identical in {pair[0]}.py and {pair[1]}.py: drop them"


# ppo_continuous_action_seeds.py, the batched variant of the continuous script: the definitions it holds (those batching
# changes: an agent axis, per-agent reductions, several runs); every other one it uses is its parent's, imported
SEEDS = "ppo_continuous_action_seeds"
SEEDS_OWN = {"Seeds", "SeedsArgs", "make_envs", "NormalizeObservation", "NormalizeReward", "Agents", "ppo_loss",
             "ppo_backward", "clip_grad_norms", "minibatch_step", "update_policy", "truncation_bootstrap",
             "train"}  # fmt: skip
SEEDS_IMPORTED = {"Args", "make_env", "Agent", "compute_gae", "normalize_advantages", "policy_loss", "value_loss",
                  "adapt_kl_beta", "batch_kl"}  # fmt: skip


def test_the_batched_variant_holds_only_what_batching_changes_and_takes_the_rest_from_its_parent():
    """Its parent's definitions reach it as they are (a changed function in ppo_continuous_action.py is the batched
    script's too); a definition it holds is one it batches. No act(): its agents' checkpoints are its parent's, which
    evaluates them."""
    assert set(top_level_definitions(SEEDS)) == SEEDS_OWN
    parent, variant = load_script(CONTINUOUS), load_script(SEEDS)
    assert SEEDS_IMPORTED <= set(top_level_definitions(CONTINUOUS)) - SEEDS_OWN
    assert [name for name in SEEDS_IMPORTED if getattr(variant, name) is not getattr(parent, name)] == []
    assert issubclass(variant.SeedsArgs, parent.Args) and not hasattr(variant, "act")


# the lines ppo_rnn_continuous_action.py adds to ppo_continuous_action.py that ppo_rnn.py does not have, besides its
# docstring: its batch's shape (B3 needs envs to split), the order its layers are built in, and the recurrent lines that
# meet the MLP's 64 units and the Gaussian head
ADAPTED = {
    "        # built in ppo_continuous_action.py's order (the critic whole, then the actor), each body followed by its LSTM",
    "    num_envs: int = 32  # (G10) number of parallel environments",
    "    num_steps: int = 64  # (G10) steps per environment in each rollout (the paper's horizon T)",
    '            cell = {"lstm": nn.LSTM, "gru": nn.GRU}[args.rnn](64, args.rnn_hidden_size)',
    "        self.actor_mean = layer_init(nn.Linear(args.rnn_hidden_size, act_dim), std=0.01, ortho=ortho)",
    "            self.actor_logstd = layer_init(",
    "                nn.Linear(args.rnn_hidden_size, act_dim), std=0.01, bias_const=args.log_std_init, ortho=ortho",
    "        hidden, _ = self.recur(self.critic_body, self.critic_rnn, x, state[-self.num_state_tensors :], done)",
    "        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(hidden), next_state",
}


def test_the_recurrent_continuous_script_adds_the_recurrent_scripts_lines():
    """Recurrence reads the same in both recurrent scripts: what the diff from ppo_continuous_action.py adds is
    ppo_rnn.py's lines, byte for byte, except ADAPTED's; and the definition only the recurrent scripts have is one."""
    parent, variant = source(CONTINUOUS).splitlines(), source(RNN_CONTINUOUS).splitlines()
    after_docstring = ast.parse(source(RNN_CONTINUOUS)).body[0].end_lineno  # the index of its first line after it
    matcher = difflib.SequenceMatcher(None, parent, variant, autojunk=False)
    changed = [(j1, j2) for tag, _, _, j1, j2 in matcher.get_opcodes() if tag != "equal"]
    added = {line for j1, j2 in changed for line in variant[max(j1, after_docstring) : j2]}
    assert added - set(source(RNN).splitlines()) == ADAPTED
    assert top_level_definitions(RNN)["env_minibatches"] == top_level_definitions(RNN_CONTINUOUS)["env_minibatches"]
