"""benchmark/speed.py's measurements: steps per second against the env-only ceiling, the split of an iteration, the
update's work."""

import re
import subprocess
import sys

import pytest
import torch
from conftest import ROOT


@pytest.mark.long
def test_sps_measures_env_only_and_training(tmp_path):
    import speed  # benchmark/speed.py (pyproject.toml puts benchmark/ on pytest's path)

    output = tmp_path / "sps.md"
    speed.main(["env=env-only --steps 512 ppo_continuous_action.py", "train=split ppo_continuous_action.py", "--flags",
                "--env-id InvertedPendulum-v5 --total-timesteps 4096 --vector-env async --num-envs 2 --num-steps 1024",
                "--ceiling", "train=env", "--rounds", "1", "--output", str(output)])  # fmt: skip
    # async: the env processes, spawned from the measuring one, find the script
    lines = output.read_text().splitlines()
    cells = {line.split("|")[1].strip() + " " + line.split("|")[2].strip(): [c.strip() for c in line.strip("|").split("|")]
             for line in lines if line.startswith("| ")}  # fmt: skip
    env_sps, train_sps = float(cells["env median"][4]), float(cells["train median"][4])
    ratio = float(cells["train env"][4].rstrip("%")) / 100
    assert env_sps > 0 and train_sps > 0
    assert ratio == pytest.approx(train_sps / env_sps, abs=0.01)
    split = next(row for key, row in cells.items() if key.startswith("train ") and ":" in row[1])
    steady_sps, (iteration, env, policy, update, rest) = float(split[4]), map(float, re.findall(r"-?[\d.]+", split[1]))
    # a batch of 2048 steps over the iteration: both printed to the unit (ms, SPS), so each within 0.5 of the true value
    assert 2048e3 / (iteration + 0.5) - 0.5 <= steady_sps <= 2048e3 / (iteration - 0.5) + 0.5
    assert iteration == pytest.approx(env + policy + update + rest, abs=2) and min(env, policy, update) > 0


def test_sps_splits_an_iteration_into_env_steps_policy_calls_update_and_rest(monkeypatch):
    """timed_training on a stand-in script timed by a fake clock (speed.py's time.perf_counter), which only the stand-in's
    work moves: 4 iterations of 5 env steps (20 ms each in the first, 10 ms after), each step after a policy call of
    4 ms under inference mode (the rollout's), then 20 ms of other work, a policy call of 4 ms with gradients (the
    update's, not the rollout's) and an update of 300 ms (the first, a compile's), then 30, 30 and 60 ms. By hand: env
    steps 5 x 20 + 3 x 5 x 10 = 250 ms over 4 iterations, 62.5 ms each; the rollout's policy calls 5 x 4 = 20 ms an
    iteration; the update the median of 30, 30, 60 = 30 ms (the first left out; the mean would be 40); the iterations
    after the first, end of update to end of update, 50 + 20 + 20 + 4 + 30 = 124, 124 and 50 + 20 + 20 + 4 + 60 = 154
    ms, their median 124 ms."""
    import types

    import speed

    now = [1000.0]  # seconds; read through speed.time.perf_counter

    def work(seconds):
        now[0] += seconds

    monkeypatch.setattr(speed, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    class Envs:
        step_seconds = 0.02

        def step(self, action):
            work(self.step_seconds)

    class Agent:
        def get_action_and_value(self):
            work(0.004)

    def train(args):
        envs, agent = stand_in.make_envs(args), stand_in.Agent()
        for update_seconds in (0.3, 0.03, 0.03, 0.06):
            for _ in range(5):
                with torch.inference_mode():
                    agent.get_action_and_value()
                envs.step(None)
            envs.step_seconds = 0.01
            work(0.02)
            agent.get_action_and_value()  # the update's loss: not the rollout's
            stand_in.update_policy(update_seconds)
        return {"sps": 123}

    stand_in = types.SimpleNamespace(
        make_envs=lambda args: Envs(), train=train, update_policy=lambda seconds: work(seconds), Agent=Agent
    )
    sps_, env_s, policy_s, update_s, iteration_s = speed.timed_training(stand_in, types.SimpleNamespace(cuda=False))
    assert sps_ == 123
    assert env_s == pytest.approx(0.0625, abs=1e-9) and update_s == pytest.approx(0.03, abs=1e-9)
    assert policy_s == pytest.approx(0.02, abs=1e-9)
    assert iteration_s == pytest.approx(0.124, abs=1e-9)
    assert stand_in.update_policy.__name__ == "<lambda>" and stand_in.Agent is Agent  # the script's own are back


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,named",
    [
        (["a=split ppo.py --env-id NoSuch-v0"], "--env-id"),
        (["a=split ppo_atari.py --env-id Hopper-v5"], "ppo_continuous_action.py"),
        (["a=update ppo_continuous_action.py --num-minibatches 7"], "--num-minibatches"),
        (["a=env-only ppo.py", "--rounds", "0"], "--rounds"),
    ],
)
def test_sps_bad_input_is_one_line_before_anything_runs(tmp_path, args, named):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "speed.py"), *args], cwd=tmp_path, capture_output=True, text=True,
        timeout=300,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    message = [line for line in result.stderr.splitlines() if "error" in line][-1]
    assert named in message and "round 1/" not in result.stdout + result.stderr  # nothing was measured
    assert message.startswith(("error: ", "speed.py: error: ")), message


@pytest.mark.slow
def test_update_compute_counts_the_updates_floating_point_work():
    """speed.py's update FLOPs against a hand count: InvertedPendulum's agent is two MLPs 4-64-64-1 (the actor's head has
    1 output, the critic's 1). Forward, per sample: 2 x (4*64 + 64*64 + 64) = 8,832 multiply-adds. Backward: the
    weight gradients (8,832 again) and the input gradients of every layer but the first (8,832 - 2 x 4*64). So
    (8,832 * 3 - 512) * 2 FLOP per sample, times 2048 samples x 10 epochs."""
    import speed

    flags = ["--env-id", "InvertedPendulum-v5", "--total-timesteps", "4096"]
    module, args = speed.script_args("ppo_continuous_action.py", flags)
    seconds, cpu, first, gflop, matmul_gflops = speed.update_compute(module, args)
    assert gflop == pytest.approx((8832 * 3 - 512) * 2 * 2048 * 10 / 1e9, rel=1e-6)
    assert seconds > 0 and cpu > 0 and first > 0 and matmul_gflops > 1


def test_envpool_speeds_split_table_by_hand():
    """speed.py's split table: an iteration of 2048 steps in 2 s, 1 s of it env steps, 0.2 s policy calls and 0.5 s the
    update, leaves 0.3 s of the rest; its steady SPS is 1024, and with the env free 2048 steps take 1 s: 2048 SPS, 2x.
    envpool's 1.6 s with 0.64 s of env steps: 40%, the update 31%, 1280 SPS, and 2048 / 0.96 s = 2133 SPS free, 2.08x
    gymnasium's 1024 (the base of its group)."""
    import speed

    parts = {"one/sync": {"batch": 2048, "iteration": 2.0, "env": 1.0, "policy": 0.2, "update": 0.5},
             "one/envpool": {"batch": 2048, "iteration": 1.6, "env": 0.64, "policy": 0.16, "update": 0.5}}  # fmt: skip
    bases = {name: speed.base_of(name, list(parts), ["sync"]) for name in parts}
    rows = speed.split_table(parts, list(parts), bases)[2:]
    assert rows == [
        "| one/sync | 2000: 1000 + 200 + 500 + 300 | 50% | 25% | 1024 | 2048 | 2.00x |",
        "| one/envpool | 1600: 640 + 160 + 500 + 300 | 40% | 31% | 1280 | 2133 | 2.08x |",
    ]


def test_envpool_speed_refuses_a_task_envpool_lacks_before_measuring(tmp_path, monkeypatch):
    """speed.py checks every configuration's flags first: a task envpool lacks ends in the script's one line."""
    import speed

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="--vector-env envpool has no Pendulum-v1"):
        speed.main(["gymnasium=ppo_continuous_action.py", "envpool=env-only ppo_continuous_action.py --vector-env envpool",
                    "--flags", "--env-id Pendulum-v1", "--output", str(tmp_path / "speed.md")])  # fmt: skip
    assert list(tmp_path.iterdir()) == []
