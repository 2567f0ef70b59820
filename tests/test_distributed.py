"""X2 with torch.distributed on CPU (gloo), two processes: the ranks stay bit-identical and move away from the
parameters rank 0 starts from, one distributed update equals gradients averaged by hand, and a torchrun launch counts
every rank's steps and episodes while only rank 0 logs. The runs take --no-cuda (cuda=False): two processes need two
GPUs with --cuda, which a one-GPU machine refuses (tested below without any GPU)."""

import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from ppo_utils import distributed
import torch
import torch.multiprocessing as mp
from conftest import (ROOT, SCRIPTS, fixed_batch, free_port, load_script, make_agent, pythonpath_first, read_scalars,
                      reference_minibatch_loss)
from ppo_utils.distributed import average_env_statistics, distributed_setup, rank_seed
from ppo_utils.env_statistics import env_statistics
from ppo_utils.flag_checks import ArgError

WORLD_SIZE = 2


def as_rank(rank, port, tmp_path):
    """The environment torchrun gives each process."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE)
    )
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    os.chdir(tmp_path)


def train_worker(rank, port, tmp_path, name, flags):
    as_rank(rank, port, tmp_path)
    module = load_script(name)
    result = module.train(module.Args(**flags))
    torch.save(result["agent"].state_dict(), tmp_path / f"rank{rank}.pt")


SHORT = {
    "ppo_continuous_action": dict(env_id="Pendulum-v1", num_steps=128, num_minibatches=4, total_timesteps=1024),
    "ppo_atari": dict(num_envs=2, num_steps=32, num_minibatches=2, total_timesteps=256),
    "ppo_rnn": dict(env_id="CartPoleNoVelocity-v1", num_envs=2, num_steps=32, num_minibatches=2, total_timesteps=256),
    "ppo_rnn_continuous_action": dict(env_id="Pendulum-v1", num_envs=2, num_steps=32, num_minibatches=2, total_timesteps=256),
    "ppo": dict(env_id="CartPole-v1", num_envs=2, num_steps=32, num_minibatches=2, total_timesteps=256),
    "ppo_masked": dict(env_id="Knapsack-v1", num_envs=2, num_steps=32, num_minibatches=2, total_timesteps=256),
}


def initial_parameters(name, flags, rank=0):
    """The parameters train() builds on `rank` before any update, rebuilt as train() builds them: torch seeded with
    seed + rank, then the envs (make_envs), then the agent on them. Under torchrun every rank then takes rank 0's."""
    module = load_script(name)
    args = module.Args(**flags)
    torch.manual_seed(args.seed + rank)
    envs = module.make_envs(args, "initial-parameters")
    try:
        return module.Agent(envs, args).state_dict()
    finally:
        envs.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_initial_parameters_are_the_ones_train_starts_from(tmp_path, monkeypatch, name):
    """The reconstruction the next test compares with is right: a one-batch run that cannot move its parameters
    (learning rate 0) ends with exactly those parameters, and they depend on the seed."""
    monkeypatch.chdir(tmp_path)
    module = load_script(name)
    flags = {**SHORT[name], "learning_rate": 0.0, "update_epochs": 1, "cuda": False}
    flags["total_timesteps"] = flags["num_steps"] * flags.get("num_envs", 1)  # one update
    trained = module.train(module.Args(**flags))["agent"].state_dict()
    initial = initial_parameters(name, flags)
    assert trained.keys() == initial.keys()
    for key in initial:
        assert torch.equal(trained[key], initial[key]), key
    other_seed = initial_parameters(name, {**flags, "seed": flags.get("seed", 1) + 1})
    assert any(not torch.equal(other_seed[key], initial[key]) for key in initial)


@pytest.mark.torchrun
@pytest.mark.parametrize("name", SCRIPTS)
def test_ranks_hold_bit_identical_parameters(tmp_path, name):
    flags = {**SHORT[name], "update_epochs": 2, "target_kl": 0.05, "cuda": False}
    mp.spawn(train_worker, args=(free_port(), tmp_path, name, flags), nprocs=WORLD_SIZE)
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(WORLD_SIZE))
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key
    # and they did learn something: they moved away from rank 0's initial parameters, which every rank starts from
    initial = initial_parameters(name, flags, rank=0)
    assert rank0.keys() == initial.keys()
    assert any(not torch.equal(rank0[k], initial[k]) for k in rank0)
    assert len(glob.glob(str(tmp_path / "runs" / "*" / "events.*"))) == 1  # only rank 0 wrote logs


def update_worker(rank, port, tmp_path):
    as_rank(rank, port, tmp_path)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    cont = load_script("ppo_continuous_action")
    agent = make_agent(cont)  # the same initial parameters on both ranks
    args = cont.Args(num_envs=1, num_steps=64, num_minibatches=1, update_epochs=1, max_grad_norm=0.05)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5)
    cont.update_policy(agent, optimizer, fixed_batch(cont, make_agent(cont), seed=10 + rank), args, 0.2, 1.0, WORLD_SIZE)
    torch.save(agent.state_dict(), tmp_path / f"rank{rank}.pt")
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_one_distributed_update_equals_gradients_averaged_by_hand(tmp_path):
    mp.spawn(update_worker, args=(free_port(), tmp_path), nprocs=WORLD_SIZE)
    cont = load_script("ppo_continuous_action")
    args = cont.Args(num_envs=1, num_steps=64, num_minibatches=1, update_epochs=1, max_grad_norm=0.05)
    reference = make_agent(cont)
    params = list(reference.parameters())
    grads = []
    for rank in range(WORLD_SIZE):  # each rank's minibatch, its gradient computed from the formulas
        batch = fixed_batch(cont, make_agent(cont), seed=10 + rank)
        loss = reference_minibatch_loss(reference, batch, args, 0.2)
        grads.append(torch.autograd.grad(loss, params, allow_unused=True))
    averaged = [(a + b) / 2 if a is not None else torch.zeros_like(p) for a, b, p in zip(*grads, params)]
    norm = torch.sqrt(sum((g**2).sum() for g in averaged))
    optimizer = torch.optim.Adam(params, lr=1e-3, eps=1e-5)
    for p, g in zip(params, averaged):
        p.grad = g * min(1.0, 0.05 / (norm.item() + 1e-6))  # G8 on the averaged gradient
    optimizer.step()
    for rank in range(WORLD_SIZE):
        distributed = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        for key, value in reference.state_dict().items():
            torch.testing.assert_close(distributed[key], value, rtol=1e-4, atol=1e-6)  # Adam moves each weight by ~1e-3


@pytest.mark.torchrun
def test_torchrun_counts_every_ranks_steps_and_episodes(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           str(ROOT / "ppo_continuous_action.py"), "--env-id", "Pendulum-v1", "--num-steps", "256",
           "--total-timesteps", "2048", "--num-minibatches", "4", "--update-epochs", "1", "--no-cuda"]  # fmt: skip
    result = subprocess.run(
        cmd, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = glob.glob(str(tmp_path / "runs" / "*"))
    assert len(glob.glob(os.path.join(run_dir, "events.*"))) == 1
    # 4 updates of 2 ranks x 256 steps; SPS is computed from those global steps
    assert [step for step, _ in read_scalars(run_dir, "charts/SPS")] == [512, 1024, 1536, 2048]
    # each rank plays 1024 steps: 5 whole 200-step Pendulum episodes each, all logged by rank 0
    episode_steps = [step for step, _ in read_scalars(run_dir, "charts/episodic_return")]
    assert len(episode_steps) == 10 and episode_steps == sorted(episode_steps)
    assert np.unique(episode_steps).tolist() == [400, 800, 1200, 1600, 2000]


# ---------------------------------------------------------------------------------------------------------------------
# stop and resume under torchrun, the step budget, seeds, and the normalization statistics of all ranks

# on CPUs (--no-cuda), which a resumed run keeps: it continues with its checkpoint's flags
PENDULUM = ["--env-id", "Pendulum-v1", "--num-steps", "128", "--num-minibatches", "4", "--update-epochs", "1", "--no-cuda"]


def torchrun(*flags, nproc=2, launcher=()):
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
            str(free_port()), *launcher, str(ROOT / "ppo_continuous_action.py"), *flags]  # fmt: skip


@pytest.mark.torchrun
def test_ctrl_c_under_torchrun_then_resume_with_as_many_processes(tmp_path):
    """Ctrl-C reaches torchrun and both workers (and torchrun forwards it again): the workers save the last finished
    update once and print the torchrun command that continues it. A single process refuses that checkpoint, naming
    the command; the torchrun command continues the same run and schedule to the step budget."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    total = 2 * 128 * 100  # 100 updates of 2 ranks: 10-30 s
    command = torchrun(*PENDULUM, "--total-timesteps", str(total), "--checkpoint-interval", "1")
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.time() + 120
    while not glob.glob(str(tmp_path / "runs" / "*" / "agent.pt")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends on Ctrl-C
    out, err = proc.communicate(timeout=120)
    (path,) = glob.glob(str(tmp_path / "runs" / "*" / "agent.pt"))
    path = os.path.relpath(path, tmp_path)
    checkpoint = torch.load(tmp_path / path, weights_only=True)
    assert 1 <= checkpoint["iteration"] < 100 and checkpoint["world_size"] == 2, err[-2000:]
    assert out.count("stopped by a signal") == 1, out + err[-2000:]
    script = ROOT / "ppo_continuous_action.py"
    assert f"continue with: torchrun --standalone --nproc-per-node 2 {script} --resume {path}" in out

    single = subprocess.run([sys.executable, str(ROOT / "ppo_continuous_action.py"), "--resume", path], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert single.returncode == 1 and single.stderr.count("\n") == 1, single.stderr
    assert "continues a run of 2 processes, not 1" in single.stderr
    assert "torchrun --standalone --nproc-per-node 2" in single.stderr

    resumed = subprocess.run(torchrun("--resume", path), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.count(f"resumed {checkpoint['run_name']}") == 1  # rank 0 alone says it
    run_dir = tmp_path / os.path.dirname(path)
    assert [step for step, _ in read_scalars(run_dir, "charts/SPS")] == [256 * k for k in range(1, 101)]
    lrs = [value for _, value in read_scalars(run_dir, "charts/learning_rate")]
    np.testing.assert_allclose(lrs, [3e-4 * (1 - k / 100) for k in range(100)], rtol=1e-5)  # G6 goes on where it was


@pytest.mark.torchrun
def test_ctrl_c_in_a_long_rollout_under_torchrun_saves_before_torchrun_kills(tmp_path):
    """torchrun kills its workers a grace period after forwarding a signal (30 s unless --shutdown-timeout says
    otherwise; 5 s here): the ranks agree on a stop every few steps, not only at the end of a rollout that outlasts
    the grace (about 20 s here), so the last finished update is saved in time."""
    launcher_help = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--help"], capture_output=True, text=True)
    if "--shutdown-timeout" not in launcher_help.stdout:  # torch 2.11's torchrun (the GPU machine's) refuses it
        pytest.skip(f"needs torchrun's --shutdown-timeout, which torch {torch.__version__} lacks (the pinned torch has it)")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    flags = ["--env-id", "Pendulum-v1", "--num-steps", "40000", "--num-minibatches", "4", "--update-epochs", "1",
             "--no-cuda", "--no-compile", "--total-timesteps", str(2 * 40000 * 10), "--checkpoint-interval", "1"]  # fmt: skip
    proc = subprocess.Popen(torchrun(*flags, launcher=["--shutdown-timeout", "5"]), cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    deadline = time.time() + 240
    while not glob.glob(str(tmp_path / "runs" / "*" / "agent.pt")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    # update 1's checkpoint is there: the ranks are in the second rollout (about 20 s), the signal comes inside it
    assert proc.poll() is None, f"the run ended before the signal (exit {proc.returncode}): {proc.communicate()[1][-3000:]}"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "stopped by a signal; continue with: torchrun --standalone --nproc-per-node 2" in out, err[-3000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "*" / "agent.pt"))
    assert torch.load(path, weights_only=True)["iteration"] == 1


@pytest.mark.torchrun
@pytest.mark.parametrize(
    "flags,line",
    [
        (["--num-minibatches", "7"], "error: --num-minibatches 7 does not divide"),
        (["--total-timesteps", "200"], "error: --total-timesteps 200 is less than one update of 2 processes"),
    ],
)
def test_an_error_is_printed_once_under_torchrun(tmp_path, flags, line):
    """Every rank meets the error; rank 0 prints it, and the others wait for it before they exit (torchrun stops
    the group as soon as one rank has exited, which could cut rank 0 short)."""
    result = subprocess.run(torchrun(*PENDULUM, *flags), cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.count(line) == 1, result.stderr[-3000:]


def pretend_gpus(monkeypatch, gpus, local_world_size, local_rank=None):
    """torchrun's variables for local rank `local_rank` of `local_world_size` processes (one node; None: a plain run)
    on a machine that says it has `gpus` GPUs. distributed_setup's GPU selection and process group are recorded in the
    returned list instead of done."""
    calls = []
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    if local_rank is not None:
        for name, value in (("RANK", local_rank), ("LOCAL_RANK", local_rank), ("WORLD_SIZE", local_world_size),
                            ("LOCAL_WORLD_SIZE", local_world_size)):  # fmt: skip
            monkeypatch.setenv(name, str(value))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", str(device))))
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda backend, **kw: calls.append(("init", backend)))
    return calls


@pytest.mark.parametrize("local_rank", [0, 1])
def test_more_processes_than_gpus_are_refused_before_the_rendezvous(monkeypatch, local_rank):
    """torchrun --nproc-per-node 2 on a one-GPU machine: with --cuda, rank 1 has no GPU of its own (cuda:1). Every rank
    refuses, before it joins the process group (so that none waits for the others), naming both fixes."""
    calls = pretend_gpus(monkeypatch, gpus=1, local_world_size=2, local_rank=local_rank)
    with pytest.raises(ArgError) as error:
        distributed_setup(cuda=True)
    message = str(error.value)
    assert "\n" not in message and "2 processes" in message and "1 GPU" in message, message
    assert "--nproc-per-node 1" in message and "--no-cuda" in message, message
    assert calls == []  # no GPU selected, no process group started

    # on CPUs (--no-cuda) the same processes start: gloo, no GPU
    assert distributed_setup(cuda=False) == (local_rank, 2, torch.device("cpu"))
    assert calls == [("init", "gloo")]


def test_as_many_gpus_as_processes_or_a_single_process_are_let_through(monkeypatch):
    calls = pretend_gpus(monkeypatch, gpus=2, local_world_size=2, local_rank=1)
    assert distributed_setup(cuda=True) == (1, 2, torch.device("cuda:1"))
    assert calls == [("set_device", "cuda:1"), ("init", "nccl")]
    calls = pretend_gpus(monkeypatch, gpus=1, local_world_size=1)  # a plain run on one GPU
    assert distributed_setup(cuda=True) == (0, 1, torch.device("cuda:0"))
    assert calls == [("set_device", "cuda:0")]


PRETEND_ONE_GPU = """
import runpy, sys, torch
torch.cuda.is_available = lambda: True  # a one-GPU machine, for what distributed_setup asks before anything starts
torch.cuda.device_count = lambda: 1
sys.argv[0] = {script!r}
runpy.run_path({script!r}, run_name="__main__")
"""


@pytest.mark.slow
def test_more_processes_than_gpus_under_torchrun_exit_at_once_with_one_line(tmp_path):
    """The launch itself (on a machine that pretends to have one GPU): each worker refuses by itself, before the
    rendezvous (none waits there until torchrun kills it), and the error is printed once, by rank 0."""
    script = ROOT / "ppo_continuous_action.py"
    (tmp_path / "one_gpu.py").write_text(PRETEND_ONE_GPU.format(script=str(script)))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "--monitor-interval", "5", str(tmp_path / "one_gpu.py"), "--env-id", "Pendulum-v1"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath_first(ROOT)}  # runpy does not put it first
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "--nproc-per-node 1" in errors[0] and "--no-cuda" in errors[0], result.stderr[-3000:]
    assert "forcefully" not in result.stderr, result.stderr[-3000:]  # torchrun never had to kill a rank that hung
    # rank 1 refuses by itself (exit code 1), and so does rank 0, unless torchrun saw rank 1 gone first and stopped rank 0
    # after its line (SIGTERM, -15; a loaded machine: seen on a 16-core GPU one under 16 test workers)
    stopped_after_its_line = "closing signal" in result.stderr and "exitcode  : -15 " in result.stderr
    if stopped_after_its_line:
        assert result.stderr.index(errors[0]) < result.stderr.index("closing signal"), result.stderr[-3000:]
    assert result.stderr.count("exitcode  : 1 ") == (1 if stopped_after_its_line else 2), result.stderr[-3000:]
    assert not glob.glob(str(tmp_path / "runs" / "*")), "refused before the run folder is made"


def test_step_budget_counts_the_batches_of_all_ranks(tmp_path, monkeypatch):
    """With 2 ranks an update takes 2 batches: a budget of 1.5 batches would run no update, so it is refused before
    any process joins (no rendezvous is needed to fail)."""
    cont = load_script("ppo_continuous_action")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ArgError, match=r"--total-timesteps 192 is less than one update of 2 processes \(2 x 128 = 256\)"):
        cont.train(cont.Args(env_id="Pendulum-v1", num_steps=128, num_minibatches=4, total_timesteps=192))


def test_rank_seeds_never_collide():
    """seed + rank would give seed 1 rank 1 the streams of seed 2 rank 0. Over seeds 1-200 and 8 ranks, the ranks'
    seeds are all distinct, and the env seeds of a rank > 0 (its seed + env index, 8 envs) are no other run's or rank's.
    Rank 0 keeps --seed (a single process is unchanged: env i gets seed + i, as in CleanRL)."""
    assert [rank_seed(seed, 0) for seed in range(5)] == list(range(5))
    seeds = {(seed, rank): rank_seed(seed, rank) for seed in range(1, 201) for rank in range(8)}
    assert len(set(seeds.values())) == len(seeds)
    env_seeds = {key: {s + i for i in range(8)} for key, s in seeds.items()}
    everyone = [s for envs in env_seeds.values() for s in envs]
    counts = dict(zip(*np.unique(everyone, return_counts=True)))
    assert all(counts[s] == 1 for (seed, rank), envs in env_seeds.items() if rank > 0 for s in envs)
    assert all(0 <= s < 2**31 for s in seeds.values())


def stats_worker(rank, port, tmp_path):
    """Each rank counts observations and returns of its own distribution, twice, agreeing with the other rank after
    each round; saves what it holds."""
    as_rank(rank, port, tmp_path)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    cont = load_script("ppo_continuous_action")
    envs = cont.make_envs(cont.Args(env_id="Pendulum-v1"), "stats")
    for data in rank_data(rank):
        for key, field in (("obs_rms", "obs"), ("return_rms", "returns")):  # M1's and M3's statistics
            wrapper = envs
            while not hasattr(wrapper, key):
                wrapper = wrapper.env
            getattr(wrapper, key).update(data[field])  # as the wrapper updates them
        average_env_statistics(envs, WORLD_SIZE, torch.device("cpu"))
    torch.save(env_statistics(envs), tmp_path / f"stats{rank}.pt")
    torch.distributed.destroy_process_group()


def rank_data(rank):
    g = np.random.default_rng(rank)
    return [
        {"obs": g.normal(rank * 3.0, 1 + rank, size=(n, 3)), "returns": g.normal(-rank, 2 + rank, size=n)} for n in (50, 70)
    ]


@pytest.mark.slow
def test_ranks_agree_on_the_statistics_of_all_ranks(tmp_path):
    """X2: after each update every rank holds the mean and variance of every rank's values together, computed here
    with numpy from all the values (RunningMeanStd's start, count 1e-4 at mean 0 and var 1, weighs nothing here)."""
    mp.spawn(stats_worker, args=(free_port(), tmp_path), nprocs=WORLD_SIZE)
    stats = [torch.load(tmp_path / f"stats{rank}.pt", weights_only=True) for rank in range(WORLD_SIZE)]
    for key, field in (("obs_rms", "obs"), ("return_rms", "returns")):
        values = np.concatenate([data[field] for rank in range(WORLD_SIZE) for data in rank_data(rank)])
        assert torch.equal(stats[0][key]["mean"], stats[1][key]["mean"]), key  # both ranks hold the same, to the bit
        assert torch.equal(stats[0][key]["var"], stats[1][key]["var"]), key
        np.testing.assert_allclose(stats[0][key]["mean"].numpy(), values.mean(0), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(stats[0][key]["var"].numpy(), values.var(0), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------------------
# a worker that dies: torchrun's restarts continue the run from its last checkpoint; without them, the survivor says how


def worker_of_rank(launcher_pid, rank):
    """The pid of torchrun's worker of `rank` (a child of the launcher whose environment holds RANK=rank)."""
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(stat.replace("stat", "environ"), "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:  # a process that ended meanwhile
            continue
        if parent == launcher_pid and f"RANK={rank}".encode() in environ:
            return int(stat.split("/")[2])
    return None


def kill_a_worker_after(tmp_path, restarts, iteration=5, updates=60):
    """A torchrun job (--standalone, 2 workers, a checkpoint every update) whose rank-1 worker is killed (SIGKILL: no
    handler runs) once the run has checkpointed `iteration`; returns (exit code, stdout, stderr, run folder)."""
    flags = [*PENDULUM, "--no-compile", "--total-timesteps", str(2 * 128 * updates), "--checkpoint-interval", "1"]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--max-restarts",
               str(restarts), str(ROOT / "ppo_continuous_action.py"), *flags]  # fmt: skip
    proc = subprocess.Popen(command, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    deadline, reached = time.time() + 180, 0
    while reached < iteration and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
        for path in glob.glob(str(tmp_path / "runs" / "*" / "agent.pt")):
            try:
                reached = torch.load(path, weights_only=True)["iteration"]
            except Exception:  # replaced while read
                pass
    assert proc.poll() is None and reached >= iteration, f"the job ended or stalled: {proc.communicate()[1][-3000:]}"
    os.kill(worker_of_rank(proc.pid, 1), signal.SIGKILL)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers
        out, err = proc.communicate()
        pytest.fail(f"the job did not end within 120 s of the kill: {err[-3000:]}")
    (folder,) = glob.glob(str(tmp_path / "runs" / "*"))
    return proc.returncode, out, err, folder


@pytest.mark.torchrun
def test_a_job_with_restarts_survives_a_killed_worker_and_logs_each_step_once(tmp_path):
    """torchrun --max-restarts 1: the killed worker's group is restarted and continues from the run's last checkpoint,
    in the same run folder, to the step budget: TensorBoard's steps go on without gap or repeat."""
    code, out, err, folder = kill_a_worker_after(tmp_path, restarts=1)
    assert code == 0, err[-3000:]
    assert "torchrun restarts the workers (--max-restarts), which continue from it by themselves" in err
    assert "torchrun restarted the workers (restart 1): the run continues from runs/" in out
    assert [step for step, _ in read_scalars(folder, "charts/SPS")] == [256 * k for k in range(1, 61)]
    assert torch.load(os.path.join(folder, "agent.pt"), weights_only=True)["iteration"] == 60


@pytest.mark.torchrun
def test_without_restarts_the_surviving_worker_names_the_checkpoint_and_the_command(tmp_path):
    code, out, err, folder = kill_a_worker_after(tmp_path, restarts=0)
    path = os.path.join(os.path.relpath(folder, tmp_path), "agent.pt")
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code != 0 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("error: another process of this torchrun job ended (") and lines[0].endswith(
        f"; the last checkpoint: {path}; continue with: torchrun --standalone --nproc-per-node 2 "
        f"{ROOT / 'ppo_continuous_action.py'} --resume {path}"
    )
    assert "[rank0]: Traceback" not in err  # the survivor's own traceback; torchrun's report of the dead worker stays
