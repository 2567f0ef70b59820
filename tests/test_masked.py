"""ppo_masked.py's D1 (invalid actions get probability 0), D2 (MultiDiscrete actions as independent categorical
components) and D3 (dict observations flattened), each against a reference computed without the script: the masked
softmax written out by hand, sb3-contrib's MaskableCategorical and MaskableMultiCategoricalDistribution, gymnasium's own
flatten and hand-made masks. A control that forgets the mask runs through the same checks and must be caught by each.
Then envpool's tasks as the rollout meets them (no mask that allows nothing), and the one-line errors of the inputs the
script cannot take."""

import itertools
import warnings
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import forget_modules, load_script, needs, pythonpath_first, run_main_here, run_script
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete
from torch import nn
from torch.distributions import Categorical

masked = load_script("ppo_masked")

DISCRETE = [4]  # Discrete(4): small enough to try every mask
MULTI = [3, 4, 2]  # MultiDiscrete([3, 4, 2]): components of different sizes


# ---------------------------------------------------------------------------------------------------------------------
# the policies under test: the script's agent, and the control that forgets the mask


def logit_agent(nvec):
    """ppo_masked's Agent for Discrete(n) (nvec [n]) or MultiDiscrete(nvec), with its actor's body and head made
    identities: the observation it is given is the actor's output, the logits the masking works on."""
    action_space = Discrete(nvec[0]) if len(nvec) == 1 else MultiDiscrete(nvec)
    envs = SimpleNamespace(
        single_observation_space=Box(-np.inf, np.inf, (sum(nvec),), np.float32), single_action_space=action_space
    )
    torch.manual_seed(0)
    agent = masked.Agent(envs, masked.Args())
    assert agent.nvec == list(nvec)
    agent.actor_body, agent.actor = nn.Identity(), nn.Identity()
    return agent


def agent_policy(nvec):
    """(logits, mask, action=None) -> (action, logprob, entropy) of the script's agent on those logits."""
    agent = logit_agent(nvec)

    def policy(logits, mask, action=None):
        with torch.no_grad():
            return agent.get_action_and_value(logits, mask, action)[:3]

    return policy


def unmasked_policy(nvec):
    """The control: what a script that forgot the mask would do, a plain categorical over all of each component's
    logits (the components' log-probabilities and entropies summed, as D2 does)."""

    def policy(logits, mask, action=None):
        dists = [Categorical(logits=part) for part in logits.split(list(nvec), dim=1)]
        if action is None:
            action = torch.stack([d.sample() for d in dists], dim=1)
        return action, sum(d.log_prob(a) for d, a in zip(dists, action.unbind(1))), sum(d.entropy() for d in dists)

    return policy


# ---------------------------------------------------------------------------------------------------------------------
# cases and the references


def nonempty_masks(n):
    """Every mask of n choices that allows at least one of them, one row of booleans each: 2**n - 1 rows."""
    return torch.tensor([bits for bits in itertools.product([False, True], repeat=n) if any(bits)])


def multi_masks(nvec):
    """Every combination of the components' non-empty masks, one row of sum(nvec) booleans each (for [3, 4, 2]:
    7 x 15 x 3 = 315 rows)."""
    return torch.stack([torch.cat(combo) for combo in itertools.product(*[nonempty_masks(n) for n in nvec])])


def components(nvec):
    """(first column, choices) of each component in a row of sum(nvec) logits or mask entries."""
    starts = np.cumsum([0] + list(nvec[:-1]))
    return [(int(s), n) for s, n in zip(starts, nvec)]


def masked_softmax(logits, mask):
    """The hand reference of one component, in float64: p_j = exp(z_j) / sum over valid k of exp(z_k) for a valid j,
    0 for an invalid one. logits and mask (rows, n); returns numpy (rows, n)."""
    z = np.where(mask.numpy(), logits.double().numpy(), -np.inf)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def by_hand(nvec, logits, masks, actions):
    """log pi(action) and the entropy by hand, in float64: for each component the log of its masked softmax at its
    action and -sum p log p over its valid choices, summed over the components (D2)."""
    logprob, entropy = np.zeros(len(logits)), np.zeros(len(logits))
    for c, (start, n) in enumerate(components(nvec)):
        mask = masks[:, start : start + n]
        p = masked_softmax(logits[:, start : start + n], mask)
        logprob += np.log(p[np.arange(len(p)), actions[:, c].numpy()])
        entropy -= np.where(mask.numpy(), p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(axis=1)
    return logprob, entropy


def valid_actions(nvec, masks, seed):
    """One valid action per row of masks, each component's drawn uniformly from its valid choices."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.multinomial(masks[:, s : s + n].float(), 1, generator=g)[:, 0] for s, n in components(nvec)], 1)


def discrete_case(seed=0):
    """Every non-empty mask of Discrete(4) with each of its valid actions (32 rows), random logits of spread 3."""
    masks = nonempty_masks(4)
    rows = [(mask, a) for mask in masks for a in range(4) if mask[a]]
    logits = torch.randn(len(rows), 4, generator=torch.Generator().manual_seed(seed)) * 3
    return logits, torch.stack([m for m, _ in rows]), torch.tensor([[a] for _, a in rows])


def multi_case(seed=0):
    """multi_masks(MULTI) (315 rows), a random valid action in each, random logits of spread 3."""
    masks = multi_masks(MULTI)
    logits = torch.randn(len(masks), sum(MULTI), generator=torch.Generator().manual_seed(seed)) * 3
    return logits, masks, valid_actions(MULTI, masks, seed)


CASES = {"discrete": (DISCRETE, discrete_case), "multidiscrete": (MULTI, multi_case)}


# ---------------------------------------------------------------------------------------------------------------------
# the checks, each returning what it found, so that the control can be run through them too


def sampling_faults(policy, nvec, logits, masks, draws, seed=1):
    """Draws `draws` actions for each row of logits and masks. Returns (how many draws were of an invalid choice of
    some component, the largest distance in standard deviations between a valid choice's count and its expected count
    draws * p under the masked softmax)."""
    torch.manual_seed(seed)
    action, _, _ = policy(logits.repeat_interleave(draws, 0), masks.repeat_interleave(draws, 0))
    action = action.view(len(logits), draws, len(nvec))
    invalid, worst = 0, 0.0
    for c, (start, n) in enumerate(components(nvec)):
        mask = masks[:, start : start + n]
        counts = F.one_hot(action[:, :, c], n).sum(1).double().numpy()
        invalid += int(counts[~mask.numpy()].sum())
        p = masked_softmax(logits[:, start : start + n], mask)
        spread = np.sqrt(draws * p * (1 - p))
        distance = np.abs(counts - draws * p) / np.where(spread > 0, spread, 1.0)  # a sure choice: its count exactly
        worst = max(worst, float(distance[mask.numpy()].max()))
    return invalid, worst


def value_errors(policy, nvec, logits, masks, actions):
    """The largest differences of the policy's log-probabilities and entropies from the hand-computed ones."""
    _, logprob, entropy = policy(logits, masks, actions)
    hand_logprob, hand_entropy = by_hand(nvec, logits, masks, actions)
    logprob_error = np.abs(logprob.double().numpy() - hand_logprob).max()
    entropy_error = np.abs(entropy.double().numpy() - hand_entropy).max()
    return float(logprob_error), float(entropy_error)


def sb3_errors(policy, nvec, logits, masks, actions):
    """The largest differences of the policy's log-probabilities and entropies from sb3-contrib's: MaskableCategorical
    for one component, MaskableMultiCategoricalDistribution (which masks each component with its columns) for more."""
    from sb3_contrib.common.maskable.distributions import MaskableCategorical, MaskableMultiCategoricalDistribution

    if len(nvec) == 1:
        reference = MaskableCategorical(logits=logits, masks=masks)
        ref_logprob, ref_entropy = reference.log_prob(actions[:, 0]), reference.entropy()
    else:
        reference = MaskableMultiCategoricalDistribution(list(nvec)).proba_distribution(logits)
        reference.apply_masking(masks)
        ref_logprob, ref_entropy = reference.log_prob(actions), reference.entropy()
    _, logprob, entropy = policy(logits, masks, actions)
    return float((logprob - ref_logprob).abs().max()), float((entropy - ref_entropy).abs().max())


def hand_gradients(nvec, logits, masks, actions):
    """The gradients of log pi(action) and of the entropy with respect to the logits, by hand (float64): within a
    component, d log p_a / d z_j = [j = a] - p_j and d H / d z_j = -p_j (log p_j + H) for a valid j; 0 for an invalid
    one (its logit is replaced, so it reaches nothing)."""
    d_logprob, d_entropy = np.zeros(logits.shape), np.zeros(logits.shape)
    for c, (start, n) in enumerate(components(nvec)):
        p = masked_softmax(logits[:, start : start + n], masks[:, start : start + n])
        log_p = np.log(np.where(p > 0, p, 1.0))
        entropy = -(p * log_p).sum(axis=1, keepdims=True)
        chosen = np.eye(n)[actions[:, c].numpy()]
        d_logprob[:, start : start + n] = chosen - p
        d_entropy[:, start : start + n] = -p * (log_p + entropy)
    return d_logprob, d_entropy


def gradient_faults(nvec, logits, masks, actions, grad_logprob, grad_entropy):
    """Given the gradients of the summed log-probabilities and of the summed entropies with respect to the logits:
    (the largest one at an invalid position, the largest difference from hand_gradients at a valid one)."""
    hand_logprob, hand_entropy = hand_gradients(nvec, logits, masks, actions)
    invalid, valid = ~masks.numpy(), masks.numpy()
    at_invalid = max(float(np.abs(g.numpy()[invalid]).max(initial=0.0)) for g in (grad_logprob, grad_entropy))
    errors = [
        np.abs(g.double().numpy() - h)[valid].max() for g, h in ((grad_logprob, hand_logprob), (grad_entropy, hand_entropy))
    ]
    return at_invalid, float(max(errors))


# ---------------------------------------------------------------------------------------------------------------------
# 1. sampling


def test_invalid_actions_are_never_drawn_discrete():
    """20,000 draws for each of Discrete(4)'s 15 non-empty masks on random logits: no draw is of an invalid action (so
    a mask of one valid action gives that action every time), and each valid action comes as often as the softmax over
    the valid logits says, within 5 standard deviations. Fails where the mask is ignored or applied to the wrong
    actions, or where sampling follows other probabilities (uniform over the valid actions, say)."""
    logits = torch.randn(15, 4, generator=torch.Generator().manual_seed(3)) * 2
    masks = nonempty_masks(4)
    assert masks.sum(1).eq(1).sum() == 4  # the four masks of one valid action are among them
    invalid, worst = sampling_faults(agent_policy(DISCRETE), DISCRETE, logits, masks, draws=20_000)
    assert invalid == 0
    assert worst < 5


def test_invalid_actions_are_never_drawn_multidiscrete():
    """MultiDiscrete([3, 4, 2]): 315 rows that hold every combination of the components' non-empty masks, 1,000 draws
    each (at least 21,000 per mask of a component): no component ever draws one of its invalid choices, and each
    component's valid choices come as its own masked softmax says. Fails where a component is masked with another's
    columns, or not at all."""
    logits = torch.randn(315, sum(MULTI), generator=torch.Generator().manual_seed(4)) * 2
    invalid, worst = sampling_faults(agent_policy(MULTI), MULTI, logits, multi_masks(MULTI), draws=1_000)
    assert invalid == 0
    assert worst < 5


# ---------------------------------------------------------------------------------------------------------------------
# 2. and 4. log-probability and entropy by hand


@pytest.mark.parametrize("case", CASES)
def test_log_probability_and_entropy_are_the_masked_softmax_by_hand(case):
    """Discrete(4): every non-empty mask with each valid action; MultiDiscrete([3, 4, 2]): every combination of the
    components' masks with a random valid action. The log-probability is log of the softmax over the valid logits
    only, and the entropy -sum p log p over the valid choices, each summed over the components for a MultiDiscrete
    (D2), computed here in float64 from the logits. Fails where invalid logits keep some probability, where the
    normalization includes them, or where the components are combined other than by their sum (a mean, one component
    alone)."""
    nvec, make_case = CASES[case]
    logits, masks, actions = make_case()
    logprob_error, entropy_error = value_errors(agent_policy(nvec), nvec, logits, masks, actions)
    assert logprob_error < 1e-5
    assert entropy_error < 1e-5


def test_one_valid_action_has_log_probability_and_entropy_exactly_zero():
    """A component whose mask allows one choice is certain: its log-probability is 0 and its entropy 0, exactly (-1e8
    against logits of order 1 leaves exp(-1e8 - z) = 0 in float32, and log-sum-exp of the one valid logit is that
    logit), even when the invalid logits are far larger than the valid one. For MultiDiscrete([3, 4, 2]) with each
    component's mask one choice, the sum over the components is 0 too. Fails where any probability is left on an
    invalid action."""
    logits = torch.tensor([[-2.0, 30.0, 30.0, 30.0], [30.0, 30.0, 30.0, 0.5]])
    masks = torch.tensor([[True, False, False, False], [False, False, False, True]])
    _, logprob, entropy = agent_policy(DISCRETE)(logits, masks, torch.tensor([[0], [3]]))
    assert logprob.tolist() == [0.0, 0.0] and entropy.tolist() == [0.0, 0.0]
    one_each = torch.zeros(1, sum(MULTI), dtype=torch.bool)
    one_each[0, [2, 3 + 1, 7 + 0]] = True  # component 0's choice 2, component 1's choice 1, component 2's choice 0
    logits = torch.randn(1, sum(MULTI), generator=torch.Generator().manual_seed(5)) * 5
    action, logprob, entropy = agent_policy(MULTI)(logits, one_each)
    assert action.tolist() == [[2, 1, 0]] and logprob.tolist() == [0.0] and entropy.tolist() == [0.0]


# ---------------------------------------------------------------------------------------------------------------------
# 3. gradients


def test_invalid_logits_get_no_gradient():
    """The agent's own actor network (its head scaled up so that the logits are of order 1, not G9's 0.01) on random
    observations, MultiDiscrete([4, 3]) with every combination of the components' non-empty masks and the agent's own
    sampled actions: the gradient of the summed log-probabilities, and that of the summed entropies, with respect to
    the actor's output (kept by a forward hook) is exactly 0 at every invalid position, and at the valid ones equals
    the hand formulas [j = a] - p_j and -p_j (log p_j + H). Fails where an invalid logit is still an input of the
    distribution (left unmasked, or masked by adding a finite penalty that leaves it some probability)."""
    nvec = [4, 3]
    envs = SimpleNamespace(
        single_observation_space=Box(-np.inf, np.inf, (6,), np.float32), single_action_space=MultiDiscrete(nvec)
    )
    torch.manual_seed(0)
    agent = masked.Agent(envs, masked.Args())
    with torch.no_grad():
        agent.actor.weight.mul_(100)
    outputs = []

    def keep_output(module, inputs, output):
        output.retain_grad()
        outputs.append(output)

    agent.actor.register_forward_hook(keep_output)
    masks = multi_masks(nvec)
    obs = torch.randn(len(masks), 6, generator=torch.Generator().manual_seed(6))
    actions, logprob, _, _ = agent.get_action_and_value(obs, masks)
    logprob.sum().backward()
    _, _, entropy, _ = agent.get_action_and_value(obs, masks, actions)
    entropy.sum().backward()
    (logits, for_logprob), (_, for_entropy) = [(out.detach(), out.grad) for out in outputs]
    assert logits.std() > 0.3  # logits of order 1: the probabilities, and so the gradients, differ from row to row
    at_invalid, error = gradient_faults(nvec, logits, masks, actions, for_logprob, for_entropy)
    assert at_invalid == 0.0
    assert error < 1e-5


# ---------------------------------------------------------------------------------------------------------------------
# 5. sb3-contrib


@needs("sb3_contrib")
@pytest.mark.parametrize("case", CASES)
def test_the_same_numbers_as_sb3_contrib(case):
    """sb3-contrib's MaskableCategorical (Discrete(4), every non-empty mask with each valid action) and
    MaskableMultiCategoricalDistribution (MultiDiscrete([3, 4, 2]), every combination of masks) on the same logits and
    masks: the same log-probabilities of the given actions and the same entropies, to float32 rounding (sb3-contrib
    also puts -1e8 at invalid logits, and leaves their terms out of the entropy). Fails where the script's masking
    differs from the reference implementation of invalid-action masking."""
    nvec, make_case = CASES[case]
    logits, masks, actions = make_case()
    logprob_error, entropy_error = sb3_errors(agent_policy(nvec), nvec, logits, masks, actions)
    assert logprob_error < 1e-5
    assert entropy_error < 1e-5


# ---------------------------------------------------------------------------------------------------------------------
# 6. the control


@needs("sb3_contrib")
def test_a_policy_that_ignores_the_mask_is_caught_by_every_check():
    """The checks above, run on a plain categorical over all logits (the script without D1): it draws invalid actions,
    its log-probabilities and entropies are far from the hand-computed ones and from sb3-contrib's, and its gradient at
    invalid logits is not 0. So each check can fail, and would catch a script that forgot the mask."""
    control = unmasked_policy(DISCRETE)
    invalid, worst = sampling_faults(
        control, DISCRETE, torch.randn(15, 4, generator=torch.Generator().manual_seed(3)) * 2, nonempty_masks(4), draws=2_000
    )
    assert invalid > 1000 and worst > 5
    for case, (nvec, make_case) in CASES.items():
        control = unmasked_policy(nvec)
        logits, masks, actions = make_case()
        assert min(value_errors(control, nvec, logits, masks, actions)) > 0.1, case
        assert min(sb3_errors(control, nvec, logits, masks, actions)) > 0.1, case
        leaf = logits.clone().requires_grad_()
        _, logprob, entropy = control(leaf, masks, actions)
        grad_logprob = torch.autograd.grad(logprob.sum(), leaf, retain_graph=True)[0]
        grad_entropy = torch.autograd.grad(entropy.sum(), leaf)[0]
        at_invalid, _ = gradient_faults(nvec, logits, masks, actions, grad_logprob, grad_entropy)
        assert at_invalid > 0.1, case


# ---------------------------------------------------------------------------------------------------------------------
# 7. a mask that allows nothing


def test_a_mask_that_allows_nothing_draws_uniformly_and_scores_zero():
    """A component whose mask allows no choice (all its logits -1e8): no error, no NaN, and its draws are uniform over
    the component, as the script's comment says (20,000 draws, each choice within 5 standard deviations of 5,000).
    Its log-probability and entropy, though, are not a uniform distribution's -log n and log n but 0: in float32,
    log-sum-exp of n copies of -1e8 is -1e8 + log n, which rounds back to -1e8 (float32's spacing there is 8), so every
    normalized logit is 0 (sb3-contrib's MaskableCategorical gives the same 0 and 0). For PPO that is harmless (the
    rollout and the update score such a component with the same mask: 0 both times, ratio 1, no gradient), and
    EnvpoolTasks never hands such a mask on (the test below). For MultiDiscrete([3, 4, 2]) with component 1 masked out
    whole, that component draws uniformly and adds 0, while the others keep their masked softmax (by hand). Fails where
    such a mask raises, gives NaN, or draws from some other distribution (the raw logits', say)."""
    assert np.float32(-1e8) + np.float32(np.log(4)) == np.float32(-1e8)  # why the scores are 0, by hand
    logits = torch.tensor([[5.0, -1.0, 0.0, 2.0]])  # a raw softmax would draw choice 0 most of the time
    nothing = torch.zeros(1, 4, dtype=torch.bool)
    _, logprob, entropy = agent_policy(DISCRETE)(logits.expand(4, 4), nothing.expand(4, 4), torch.arange(4)[:, None])
    assert logprob.tolist() == [0.0] * 4 and entropy.tolist() == [0.0] * 4
    torch.manual_seed(7)
    draws, _, _ = agent_policy(DISCRETE)(logits.expand(20_000, 4), nothing.expand(20_000, 4))
    counts = np.bincount(draws[:, 0].numpy(), minlength=4)
    assert np.abs(counts - 5000).max() < 5 * np.sqrt(20_000 * 0.25 * 0.75)

    logits = torch.randn(1, sum(MULTI), generator=torch.Generator().manual_seed(8)) * 3
    mask = torch.tensor([[True, False, True] + [False] * 4 + [True, True]])
    action = torch.tensor([[2, 3, 1]])
    _, logprob, entropy = agent_policy(MULTI)(logits, mask, action)
    columns, others = [0, 1, 2, 7, 8], [0, 2]  # the components with valid choices, by hand; component 1 adds 0
    hand_logprob, hand_entropy = by_hand([3, 2], logits[:, columns], mask[:, columns], action[:, others])
    assert np.isfinite(logprob.item()) and np.isfinite(entropy.item())
    torch.testing.assert_close(logprob.double(), torch.tensor(hand_logprob), rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy.double(), torch.tensor(hand_entropy), rtol=0, atol=1e-5)
    torch.manual_seed(9)
    draws, _, _ = agent_policy(MULTI)(logits.expand(20_000, -1), mask.expand(20_000, -1))
    counts = np.bincount(draws[:, 1].numpy(), minlength=4)
    assert np.abs(counts - 5000).max() < 5 * np.sqrt(20_000 * 0.25 * 0.75)
    assert set(draws[:, 0].tolist()) == {0, 2}  # the other components still mask


@needs("envpool")
@pytest.mark.parametrize("env_id", ["Knapsack-v1", "TSP-v1"])
def test_the_rollout_never_meets_a_mask_that_allows_nothing(env_id):
    """8 envs of an envpool task x 200 steps through make_envs and observe, each step's actions the agent's own from
    the mask it is given, as train() takes them: every mask allows at least one action, and every action drawn is
    valid, while episodes do end (at least 8 of them). The last observation of each ended episode (in
    infos["final_obs"]), which envpool would hand on as the next step's, does allow nothing (at least once): so the
    check would catch a backend that let the agent see it, where the uniform fallback would pick a meaningless action
    that envpool then ignores."""
    args = masked.Args(env_id=env_id, num_envs=8, seed=3)
    envs = masked.make_envs(args)
    torch.manual_seed(3)
    agent = masked.Agent(envs, args)
    obs, _ = envs.reset(seed=args.seed)
    episodes, empty_last = 0, 0
    try:
        for _ in range(200):
            flat, mask = masked.observe(envs, obs, agent.nvec, True)
            assert mask.shape == (8, agent.nvec[0]) and mask.any(axis=1).all()
            with torch.no_grad():
                action, _, _, _ = agent.get_action_and_value(torch.as_tensor(flat), torch.as_tensor(mask))
            assert mask[np.arange(8), action[:, 0].numpy()].all()
            obs, _, terminations, truncations, infos = envs.step(action.numpy().reshape(envs.action_space.shape))
            ended = terminations | truncations
            episodes += int(ended.sum())
            if ended.any():
                empty_last += sum(not last["action_mask"].any() for last in infos["final_obs"][infos["_final_obs"]])
    finally:
        envs.close()
    assert episodes >= 8
    assert empty_last > 0


# ---------------------------------------------------------------------------------------------------------------------
# 8. observe()

ENVPOOL_NVEC = {"Knapsack-v1": [50], "TSP-v1": [20], "JobShop-v0": [21] * 10, "Tetris-v0": [4, 10]}  # from their specs


def valid_random_actions(obs, nvec, rng):
    """A valid action for each env, drawn uniformly by numpy from the env's own mask: per component where the mask has
    a row per component, a valid pair of the joint mask for Tetris' (4, 10)."""
    actions = []
    for mask in obs["action_mask"]:
        if mask.size != sum(nvec):  # Tetris: one joint mask over rotation x column
            actions.append(np.argwhere(mask)[rng.integers(len(np.argwhere(mask)))])
        else:
            rows = mask.reshape(len(nvec), -1)
            actions.append([rng.choice(np.flatnonzero(row)) if row.any() else 0 for row in rows])
    return np.array(actions).reshape((len(actions),) + (() if len(nvec) == 1 else (len(nvec),)))


@needs("envpool")
@pytest.mark.parametrize("env_id", ENVPOOL_NVEC)
def test_observe_flattens_each_env_as_gymnasium_does(env_id):
    """4 envs of each envpool task, at reset and after 5 steps of valid random actions: observe's flat rows are float32
    and equal gymnasium's own gym.spaces.flatten of each env's dict without its action mask (taken env by env here, not
    through the script's batch_space and iterate); its mask is the env's as booleans, reduced per component by a
    hand-written any() for Tetris' joint (4, 10) mask; the agent's nvec is the task's (JobShop's 10 machines x 21
    choices, Tetris' 4 rotations x 10 columns). Fails where an entry is dropped, reordered against the space, or
    flattened otherwise (TSP's Discrete position one-hot), or where the mask is taken from another key."""
    args = masked.Args(env_id=env_id, num_envs=4)
    envs = masked.make_envs(args)
    nvec = ENVPOOL_NVEC[env_id]
    assert masked.Agent(envs, args).nvec == nvec
    space = envs.single_observation_space
    without_mask = Dict({key: sub for key, sub in space.items() if key != "action_mask"})
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=1)
    try:
        for step in range(6):
            flat, mask = masked.observe(envs, obs, nvec, True)
            envs_obs = [{key: obs[key][i] for key in without_mask} for i in range(4)]
            expected = np.stack([gym.spaces.flatten(without_mask, one) for one in envs_obs]).astype(np.float32)
            assert flat.dtype == np.float32 and flat.shape == (4, gym.spaces.flatdim(without_mask))
            np.testing.assert_array_equal(flat, expected)
            joint = np.asarray(obs["action_mask"], dtype=bool)
            if env_id == "Tetris-v0":
                expected_mask = np.concatenate([joint.any(axis=2), joint.any(axis=1)], axis=1)
            else:
                expected_mask = joint.reshape(4, -1)
            assert mask.dtype == bool
            np.testing.assert_array_equal(mask, expected_mask)
            if step < 5:
                obs, _, _, _, _ = envs.step(valid_random_actions(obs, nvec, rng))
    finally:
        envs.close()


@needs("envpool")
def test_observe_lays_out_knapsack_and_tsp_by_hand():
    """The flat rows of Knapsack-v1 and TSP-v1 written out by hand, without gymnasium's flatten: the keys but the mask
    in sorted order (gymnasium's Dict sorts them), a Box or MultiBinary entry as its numbers, TSP's Discrete(21,
    start=-1) position as a one-hot of 21 at position + 1. Fails where the layout of what the agent takes changes."""
    for env_id, hand in [
        ("Knapsack-v1", lambda o, i: [o["packed_items"][i], o["values"][i], o["weights"][i]]),
        ("TSP-v1", lambda o, i: [o["coordinates"][i].ravel(), np.eye(21)[o["position"][i] + 1], o["trajectory"][i]]),
    ]:
        envs = masked.make_envs(masked.Args(env_id=env_id, num_envs=2))
        try:
            obs, _ = envs.reset(seed=2)
            obs, _, _, _, _ = envs.step(valid_random_actions(obs, ENVPOOL_NVEC[env_id], np.random.default_rng(1)))
            flat, _ = masked.observe(envs, obs, ENVPOOL_NVEC[env_id], True)
        finally:
            envs.close()
        expected = np.stack([np.concatenate([np.asarray(part, dtype=np.float32) for part in hand(obs, i)]) for i in range(2)])
        np.testing.assert_array_equal(flat, expected)
        if env_id == "TSP-v1":
            assert (obs["position"] >= 0).all()  # after a step each env is at a city, not at the start's -1


TETRIS_LIKE = Dict(
    {
        "grid": Box(0, 1, (10, 10), np.int32),
        "tetromino": Box(0, 1, (4, 4), np.int32),
        "action_mask": MultiBinary((4, 10)),
        "step_count": Discrete(400),
    }
)


def test_a_joint_mask_is_reduced_per_component_by_any():
    """Tetris-v0's observation space (written out here) with hand-made joint (4 rotations, 10 columns) masks for two
    envs: env 0 allows columns 0-3 with rotation 0, 2-5 with rotation 1, none with rotation 2, 9 with rotation 3; env 1
    only (rotation 2, column 7). As D2 samples the components independently, each keeps the choices some joint action
    has: the per-component masks below are written by hand. Fails where the axes are swapped, the mask is read as the
    first 14 entries, or all() is used in place of any()."""
    joint = np.zeros((2, 4, 10), dtype=bool)
    joint[0, 0, 0:4] = joint[0, 1, 2:6] = joint[0, 3, 9] = True
    joint[1, 2, 7] = True
    obs = {
        "grid": np.zeros((2, 10, 10), np.int32),
        "tetromino": np.zeros((2, 4, 4), np.int32),
        "step_count": np.array([0, 5]),
        "action_mask": joint,
    }
    T, F_ = True, False
    expected = np.array(
        [
            [T, T, F_, T] + [T, T, T, T, T, T, F_, F_, F_, T],
            [F_, F_, T, F_] + [F_, F_, F_, F_, F_, F_, F_, T, F_, F_],
        ]
    )
    flat, mask = masked.observe(SimpleNamespace(single_observation_space=TETRIS_LIKE), obs, [4, 10], True)
    np.testing.assert_array_equal(mask, expected)
    assert flat.shape == (2, 100 + 400 + 16)  # grid, the step count one-hot, the tetromino: the mask is not an input


def test_a_gymnasium_multibinary_mask_reaches_the_agent_as_booleans():
    """A gymnasium env's action_mask, as its MultiBinary space makes it, is int8 (envpool's tasks give booleans): the
    agent must get it as booleans, and get_action_and_value must draw only the valid actions. Handed on as int8,
    torch.where(mask, ...) raises "where expected condition to be a boolean tensor" (a run on such an env stopped with a
    traceback at its first step before observe converted it)."""
    space = Dict({"x": Box(-1, 1, (2,), np.float32), "action_mask": MultiBinary(3)})
    obs = {
        "x": np.zeros((2, 2), np.float32),
        "action_mask": np.array([[1, 0, 1], [0, 1, 0]], dtype=space["action_mask"].dtype),
    }
    envs = SimpleNamespace(single_observation_space=space, single_action_space=Discrete(3))
    flat, mask = masked.observe(envs, obs, [3], True)
    torch.manual_seed(0)
    action, _, _, _ = masked.Agent(envs, masked.Args()).get_action_and_value(torch.as_tensor(flat), torch.as_tensor(mask))
    np.testing.assert_array_equal(mask, [[True, False, True], [False, True, False]])
    assert action[1, 0] == 1


# ---------------------------------------------------------------------------------------------------------------------
# 9. bad input: one line, nothing written

PROBE_MODULE = "maskprobe_envs_d3seq"  # a module name no user would have
PROBE_ENVS = '''"""A tiny env whose dict observation holds an entry gymnasium's flatten cannot take (a Sequence, of no fixed
size) beside its action mask."""

import gymnasium as gym
import numpy as np


class NotesEnv(gym.Env):
    def __init__(self):
        self.observation_space = gym.spaces.Dict(
            {"notes": gym.spaces.Sequence(gym.spaces.Discrete(5)), "action_mask": gym.spaces.MultiBinary(3)}
        )
        self.action_space = gym.spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return {"notes": (1, 2), "action_mask": np.array([1, 0, 1], np.int8)}, {}

    def step(self, action):
        return {"notes": (3,), "action_mask": np.array([1, 1, 0], np.int8)}, 0.0, True, False, {}


gym.register(id="MaskprobeNotes-v0", entry_point=NotesEnv)


class MaskEnv(gym.Env):
    """Episodes of 8 steps, a reward of 1 each, an observation of two zeros beside an action mask under `key` (its
    space `mask_space`, MultiBinary of its shape unless given): `mask` at every step where given, else one valid action,
    the step's count modulo n. strict: an invalid action raises, as an env that enforces its mask does."""

    def __init__(self, n=3, mask=None, mask_space=None, key="action_mask", action_space=None, strict=False):
        self.n, self.fixed, self.key, self.strict, self.t = n, mask, key, strict, 0
        self.action_space = gym.spaces.Discrete(n) if action_space is None else action_space
        mask_space = gym.spaces.MultiBinary(np.shape(self.valid())) if mask_space is None else mask_space
        self.observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,), np.float32), key: mask_space})

    def valid(self):
        return np.array(self.fixed) if self.fixed is not None else np.eye(self.n, dtype=np.int8)[self.t % self.n]

    def observe(self):
        return {"x": np.zeros(2, np.float32), self.key: self.valid()}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observe(), {}

    def step(self, action):
        if self.strict and not self.valid()[action]:
            raise ValueError(f"invalid action {action} at step {self.t}")
        self.t += 1
        return self.observe(), 1.0, self.t == 8, False, {}


class MethodMaskEnv(MaskEnv):
    """MaskEnv's vector observation alone, its mask from an action_masks() method (sb3-contrib's convention)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_space = self.observation_space["x"]

    def action_masks(self):
        return [bool(flag) for flag in self.valid()]

    def observe(self):
        return super().observe()["x"]


D, MD, MB = gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary
for name, kwargs in {
    "Nothing": dict(mask=[0, 0, 0]),
    "Start": dict(action_space=D(3, start=1)),
    "MultiStart": dict(n=5, action_space=MD([2, 3], start=[1, 0])),
    "TwoD": dict(n=9, action_space=MD([[2, 3], [2, 2]])),
    "Long": dict(n=4, action_space=D(3)),
    "Short": dict(n=2, action_space=D(3)),
    "Float": dict(mask=np.array([0.3, np.nan, 1.0], np.float32), mask_space=gym.spaces.Box(0, 1, (3,), np.float32)),
    "Key": dict(key="mask"),
    "Joint": dict(action_space=MD([2, 3]), mask=[[1, 0, 0], [0, 0, 1]]),
}.items():
    gym.register(id=f"Maskprobe{name}-v0", entry_point=MaskEnv, kwargs=kwargs)
gym.register(id="MaskprobeMethod-v0", entry_point=MethodMaskEnv, kwargs=dict(strict=True))
'''

BAD_INPUTS = [  # (flags, what the one line must name)
    (["--env-id", "Pendulum-v1"], ["Box action space", "ppo_continuous_action.py"]),
    (["--env-id", "CartPole-v1"], ["no action mask", "'action_mask'", "action_masks()", "--no-mask-actions", "ppo.py"]),
    (
        ["--env-id", f"{PROBE_MODULE}:MaskprobeNotes-v0", "--vector-env", "sync"],
        ["'notes'", "Sequence", "cannot be flattened"],
    ),
    (["--env-id", "Knapsack-v1", "--vector-env", "sync"], ["add --vector-env envpool"]),
    # one's own env (the default backend follows the env id: sync): its actions and its mask as the script reads them
    (["--env-id", f"{PROBE_MODULE}:MaskprobeStart-v0"], ["Discrete(3, start=1)", "start 0"]),
    (["--env-id", f"{PROBE_MODULE}:MaskprobeMultiStart-v0"], ["MultiDiscrete([2 3], start=[1 0])", "start 0"]),
    (["--env-id", f"{PROBE_MODULE}:MaskprobeTwoD-v0"], ["2-D", "MultiDiscrete([2, 3, 2, 2])"]),
    (["--env-id", f"{PROBE_MODULE}:MaskprobeLong-v0"], ["4 entries", "Discrete(3)", "3 flags"]),
    (["--env-id", f"{PROBE_MODULE}:MaskprobeShort-v0"], ["2 entries", "Discrete(3)", "3 flags"]),
    (["--env-id", f"{PROBE_MODULE}:MaskprobeFloat-v0"], ["float32", "0.3", "nan", "booleans"]),
    (["--env-id", f"{PROBE_MODULE}:MaskprobeKey-v0"], ["'mask'", "'action_mask'"]),
]


@pytest.fixture
def probe_folder(tmp_path):
    """tmp_path holding PROBE_ENVS' module; afterwards it and its env ids are forgotten by this process (a case run here
    imports it), so that each case imports its own as a new process would."""
    forget = lambda: forget_modules([PROBE_MODULE], ["Maskprobe*"])  # noqa: E731
    forget()
    (tmp_path / f"{PROBE_MODULE}.py").write_text(PROBE_ENVS)
    yield tmp_path
    forget()


def assert_one_line_naming(code, stderr, named, folder):
    assert code != 0, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert all(part in lines[0] for part in named), lines[0]
    assert not (folder / "runs").exists()


@pytest.mark.parametrize("flags,named", BAD_INPUTS, ids=[" ".join(flags) for flags, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_writes_nothing(probe_folder, monkeypatch, capfd, flags, named):
    """ppo_masked.py run as a user would, in a fresh folder with a module of one's own envs on PYTHONPATH: a Box action
    space (names the continuous script), an env without an action mask under --mask-actions (names --no-mask-actions
    and ppo.py, and the two ways to give a mask; CartPole-v1 without --vector-env, whose default follows the env id), a
    dict observation with an entry the flattening cannot take (a Sequence; names the entry), an envpool task with
    --vector-env sync (names --vector-env envpool); and MaskEnv's faults, each against the contract written by hand:
    actions that start at 1 (Discrete, MultiDiscrete), a 2-D MultiDiscrete (names its flat form), a mask one entry too
    long or too short (names what it gave and the size wanted), a float mask of 0.3 and NaN, the mask under the key
    'mask' (names 'action_mask'). Each exits non-zero with one line "error: ..." on stderr naming the fix, and leaves no
    runs/ folder. Fails where a check is missing (the run starts, or dies later with a traceback) or its message does
    not say what to do."""
    pytest.importorskip("envpool")  # the env id check asks envpool first; without it Knapsack-v1 is no task
    folder = probe_folder
    code, stderr = run_main_here("ppo_masked", *flags, cwd=folder, monkeypatch=monkeypatch, capfd=capfd, path_first=folder)
    assert_one_line_naming(code, stderr, named, folder)


# two of BAD_INPUTS as a user runs them, in a new process with the module on PYTHONPATH (the others run in this
# process, through the script's __main__ block: run_main_here): the one line reaches the shell, no traceback
END_TO_END = [case for case in BAD_INPUTS if case[0][1] in ("CartPole-v1", f"{PROBE_MODULE}:MaskprobeFloat-v0")]


@pytest.mark.slow
@pytest.mark.parametrize("flags,named", END_TO_END, ids=[" ".join(flags) for flags, _ in END_TO_END])
def test_bad_input_reaches_the_shell_as_one_line(tmp_path, flags, named):
    pytest.importorskip("envpool")
    (tmp_path / f"{PROBE_MODULE}.py").write_text(PROBE_ENVS)
    result = run_script("ppo_masked", *flags, cwd=tmp_path, timeout=300, env={"PYTHONPATH": pythonpath_first(tmp_path)})
    assert len(END_TO_END) == 2
    assert_one_line_naming(result.returncode, result.stderr, named, tmp_path)


TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--total-timesteps", "64", "--no-compile",
        "--no-cuda", "--no-save-model"]  # fmt: skip


def run_probe(tmp_path, env_name, *flags):
    """ppo_masked.py on one of PROBE_ENVS' envs with TINY's budget (4 updates of 32 steps), the default backend."""
    (tmp_path / f"{PROBE_MODULE}.py").write_text(PROBE_ENVS)
    flags = ["--env-id", f"{PROBE_MODULE}:{env_name}", *TINY, *flags]
    return run_script("ppo_masked", *flags, cwd=tmp_path, timeout=300, env={"PYTHONPATH": pythonpath_first(tmp_path)})


@pytest.mark.slow
def test_a_mask_from_the_action_masks_method_is_enforced(tmp_path):
    """sb3-contrib's convention (MaskablePPO calls env.action_masks(), a flat list of one flag per action): an env with
    vector observations that gives its mask so, and raises at an invalid action, trains through 64 steps with exit 0,
    its 8-step episodes all complete (each step's one valid action, the step count modulo 3, by the env's own rule).
    Without the mask an action is invalid with probability 2/3 a step, so the run would raise within a few steps.
    Fails where the method is not read ("gives no action mask"), or read a step late or early."""
    result = run_probe(tmp_path, "MaskprobeMethod-v0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "warning" not in result.stderr, result.stderr[-3000:]
    assert (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_mask_that_allows_nothing_is_reported_once(tmp_path):
    """An env whose mask allows no action at any step (MaskEnv's [0, 0, 0]): the run goes on (the draw is uniform and
    the env's rule decides, D1) but says so on stderr once, in one line naming the env (0, the first of the first
    update's first step), the update (1) and the step (2: both envs' first step), the step counting as the progress
    lines do. Fails where it trains on to the end without a word, or says it at every step."""
    result = run_probe(tmp_path, "MaskprobeNothing-v0")
    assert result.returncode == 0, result.stderr[-3000:]
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1, result.stderr[-3000:]
    assert "env 0's action mask allowed no action at step 2 (update 1)" in warned[0], warned[0]


@pytest.mark.slow
def test_a_joint_mask_is_said_to_be_enforced_per_component(tmp_path):
    """A MultiDiscrete([2, 3]) env whose action_mask is one joint 2 x 3 grid (allowing (0, 0) and (1, 2) only): D2
    draws each component on its own, so the run can send (0, 2) or (1, 0), which the grid forbids. The run trains, and
    says so once before it starts: a note naming the grid and that the mask is enforced per component. Fails where a
    joint mask is taken without a word."""
    result = run_probe(tmp_path, "MaskprobeJoint-v0")
    assert result.returncode == 0, result.stderr[-3000:]
    noted = [line for line in result.stderr.splitlines() if "per component" in line]
    assert len(noted) == 1 and noted[0].startswith("note:") and "2 x 3" in noted[0], result.stderr[-3000:]


@needs("envpool")
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_checking_an_env_id_prints_no_warning(env_id):
    """Every script's env id check asks envpool_task whether the id is one of envpool's masked tasks; for a gymnasium id
    that envpool also knows, the answer (False) must come without a warning, or a one-line error comes with gymnasium's
    "Box high's precision lowered by casting to float32" lines above it."""
    from ppo_utils.flag_checks import envpool_task

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not envpool_task(env_id)
    assert not caught, [str(w.message) for w in caught]
