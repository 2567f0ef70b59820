"""ppo_atari.py run as a user runs it: uint8 rollout storage, video capture, episode lengths in the agent's steps.
Saving and evaluating a model: test_long_runs.py; the three backends' envs: test_atari_envs.py."""

import glob

import pytest
import torch
from conftest import load_script, needs, read_scalars, run_script

atari = load_script("ppo_atari")


@pytest.mark.slow
def test_uint8_rollout_storage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = atari.Args(num_envs=2, num_steps=32, total_timesteps=64, num_minibatches=2, update_epochs=1)
    rollout = atari.train(args)["rollout"]
    assert rollout["obs"].dtype == torch.uint8 and rollout["obs"].shape == (32, 2, 4, 84, 84, 1)
    assert rollout["obs"].element_size() * rollout["obs"].nelement() == 32 * 2 * 4 * 84 * 84  # one byte a pixel


@pytest.mark.long
@needs("moviepy")
def test_capture_video(tmp_path):
    result = run_script("ppo_atari", "--num-envs", "2", "--total-timesteps", "1024", "--capture-video", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert glob.glob(str(tmp_path / "runs" / "*" / "videos" / "*.mp4"))  # in the run folder, beside its logs


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sync", pytest.param("envpool", marks=needs("envpool"))])
def test_episode_length_counts_the_agents_steps(tmp_path, monkeypatch, backend):
    """charts/episodic_length is the number of the agent's steps in a game: with one env, the steps between the ends
    of consecutive games. The FIRE presses and no-ops the wrappers take themselves at each reset do not count."""
    monkeypatch.chdir(tmp_path)
    args = atari.Args(num_envs=1, num_steps=128, total_timesteps=768, num_minibatches=1, update_epochs=1, vector_env=backend)
    atari.train(args)
    (run_dir,) = glob.glob("runs/*")
    lengths = read_scalars(run_dir, "charts/episodic_length")
    assert len(lengths) >= 2  # a random Breakout game lasts some 150 steps
    ends = [0] + [step for step, _ in lengths]
    assert [length for _, length in lengths] == [end - previous for previous, end in zip(ends, ends[1:])]
