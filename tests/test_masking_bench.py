"""benchmark/masking.py, the masking benchmark's tool: its counts of masked choices, its random policies, its VecEnv
for MaskablePPO (the same observations and masks as ppo_masked.py's, episodes recorded), and, on a tiny budget,
MaskablePPO's run and the masked agent played without its mask."""

import json

import masking  # benchmark/masking.py (pyproject.toml puts benchmark/ on pytest's path)
import numpy as np
import pytest
import torch
from conftest import needs

import ppo_masked
from ppo_utils.envpool_backend import EnvpoolTasks


def test_action_shares_and_invalid_on_a_hand_mask():
    nvec = [3, 2]
    mask = np.array([[1, 0, 0, 1, 1], [1, 1, 1, 0, 1]], dtype=bool)
    masked, joint = masking.action_shares(mask, nvec)
    assert np.allclose(masked, [2 / 5, 1 / 5])
    assert np.allclose(joint, [1 - (1 / 3) * 1, 1 - 1 * (1 / 2)])  # a uniform action's chance to be invalid
    actions = np.array([[0, 1], [2, 0]])
    assert invalid_list(actions, mask, nvec) == [False, True]  # env 1's second component picks its masked choice 0
    assert invalid_list(np.array([[1, 0], [0, 1]]), mask, nvec) == [True, False]


def invalid_list(actions, mask, nvec):
    return masking.invalid(actions, mask, nvec).tolist()


def test_random_valid_picks_only_valid_choices_uniformly():
    rng, nvec = np.random.default_rng(0), [4, 3]
    mask = np.array([[0, 1, 0, 1, 1, 1, 1]], dtype=bool)
    choose = masking.random_choice("valid", rng)
    picks = np.concatenate([choose(None, mask, nvec) for _ in range(4000)])
    assert set(picks[:, 0]) == {1, 3} and set(picks[:, 1]) == {0, 1, 2}
    assert abs(np.mean(picks[:, 0] == 1) - 0.5) < 0.03 and abs(np.mean(picks[:, 1] == 2) - 1 / 3) < 0.03
    picks = np.concatenate([masking.random_choice("all", rng)(None, mask, nvec) for _ in range(4000)])
    assert set(picks[:, 0]) == {0, 1, 2, 3}


@needs("envpool")
@pytest.mark.parametrize("env_id", ["TSP-v1", "JobShop-v0"])
def test_play_random_valid_never_ends_on_an_invalid_action(env_id):
    rows = masking.play(env_id, 1, 3, masking.random_choice("valid", np.random.default_rng(1)))
    assert len(rows) == 3 and not any(row["ended_invalid"] for row in rows)
    rows = masking.play(env_id, 1, 3, masking.random_choice("all", np.random.default_rng(1)))
    assert all(0 <= row["masked_share"] <= 1 and 0 <= row["joint_invalid"] <= 1 for row in rows)


@needs("envpool", "sb3_contrib")
def test_vec_env_gives_ours_observations_masks_and_episodes():
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported

    env = masking.masked_vec_env("JobShop-v0", 2, 5)
    ours = EnvpoolTasks("JobShop-v0", num_envs=2, seed=5)
    nvec = masking.nvec_of(ours.single_action_space)
    obs, (expected, expected_mask) = env.reset(), ppo_masked.observe(ours, ours.reset(seed=5)[0], nvec, True)
    assert is_masking_supported(env) and np.array_equal(obs, expected)
    assert get_action_masks(env).shape == (2, sum(nvec)) and np.array_equal(get_action_masks(env), expected_mask)
    rng, episodes = np.random.default_rng(0), []
    for _ in range(40):
        actions = masking.random_choice("valid", rng)(obs, get_action_masks(env), nvec)
        env.step_async(actions)
        obs, rewards, dones, infos = env.step_wait()
        expected = ours.step(actions)
        assert np.array_equal(obs, ppo_masked.observe(ours, expected[0], nvec, True)[0])
        assert np.array_equal(rewards, expected[1])
        for i in np.flatnonzero(dones):
            assert infos[i]["episode"]["r"] == expected[4]["final_info"]["episode"]["r"][i]
            assert infos[i]["terminal_observation"].shape == obs.shape[1:]
            episodes.append(infos[i]["episode"])
    assert episodes and all(episode["r"] < 0 for episode in episodes)  # JobShop: -1 per step
    env.close()
    ours.close()


@pytest.mark.slow
@needs("envpool", "sb3_contrib")
def test_maskable_ppo_run_and_the_masked_agent_without_its_mask(tmp_path, monkeypatch):
    from report_data import read_run

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "maskable"
    options = masking.peer_parser().parse_args(["--num-envs", "2", "--num-steps", "64"])  # ours' flags reach SB3
    masking.train_maskable("TSP-v1", 1, 1024, options, folder=str(folder / "runs"))
    episodes, stats, sps, last_step, iteration = read_run(folder)
    assert last_step == 1024 and iteration == 2 * 64 and len(episodes) > 0 and sps > 0
    assert episodes["episodic_return"].lt(0).all() and episodes["episodic_length"].le(20).all()  # TSP: 20 cities
    assert {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"} <= set(stats)

    run = tmp_path / "runs" / "TSP-v1" / "default" / "seed1"  # benchmark/run.py's layout
    run.mkdir(parents=True)
    monkeypatch.chdir(run)
    args = ppo_masked.Args(env_id="TSP-v1", total_timesteps=1024, compile=False, cuda=False)
    ppo_masked.train(args)
    (run / "done.json").write_text(json.dumps({"returncode": 0}))
    rows = masking.unmasked_scores(tmp_path / "runs", "default", 3, 1000)
    assert len(rows) == 6 and {row["mode"] for row in rows} == {"masked", "unmasked"}
    assert not any(row["ended_invalid"] for row in rows if row["mode"] == "masked")
    torch.set_num_threads(1)


@needs("envpool")
def test_masking_tables_from_data(tmp_path):
    """The README's tables come from the data files alone: a per-seed mean of the last episodes, then over seeds."""
    import pandas as pd
    from report_data import Tables, write_data

    rows = []
    for variant, offset in [("default", 0.0), ("no-mask", -5.0), ("maskable-ppo", 0.5)]:
        for seed in [1, 2]:
            rows += [
                {"env_id": "TSP-v1", "variant": variant, "seed": seed, "step": step, "episodic_return": value}
                for step, value in [(10, -99.0), (20, offset - seed), (30, offset - seed)]
            ]
    runs = pd.DataFrame(
        [
            {"env_id": "TSP-v1", "variant": v, "seed": s, "sps": 1.0}
            for v in ["default", "no-mask", "maskable-ppo"]
            for s in [1, 2]
        ]
    )
    write_data(tmp_path, Tables(pd.DataFrame(rows), runs, None))
    played = {"return": -1.0, "length": 20, "ended_invalid": 0, "truncated": 0, "masked_share": 0.5, "joint_invalid": 0.5}
    random = [{"env_id": "TSP-v1", "policy": p, "seed": s, "episode": 0} | played for p in ["valid", "all"] for s in [1, 2]]
    unmasked = [
        {"env_id": "TSP-v1", "mode": m, "seed": s, "episode": 0} | played for m in ["masked", "unmasked"] for s in [1, 2]
    ]
    masking.write_rows(tmp_path / "random_policy.csv", list(random[0]), random)
    masking.write_rows(tmp_path / "unmasked.csv", list(unmasked[0]), unmasked)
    wall = [{"env_id": "TSP-v1", "round": 1, "implementation": "ours", "steps": 512, "seconds": 1.0, "sps": 512.0,
             "load_average": 1.0, "tests_running": 0}]  # fmt: skip
    masking.write_rows(tmp_path / "wall_time.csv", list(wall[0]), wall)
    scores, shares, wall_time, _ = masking.masking_tables(tmp_path, last=2)
    row = scores.splitlines()[2]
    assert row.startswith("| TSP-v1 | -1.50 ± 0.71 | -6.50 ± 0.71 | -1.00 ± 0.71 | -1.00 ± 0.00 |")  # the -99s are left out
    assert "| TSP-v1 | Discrete(20) | 50.0% | 50.0% |" in shares and "+5.00" in shares
    assert "| 1 | ours | 512 | 1.0 | 512 |" in wall_time


def test_the_peers_settings_are_read_from_the_run_py_line_of_commands_txt(tmp_path):
    """The report states MaskablePPO's settings as its runs got them: the flags after the script in --peer."""
    line = "python benchmark/run.py --script ppo_masked.py --flags '--gamma 1' --peer 'other=x.py --gamma 0.5' "
    line += "--peer 'maskable-ppo=benchmark/masking.py --gamma 1 --num-envs 8 --ent-coef 0'\n"
    (tmp_path / "commands.txt").write_text("python benchmark/report.py x\n" + line)
    options = masking.peer_options(tmp_path / "commands.txt")
    assert (options.gamma, options.num_envs, options.ent_coef, options.num_steps) == (1.0, 8, 0.0, 128)
    settings = masking.settings(options)
    assert settings["gamma"] == 1.0 and settings["batch_size"] == 8 * 128 // 4 and settings["ent_coef"] == 0.0
    (tmp_path / "commands.txt").write_text("python benchmark/report.py x\n")
    with pytest.raises(SystemExit, match="maskable-ppo"):
        masking.peer_options(tmp_path / "commands.txt")


@needs("envpool")
def test_play_cuts_an_episode_that_an_agent_never_ends():
    """Game2048-v1 takes an invalid move as a no-op: an agent that keeps choosing one would play forever. play() cuts
    such an episode at max_steps (capped, truncated, its return so far) and starts another."""

    def invalid_first(flat, mask, nvec):  # the first forbidden move, or move 0 when all are allowed
        forbidden = np.flatnonzero(~mask[0])
        return np.array([[forbidden[0] if len(forbidden) else 0]])

    rows = masking.play("Game2048-v1", 1, 3, invalid_first, max_steps=50)
    assert len(rows) == 3 and all(row["length"] <= 50 for row in rows)
    capped = [row for row in rows if row["capped"]]
    assert capped and all(row["length"] == 50 and row["truncated"] and row["ended_invalid"] for row in capped)
