"""The pieces `Run` is made of, each alone, without a training run: `resume_flags` (which flags a resumed run takes),
`RunLog` (what reaches TensorBoard, and the SPS) and `Checkpoints` (what a checkpoint written after a stop holds)."""

from types import SimpleNamespace

from ppo_utils import checkpoints
import gymnasium as gym
import numpy as np
import pytest
from ppo_utils import run as ppo_run
import torch
from conftest import load_script, read_scalars, write_checkpoint
from ppo_utils.flag_checks import ArgError
from ppo_utils.run import RunLog


def test_resume_flags_takes_the_checkpoints_flags_and_refuses_others(tmp_path):
    cont = load_script("ppo_continuous_action")
    trained = cont.Args(env_id="Hopper-v5", learning_rate=1e-3, seed=7)
    path = write_checkpoint(tmp_path / "agent.pt", trained, world_size=2, local_world_size=2)
    # the flags come from the checkpoint, not from the command line's defaults
    args, checkpoint = checkpoints.resume_flags(cont.Args(resume=path), world_size=2)
    assert (args.env_id, args.learning_rate, args.seed, args.resume) == ("Hopper-v5", 1e-3, 7, path)
    assert checkpoint["args"]["learning_rate"] == 1e-3
    with pytest.raises(ArgError, match=r"^--resume continues the run with its own flags; drop --seed --num-envs$"):
        checkpoints.resume_flags(cont.Args(resume=path, seed=3, num_envs=4), world_size=2)
    # a run of 2 processes continues with 2: the message gives the torchrun command
    with pytest.raises(ArgError, match=r"continues a run of 2 processes, not 1; .*torchrun --standalone --nproc-per-node 2 "):
        checkpoints.resume_flags(cont.Args(resume=path), world_size=1)
    assert checkpoints.resume_flags(cont.Args(seed=3), world_size=1) == (cont.Args(seed=3), None)


def test_runlog_writes_the_episodes_at_their_own_steps_and_the_scalars_at_the_updates(tmp_path, monkeypatch, capsys):
    """Two env steps of 2 envs: env 1 ends an episode of 2 steps (return 5) at step 4; the update at step 4 logs its
    scalars there, the SPS from the clock, and (the run's last step) a progress line."""
    monkeypatch.chdir(tmp_path)
    args = load_script("ppo_continuous_action").Args(total_timesteps=4)
    log = RunLog(args, "runs/run", None, rank=0, world_size=1)
    clock = iter([100.0] + [102.0] * 5)  # the start, then 2 s later the log (its SPS and progress line)
    monkeypatch.setattr(ppo_run, "time", SimpleNamespace(time=lambda: next(clock)))
    log.start(num_envs=2, global_step=0, last_step=4)
    nothing = {}
    ended = {"final_info": {"episode": {"r": np.array([0.0, 5.0])}, "_episode": np.array([False, True])}}
    log.record_episodes(nothing, 2)
    log.record_episodes(ended, 4)
    log.write(4, {"losses/value_loss": 0.25})
    log.close()
    assert read_scalars(tmp_path / "runs" / "run", "charts/episodic_return") == [(4, 5.0)]
    assert read_scalars(tmp_path / "runs" / "run", "charts/episodic_length") == [(4, 2.0)]
    assert read_scalars(tmp_path / "runs" / "run", "losses/value_loss") == [(4, 0.25)]
    assert read_scalars(tmp_path / "runs" / "run", "charts/SPS") == [(4, 2.0)]  # 4 steps in 2 s
    assert log.episodic_returns == [5.0] and "step 4/4  SPS 2  0:00:02  mean return (last 1) 5.0" in capsys.readouterr().out


def test_the_progress_line_says_the_time_elapsed_and_left_and_nothing_once_a_stop_is_asked(tmp_path, monkeypatch, capsys):
    """400 of 4000 steps in 100 s: 4 steps a second, so the 3600 left take 900 s. Once a stop signal has come (during
    an update), the update's line is not printed: "stopping:" stays the last word until the run says it stopped."""
    monkeypatch.chdir(tmp_path)
    args = load_script("ppo_continuous_action").Args(total_timesteps=4000)
    stop_signals = []
    log = RunLog(args, "runs/run", None, rank=0, world_size=1, stop_signals=stop_signals)
    now = [1000.0]
    monkeypatch.setattr(ppo_run, "time", SimpleNamespace(time=lambda: now[0]))
    log.start(num_envs=1, global_step=0, last_step=4000)
    now[0] += 100.0
    log.write(400, {})
    assert capsys.readouterr().out == "step 400/4000  SPS 4  0:01:40 elapsed, 0:15:00 left  mean return (last 0) n/a\n"
    stop_signals.append(15)
    now[0] += 100.0
    log.write(800, {})
    log.close()
    assert capsys.readouterr().out == ""


def test_checkpoints_save_the_kept_state_not_what_came_after(tmp_path, monkeypatch):
    """keep() at the end of an update, then a rollout that a stop drops moves the RNG and anneals the learning rate:
    the checkpoint holds the kept RNG state and learning rate, and restore() brings them back with update 3's counters."""
    monkeypatch.chdir(tmp_path)
    cont = load_script("ppo_continuous_action")
    args = cont.Args(env_id="Pendulum-v1", learning_rate=1e-3)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")])
    agent = torch.nn.Linear(3, 1)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    agent(torch.ones(3)).sum().backward()
    optimizer.step()  # Adam's moments, which a checkpoint after updates holds
    parts = checkpoints.Checkpoints(args, "runs/run", rank=0, world_size=1)
    (tmp_path / "runs" / "run").mkdir(parents=True)  # the run's TensorBoard writer makes it in a run
    torch.manual_seed(0)
    parts.keep(optimizer, envs)
    expected = torch.rand(3)  # the numbers the resumed run must draw next
    optimizer.param_groups[0]["lr"] = 5e-4  # G6's next step, for the rollout the stop drops
    parts.save(agent, optimizer, checkpoints.Update(iteration=3, global_step=300, kl_beta=1.0), wandb_id=None)
    saved = torch.load(parts.path, weights_only=True)
    assert (saved["iteration"], saved["global_step"], saved["optimizer"]["param_groups"][0]["lr"]) == (3, 300, 1e-3)
    torch.manual_seed(123)
    assert checkpoints.restore(saved, agent, optimizer, envs, rank=0, args=args) == (3, 300, 1.0)
    assert torch.equal(torch.rand(3), expected)
    envs.close()
