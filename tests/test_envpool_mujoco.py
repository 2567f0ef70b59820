"""G10's envpool backend of the continuous scripts (--vector-env envpool), checked as gymnasium's is: the stream the
agent sees against each env stepped by hand (gymnasium's env reset by hand at an episode end; a pool of one envpool env,
whose next-step autoreset gives a reset step that must never reach the agent), M1's and M3's statistics against a hand
computation from that stream, B1's final observation at envpool's time limit, checkpoints, evaluation, resume and
torchrun on envpool, its learning (InvertedPendulum), and the batched script's agents on one pool. Each detail on both
backends where the test can drive both."""

import glob
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import ROOT, free_port, load_script, needs, read_scalars, restored_env_statistics, run_script
from ppo_utils.env_statistics import env_statistics

pytestmark = needs("envpool")
BACKENDS = ["sync", "envpool"]
GAMMA, EPS, PRIOR = 0.99, 1e-8, 1e-4  # RunningMeanStd starts at mean 0, var 1, with a count of 1e-4


class OneEnv:
    """One env stepped by hand, the reference the vector envs are held to: gymnasium's env, reset by hand at an episode
    end, or a pool of one envpool env, whose step after an episode end is its reset step (the reset observation,
    reward 0, the action ignored)."""

    def __init__(self, backend, env_id, seed):
        self.backend = backend
        if backend == "envpool":
            import envpool

            self.env = envpool.make_gymnasium(env_id, num_envs=1, env_seed=[seed])
            self.first = self.env.reset()[0][0]
        else:
            self.env = gym.make(env_id)
            self.first = self.env.reset(seed=seed)[0]

    def step(self, action):
        if self.backend == "envpool":
            obs, reward, terminated, truncated, _ = self.env.step(action[None])
            return obs[0], reward[0], terminated[0], truncated[0]
        return self.env.step(action.astype(self.env.action_space.dtype))[:4]  # M8's clip casts to the space's type

    def reset_after_end(self):
        if self.backend == "envpool":
            obs, reward, terminated, truncated, _ = self.env.step(np.full((1,) + self.env.action_space.shape, 0.5))
            assert reward[0] == 0 and not (terminated[0] or truncated[0])  # envpool's reset step
            return obs[0]
        return self.env.reset()[0]


def by_hand(backend, env_id, seeds, actions):
    """What a vector env with SAME_STEP autoreset gives for `actions` (steps x envs x action): the first observations,
    then per step the observations (a new episode's first where one ended), rewards, terminations, truncations and the
    ended episodes' last observations (None where none ended)."""
    envs = [OneEnv(backend, env_id, seed) for seed in seeds]
    first, steps = np.stack([env.first for env in envs]), []
    for step_actions in actions:
        obs, rewards, terminated, truncated, final = [], [], [], [], []
        for env, action in zip(envs, step_actions):
            o, r, te, tr = env.step(action)
            final.append(o if te or tr else None)
            obs.append(env.reset_after_end() if te or tr else o)
            rewards.append(r), terminated.append(te), truncated.append(tr)
        steps.append((np.stack(obs), np.array(rewards), np.array(terminated), np.array(truncated), final))
    return first, steps


def random_actions(steps, num_envs, act_dim, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=(steps, num_envs, act_dim))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_step_is_a_transition_and_ends_carry_the_last_observation_and_the_episode(cont, backend):
    """SAME_STEP on both backends: each step the agent takes is a step of a running episode (envpool's reset step never
    reaches it), the step that ends an episode returns the next one's first observation, its last one in
    infos["final_obs"], and the episode's raw return and length in infos["final_info"] (RecordEpisodeStatistics')."""
    args = cont.Args(env_id="Hopper-v5", num_envs=2, vector_env=backend, norm_obs=False, norm_reward=False)
    ours = cont.make_envs(args, "test")
    actions = random_actions(300, 2, 3)
    first, steps = by_hand(backend, "Hopper-v5", [5, 6], actions)
    np.testing.assert_array_equal(ours.reset(seed=5)[0], first)  # env i: seed + i
    returns, lengths, ended = np.zeros(2), np.zeros(2, int), 0
    for action, (obs, rewards, terminated, truncated, final) in zip(actions, steps):
        got_obs, got_rewards, got_terminated, got_truncated, infos = ours.step(action)
        np.testing.assert_array_equal(got_obs, obs)
        np.testing.assert_array_equal(got_rewards, rewards)
        np.testing.assert_array_equal(got_terminated, terminated)
        np.testing.assert_array_equal(got_truncated, truncated)
        returns, lengths = returns + rewards, lengths + 1
        for i in range(2):
            assert ("final_obs" in infos and infos["_final_obs"][i]) == (final[i] is not None)
            if final[i] is not None:
                np.testing.assert_array_equal(infos["final_obs"][i], final[i])
                assert infos["final_info"]["_episode"][i]
                assert infos["final_info"]["episode"]["r"][i] == pytest.approx(returns[i], rel=1e-6)
                assert infos["final_info"]["episode"]["l"][i] == lengths[i]
                returns[i], lengths[i], ended = 0, 0, ended + 1
    assert ended >= 10  # Hopper falls within tens of steps under random actions
    ours.close()


def running(values):
    """RunningMeanStd's mean and variance after counting `values` (rows), by the formula: its start (mean 0, var 1,
    count 1e-4) and the values' own mean and variance, pooled."""
    n, mean, var = len(values), values.mean(0), values.var(0)
    total = n + PRIOR
    return n * mean / total, (PRIOR + n * var + mean**2 * PRIOR * n / total) / total


@pytest.mark.parametrize("backend", BACKENDS)
def test_normalization_statistics_are_the_hand_computed_ones(cont, backend):
    """M1-M4 at their defaults, on both backends: one set of statistics for all envs (the reference's VecNormalize),
    M1's counting every observation the agent sees (not the episodes' last ones, which are normalized for B1 but not
    counted), M3's the discounted return of each env (restarted after every episode end, as gymnasium's vector wrapper
    does), each observation and reward normalized with the statistics after that step's count, then clipped at 10."""
    args = cont.Args(env_id="Hopper-v5", num_envs=2, vector_env=backend, gamma=GAMMA)
    ours = cont.make_envs(args, "test")
    actions = random_actions(200, 2, 3, seed=1)
    first, steps = by_hand(backend, "Hopper-v5", [7, 8], actions)
    seen, discounted, accumulated, ended = [first], [], np.zeros(2), 0
    ours.reset(seed=7)
    for action, (obs, rewards, terminated, truncated, final) in zip(actions, steps):
        got_obs, got_rewards, _, _, infos = ours.step(action)
        seen.append(obs)
        obs_mean, obs_var = running(np.concatenate(seen))
        scale = lambda x: np.clip((x - obs_mean) / np.sqrt(obs_var + EPS), -10, 10)  # noqa: E731
        np.testing.assert_allclose(got_obs, scale(obs), rtol=1e-5, atol=1e-5)
        accumulated = accumulated * GAMMA * (1 - terminated) + rewards
        discounted.append(accumulated.copy())
        accumulated[terminated | truncated] = 0
        _, return_var = running(np.concatenate(discounted))
        np.testing.assert_allclose(got_rewards, np.clip(rewards / np.sqrt(return_var + EPS), -10, 10), rtol=1e-4)
        for i in np.flatnonzero([f is not None for f in final]):
            np.testing.assert_allclose(infos["final_obs"][i], scale(final[i]), rtol=1e-5, atol=1e-5)
            ended += 1
    stats = env_statistics(ours)
    np.testing.assert_allclose(stats["obs_rms"]["mean"].numpy(), obs_mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(stats["obs_rms"]["var"].numpy(), obs_var, rtol=1e-9)
    np.testing.assert_allclose(stats["return_rms"]["var"].numpy(), return_var, rtol=1e-5)
    assert ended >= 5
    ours.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_time_limit_cut_bootstraps_from_the_episodes_last_observation(cont, backend, tmp_path, monkeypatch):
    """B1 at the task's own time limit (Swimmer never terminates: its 1000th step truncates), in train(): the stored
    reward of that step is the env's plus gamma * V(the episode's last observation), the next stored observation is
    the new episode's first, and every other stored step is the env's (no reset step stored). Raw observations and
    rewards (M1, M3 off) and a learning rate of 0, so that the agent after the run is the rollout's."""
    monkeypatch.chdir(tmp_path)
    args = cont.Args(env_id="Swimmer-v5", vector_env=backend, num_steps=1100, total_timesteps=1100, num_minibatches=1,
                     update_epochs=1, learning_rate=0.0, norm_obs=False, norm_reward=False, bootstrap_truncated=True,
                     compile=False, cuda=False)  # fmt: skip
    result = cont.train(args)
    rollout, agent = result["rollout"], result["agent"]
    actions = np.clip(rollout["actions"].numpy().astype(np.float64), -1, 1)  # M8: what the env got
    first, steps = by_hand(backend, "Swimmer-v5", [args.seed], actions)
    stored = [first] + [obs for obs, *_ in steps[:-1]]
    np.testing.assert_allclose(rollout["obs"][:, 0].numpy(), np.stack(stored)[:, 0], rtol=1e-6, atol=1e-6)
    (cut,) = [t for t, (_, _, _, truncated, _) in enumerate(steps) if truncated[0]]
    assert cut == 999 and rollout["dones"][1000, 0] == 1 and rollout["dones"][:, 0].sum() == 1
    final = torch.as_tensor(steps[cut][4][0], dtype=torch.float32)
    with torch.no_grad():
        bonus = GAMMA * agent.get_value(final[None]).item()
    expected = np.array([rewards[0] for _, rewards, *_ in steps], dtype=np.float32)
    expected[cut] += bonus
    assert abs(bonus) > 1e-4
    np.testing.assert_allclose(rollout["rewards"][:, 0].numpy(), expected, rtol=1e-5, atol=1e-6)


def trained_on_envpool(tmp_path, monkeypatch, num_steps, total_timesteps):
    """A short run of the continuous script on envpool in tmp_path (Hopper-v5, 2 envs, minibatches of 128, one epoch,
    no compiling): the script's module and the agent.pt it saved."""
    cont = load_script("ppo_continuous_action")
    monkeypatch.chdir(tmp_path)
    flags = dict(env_id="Hopper-v5", vector_env="envpool", num_envs=2, num_steps=num_steps, update_epochs=1, compile=False)
    cont.train(cont.Args(num_minibatches=2 * num_steps // 128, total_timesteps=total_timesteps, cuda=False, **flags))
    (path,) = glob.glob(str(tmp_path / "runs" / "*" / "agent.pt"))
    return cont, path


@pytest.mark.slow
def test_envpool_runs_checkpoint_evaluate_and_resume(tmp_path, monkeypatch):
    """A run on envpool saves its agent with M1's and M3's statistics; --eval-checkpoint plays it on envpool, naming
    its env; --resume of a longer copy restores the statistics and trains the update left, on envpool."""
    cont, path = trained_on_envpool(tmp_path, monkeypatch, num_steps=256, total_timesteps=1024)
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["args"]["vector_env"] == "envpool" and checkpoint["env_stats"]["obs_rms"]["count"] > 1000
    evaluation = run_script("ppo_continuous_action", "--eval-checkpoint", path, "--eval-episodes", "3", cwd=tmp_path)
    assert evaluation.returncode == 0, evaluation.stderr
    assert "over 3 episodes" in evaluation.stdout and "Hopper-v5" in evaluation.stdout

    checkpoint["args"]["total_timesteps"] = 1536  # one update still to do
    torch.save(checkpoint, path)
    restored = restored_env_statistics(cont, monkeypatch)
    cont.train(cont.Args(resume=path))
    for key in ("obs_rms", "return_rms"):
        torch.testing.assert_close(restored[0][key]["mean"], checkpoint["env_stats"][key]["mean"], msg=key)
        torch.testing.assert_close(restored[0][key]["var"], checkpoint["env_stats"][key]["var"], msg=key)
    resumed = torch.load(path, weights_only=True)
    assert resumed["iteration"] == 3 and resumed["global_step"] == 1536
    assert resumed["env_stats"]["obs_rms"]["count"] > checkpoint["env_stats"]["obs_rms"]["count"]


@pytest.mark.slow
def test_play_both_plays_a_checkpoint_as_eval_checkpoint_does_on_each_backend(tmp_path, monkeypatch, capsys):
    """benchmark/play_both.py's two columns are what the script's own --eval-checkpoint prints for the same agent,
    seed and episodes, with the checkpoint's --vector-env set to each backend; bad input is one line."""
    import play_both  # benchmark/play_both.py

    _, path = trained_on_envpool(tmp_path, monkeypatch, num_steps=128, total_timesteps=256)
    printed = {}
    for backend in ("sync", "envpool"):
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["args"]["vector_env"] = backend
        copy = tmp_path / f"{backend}.pt"
        torch.save(checkpoint, copy)
        evaluation = run_script("ppo_continuous_action", "--eval-checkpoint", str(copy), "--eval-episodes", "4",
                                "--seed", "5", cwd=tmp_path)  # fmt: skip
        assert evaluation.returncode == 0, evaluation.stderr
        printed[backend] = evaluation.stdout.split("mean return ")[1].split(" ")[0]
    play_both.main([path, "--episodes", "4", "--seed", "5"])
    row = capsys.readouterr().out.strip().splitlines()[-1].split(" | ")
    assert [cell.split(" ± ")[0] for cell in row[1:3]] == [printed["sync"], printed["envpool"]], (row, printed)
    fixtures = ROOT / "tests" / "fixtures" / "checkpoints"
    (cartpole,) = glob.glob(str(fixtures / "ppo" / "*" / "agent.pt"))  # ppo.py's, on CartPole-v1
    (pendulum,) = glob.glob(str(fixtures / "ppo_continuous_action" / "*" / "agent.pt"))  # a task envpool lacks
    bad = [(["--episodes", "1", path], "--episodes"), ([str(tmp_path / "none.pt")], "none.pt: no such file"),
           ([path, cartpole], "was written by ppo.py"), ([pendulum], "plays Pendulum-v1, which envpool lacks")]  # fmt: skip
    for argv, named in bad:
        with pytest.raises(SystemExit, match=named):
            play_both.main(argv)
    assert "envpool - gymnasium" not in capsys.readouterr().out  # every file is checked before any agent plays


@pytest.mark.slow
def test_the_recurrent_script_trains_on_envpool_with_positions_only(tmp_path, monkeypatch):
    """ppo_rnn_continuous_action.py on envpool, --mask-velocity: the envs give Hopper's 5 positions of 11, and the run
    trains its updates."""
    rnn = load_script("ppo_rnn_continuous_action")
    monkeypatch.chdir(tmp_path)
    args = rnn.Args(env_id="Hopper-v5", vector_env="envpool", mask_velocity=True, num_envs=4, num_steps=64,
                    total_timesteps=512, num_minibatches=2, update_epochs=1, cuda=False)  # fmt: skip
    envs = rnn.make_envs(args)
    obs, _ = envs.reset(seed=1)
    positions = np.stack([OneEnv("envpool", "Hopper-v5", 1 + i).first[:5] for i in range(4)])  # env i: seed + i
    mean, var = running(positions)  # M1 counted the four first observations
    np.testing.assert_allclose(obs, np.clip((positions - mean) / np.sqrt(var + EPS), -10, 10), rtol=1e-5, atol=1e-5)
    envs.close()
    result = rnn.train(args)
    assert result["rollout"]["obs"].shape[-1] == 5
    (run_dir,) = glob.glob(str(tmp_path / "runs" / "*"))
    assert [step for step, _ in read_scalars(run_dir, "charts/SPS")] == [256, 512]


@pytest.mark.torchrun
def test_torchrun_on_envpool_merges_the_statistics_of_its_ranks(tmp_path):
    """X2 on envpool: two ranks train, each on its own pool; the statistics saved are those both ranks agreed on."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           str(ROOT / "ppo_continuous_action.py"), "--env-id", "Hopper-v5", "--vector-env", "envpool", "--num-steps", "256",
           "--total-timesteps", "1024", "--num-minibatches", "4", "--update-epochs", "1", "--no-cuda", "--no-compile"]  # fmt: skip
    result = subprocess.run(
        cmd, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "*" / "agent.pt"))
    stats = torch.load(path, weights_only=True)["env_stats"]
    assert stats["obs_rms"]["count"] >= 512  # one rank's count: the merge keeps the weight of later values
    (run_dir,) = glob.glob(str(tmp_path / "runs" / "*"))
    assert [step for step, _ in read_scalars(run_dir, "charts/SPS")] == [512, 1024]


def test_envpools_tasks_are_configured_as_gymnasiums_v5():
    """Each of envpool's MuJoCo tasks that --vector-env envpool makes has gymnasium's v5 time limit, and every setting
    both name (frame skip, healthy ranges, reward weights, reset noise, ...) at the default of gymnasium's constructor."""
    import inspect

    import envpool
    from ppo_utils.flag_checks import MUJOCO_TASKS

    for task in MUJOCO_TASKS:
        config, spec = envpool.make_spec(task).config._asdict(), gym.spec(task)
        assert config["max_episode_steps"] == spec.max_episode_steps, task
        defaults = inspect.signature(gym.envs.registration.load_env_creator(spec.entry_point).__init__).parameters
        shared = {name: p.default for name, p in defaults.items() if name in config and p.default is not p.empty}
        assert "frame_skip" in shared or task.startswith("Humanoid"), (task, sorted(shared))
        for name, default in shared.items():
            expected = list(default) if isinstance(default, tuple) else default
            got = list(config[name]) if isinstance(config[name], (tuple, list)) else config[name]
            assert got == pytest.approx(expected), (task, name, got, expected)


@pytest.mark.parametrize("task", ["Hopper-v5", "Walker2d-v5", "HalfCheetah-v5", "Swimmer-v5", "InvertedPendulum-v5"])
def test_envpools_dynamics_and_rewards_are_gymnasiums(task):
    """The same physics, rewards and episode ends as gymnasium's v5 (beside the configs above, which cannot compare the
    model files or the code): envpool's env and gymnasium's, set to envpool's first state, take the same 60 random
    actions. These tasks' observations hold the whole state but the positions on the plane (x; Swimmer's x and y),
    which no force depends on, so gymnasium's env takes envpool's state with them at 0. envpool builds its own MuJoCo,
    so its floating-point sums may differ in the last bits; a different model or reward differs at the first step."""
    import envpool

    pool = envpool.make_gymnasium(task, num_envs=1, env_seed=[7])
    obs = pool.reset()[0][0]
    env = gym.make(task)
    env.reset(seed=0)
    model = env.unwrapped.model
    hidden = model.nq - (len(obs) - model.nv)  # the positions the observation leaves out
    env.unwrapped.set_state(np.concatenate([np.zeros(hidden), obs[: model.nq - hidden]]), obs[model.nq - hidden :])
    steps = 0
    for action in random_actions(60, 1, model.nu, seed=3)[:, 0].astype(np.float32):
        expected = env.step(action)
        obs, reward, terminated, truncated, _ = pool.step(action[None])
        np.testing.assert_allclose(obs[0], expected[0], rtol=1e-6, atol=1e-8, err_msg=f"{task} step {steps}")
        assert reward[0] == pytest.approx(expected[1], rel=1e-6, abs=1e-8), (task, steps)
        assert (terminated[0], truncated[0]) == tuple(expected[2:4]), (task, steps)
        steps += 1
        if terminated[0]:
            break
    assert steps >= 5, (task, steps)  # the comparison covered some steps before an episode ended
