"""The pieces `Run` is made of, each alone, without a training run: `resume_flags` (which flags a resumed run takes),
`RunLog` (what reaches TensorBoard, the SPS and the progress line) and `Checkpoints` (what a checkpoint written after a
stop holds); and the run folder's lock, between processes that train."""

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

from ppo_utils import checkpoints
import gymnasium as gym
import numpy as np
import pytest
from ppo_utils import logs
from ppo_utils import run as ppo_run
import torch
from conftest import ROOT, load_script, read_scalars, run_script, write_checkpoint
from ppo_utils.flag_checks import ArgError
from ppo_utils.logs import RunLog


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
    monkeypatch.setattr(logs, "time", SimpleNamespace(time=lambda: next(clock)))
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


def test_a_run_says_what_is_to_come_as_soon_as_its_folder_is_made(tmp_path, monkeypatch, capsys):
    """Before its envs, its agent and --compile's set-up (some 10 s here), and the first update (up to a minute), a run
    says where it writes and that its first update is a warm-up: 4000 steps in updates of 400 (1 env x 400 steps)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ppo_run, "time", SimpleNamespace(time=lambda: 1000.0))
    args = load_script("ppo_continuous_action").Args(total_timesteps=4000, num_steps=400, num_minibatches=8)
    run = ppo_run.Run(args, resumed_from=None, rank=0, world_size=1)
    run.abandon()
    assert capsys.readouterr().out == (
        "runs/Hopper-v5__ppo_continuous_action__1__1000: 10 updates of 400 steps to go; the first one warms up (--compile "
        "builds its graph if the run has 4,000+ minibatch steps), then a progress line every 10 s\n"
    )


def test_the_progress_line_leaves_the_warm_up_out_and_says_nothing_once_a_stop_is_asked(tmp_path, monkeypatch, capsys):
    """A run of 10 updates of 400 steps (4000). The first update takes 60 s (warm-up: compiling, the first rollout):
    its line says so and gives no time left; the next 400 steps take 20 s, 20 steps a second, so the 3200 left take
    160 s (the run's mean rate, 800 steps in 80 s, would say 320 s). Once a stop signal has come (during an update),
    the update's line is not printed: "stopping:" stays the last word until the run says it stopped."""
    monkeypatch.chdir(tmp_path)
    args = load_script("ppo_continuous_action").Args(total_timesteps=4000, num_steps=400, num_minibatches=8)
    stop_signals = []
    log = RunLog(args, "runs/run", None, rank=0, world_size=1, stop_signals=stop_signals)
    now = [1000.0]
    monkeypatch.setattr(logs, "time", SimpleNamespace(time=lambda: now[0]))
    log.start(num_envs=1, global_step=0, last_step=4000)
    now[0] += 60.0
    log.write(400, {})
    assert capsys.readouterr().out == (
        "step 400/4000  SPS 6  0:01:00 elapsed (warm-up), time left from the next line  mean return (last 0) n/a\n"
    )
    now[0] += 20.0
    log.write(800, {})
    assert capsys.readouterr().out == "step 800/4000  SPS 20  0:01:20 elapsed, 0:02:40 left  mean return (last 0) n/a\n"
    stop_signals.append(15)
    now[0] += 100.0
    log.write(1200, {})
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
    update = checkpoints.Update(iteration=3, global_step=300, kl_beta=1.0)
    checkpoints.save_checkpoint(parts.path, parts.content(agent, optimizer, update, wandb_id=None))  # as Run.save does
    saved = torch.load(parts.path, weights_only=True)
    assert (saved["iteration"], saved["global_step"], saved["optimizer"]["param_groups"][0]["lr"]) == (3, 300, 1e-3)
    torch.manual_seed(123)
    assert checkpoints.restore(saved, agent, optimizer, envs, rank=0, args=args) == (3, 300, 1.0)
    assert torch.equal(torch.rand(3), expected)
    envs.close()


def paused(process):
    """Stops `process` (SIGSTOP: it keeps what it holds, its folder's lock too) and returns once the kernel says it is
    stopped, so that none of its threads writes until it is killed."""
    process.send_signal(signal.SIGSTOP)
    while open(f"/proc/{process.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.01)
    return process


@pytest.mark.slow
def test_a_run_folder_takes_one_process_at_a_time_and_a_killed_ones_lock_goes_with_it(tmp_path, monkeypatch):
    """Two --resume of one checkpoint at once: the second is refused in one line and writes nothing; once the first is
    killed (SIGKILL: no handler runs), its lock is gone and the run resumes. The first writes a checkpoint every update
    (agent.pt.tmp, then agent.pt) and its logs: it is paused while the second tries, so that the folder can change only
    by the second's doing, however fast either runs."""
    cont = load_script("ppo_continuous_action")
    monkeypatch.chdir(tmp_path)
    # InvertedPendulum-v5: gymnasium 1.4's Pendulum-v1 warns on stderr when it is made, before the line looked for
    flags = dict(env_id="InvertedPendulum-v5", num_steps=64, num_minibatches=2, update_epochs=1, compile=False, cuda=False)
    cont.train(cont.Args(**flags, total_timesteps=64, checkpoint_interval=1))
    (path,) = (tmp_path / "runs").glob("*/agent.pt")
    folder = path.parent
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["args"]["total_timesteps"] = 10**8  # a run that goes on, a checkpoint each update, until it is killed
    torch.save(checkpoint, path)

    def resume():
        command = [sys.executable, str(ROOT / "ppo_continuous_action.py"), "--resume", str(path)]
        process = subprocess.Popen(command, cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        said = []  # its output up to its "resumed" line (a library's warning may come first), or all of it where none came
        while not said or not (said[-1].startswith("resumed ") or said[-1] == ""):
            said.append(process.stdout.readline())
        return process, "".join(said[-1:] if said[-1] else said)

    first, started = resume()
    try:
        assert started.startswith("resumed "), started
        paused(first)
        before = sorted(os.listdir(folder))
        second = run_script("ppo_continuous_action", "--resume", str(path), cwd=tmp_path, timeout=120)
        assert second.returncode == 1 and second.stderr.strip().splitlines() == [
            f"error: --resume {path}: another process is training this run now (it holds the run folder {folder}); "
            "let it finish or stop it (its checkpoint is then the one to resume)"
        ]
        assert sorted(os.listdir(folder)) == before
    finally:
        first.kill()
        first.communicate()
    third, started = resume()
    third.kill()
    third.communicate()
    assert started.startswith("resumed "), started


def test_with_capture_video_the_first_lines_say_the_video_is_what_the_warm_up_waits_on(tmp_path, monkeypatch, capsys):
    """--capture-video: RecordVideo renders each step of env 0's recorded episodes (0, 1, 8, 27, ...), which made
    HalfCheetah's first update run at 5 SPS, hidden in "(warm-up)": the run's first line says the videos slow those
    episodes, and the warm-up's progress line names the video beside the warm-up."""
    monkeypatch.chdir(tmp_path)
    now = [1000.0]
    monkeypatch.setattr(ppo_run, "time", SimpleNamespace(time=lambda: now[0]))
    monkeypatch.setattr(logs, "time", SimpleNamespace(time=lambda: now[0]))  # the folder's name, the progress line's clock
    args = load_script("ppo_continuous_action").Args(total_timesteps=4000, num_steps=400, num_minibatches=8,
                                                     capture_video=True)  # fmt: skip
    ppo_run.Run(args, resumed_from=None, rank=0, world_size=1).abandon()
    assert capsys.readouterr().out == (
        "runs/Hopper-v5__ppo_continuous_action__1__1000: 10 updates of 400 steps to go; the first one warms up (--compile "
        "builds its graph if the run has 4,000+ minibatch steps), then a progress line every 10 s; --capture-video renders each step of the episodes it "
        "records (0, 1, 8, 27, ...), which slows them (MuJoCo without a GPU: minutes for the first update)\n"
    )
    log = RunLog(args, "runs/run", None, rank=0, world_size=1)
    log.start(num_envs=1, global_step=0, last_step=4000)
    now[0] += 80.0
    log.write(400, {})
    log.close()
    assert capsys.readouterr().out == (
        "step 400/4000  SPS 5  0:01:20 elapsed (warm-up and env 0's video, each of its steps rendered), time left from the "
        "next line  mean return (last 0) n/a\n"
    )
