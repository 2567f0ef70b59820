"""Loads the scripts as modules (they are files at the repository's top level, not a package) and runs them; the
helpers the test modules share (no test module imports another): agents on stand-in spaces, fixed and recorded
training batches, the loss written from the formulas, the detail contract of docs/details.md.

Devices: a helper's tensors live on the device of what it is given (the agent's parameters, a run's rollout), so that a
test computes on one device wherever it runs. make_agent builds its agent on the CPU (Args.cuda is not looked at:
nothing moves it); rollout_batch's run trains where Args.cuda puts it (a GPU when one is visible, unless cuda=False).
Random numbers are drawn on the CPU from seeded generators and then moved, so that they are the same on every device."""

import importlib.util
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Discrete

# Each pytest-xdist worker takes its share of the cores: torch's threads and inductor's compile processes default to
# every core, which with one worker per core is cores x cores of each (256 on a 16-core GPU machine).
CORES_EACH = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(CORES_EACH))  # read when inductor is first imported
torch.set_num_threads(CORES_EACH)

ROOT = Path(__file__).resolve().parent.parent  # on pytest's path (pyproject.toml), so the scripts find ppo_utils


# The suite's tiers (docs/tests.md; pyproject.toml declares the markers): a test marked none of TIERS is a unit test, in
# this process and quick, and gets the marker `unit` here (`python -m pytest -m unit`, under a minute on 2 cores).
# `slow` (a script, a tool or a short training run in seconds) and `docs` run with the unit tests in the README's
# command; `learning`, `torchrun` and `long` only in the full suite (`python -m pytest`).
TIERS = ("slow", "docs", "learning", "torchrun", "long")
HEAVY = ("slow", "learning", "torchrun", "long")


def tier_of(item):
    """The tier marker a test carries, else unit."""
    return next((tier for tier in TIERS if item.get_closest_marker(tier) is not None), "unit")


def pytest_collection_modifyitems(config, items):
    """Each test's tier as its marker (tier_of: `unit` where it carries none). The heavy tests first (the order is
    stable otherwise), so that with several workers none starts last and tails the run. Where envpool is missing, the
    ppo_masked.py cases of the tests that run a script (in tmp_path) are skipped, naming it: its tasks (its default,
    Knapsack-v1) are envpool's."""
    for item in items:
        tier = tier_of(item)
        if tier == "unit" or item.get_closest_marker(tier) is None:
            item.add_marker(tier)
    items.sort(key=lambda item: tier_of(item) not in HEAVY)
    if importlib.util.find_spec("envpool") is None:
        skip = pytest.mark.skip(
            reason="ppo_masked.py's tasks are envpool's: needs envpool (in requirements.txt), not installed"
        )
        for item in items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if "ppo_masked" in (params.get("name"), params.get("script")) and "tmp_path" in item.fixturenames:
                item.add_marker(skip)


def load_script(name):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def training_scripts():
    """The scripts the shared tests run, a researcher's copied and changed ppo_*.py included: ppo.py and each ppo_*.py
    whose checkpoints name the script itself (Args.script). ppo_continuous_action_seeds.py, whose agents' checkpoints are
    ppo_continuous_action.py's, is a variant with tests of its own (test_seeds.py)."""
    paths = [ROOT / "ppo.py", *ROOT.glob("ppo_*.py")]
    return sorted(path.stem for path in paths if path.exists() and load_script(path.stem).Args.script == path.name)


SCRIPTS = training_scripts()
FEED_FORWARD = [name for name in SCRIPTS if not hasattr(load_script(name).Agent, "initial_state")]  # no memory (B2)
RECURRENT = [name for name in SCRIPTS if name not in FEED_FORWARD]


def skipping(names, reasons):
    """The script names as pytest parameters, each one that `reasons` names skipped with its reason: a shared test that
    cannot drive that script says why in its parametrization."""
    return [pytest.param(name, marks=pytest.mark.skip(reason=reasons[name])) if name in reasons else name for name in names]


def continuous(script):
    """Whether a script takes continuous actions (MuJoCo), given the module or its name."""
    return "continuous" in as_script(script).Args.env_kinds


def free_port():
    """A TCP port on the loopback that nothing listens on now (torchrun's and PostgreSQL's tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def restored_env_statistics(module, monkeypatch):
    """A list that gets the env statistics (env_statistics()) that `module`'s restore() leaves in the envs, once per
    --resume of module.train(): what a resumed run starts from."""
    from ppo_utils.env_statistics import env_statistics

    restored, restore = [], module.restore

    def restore_and_look(checkpoint, agent, optimizer, envs, rank, args):
        last_update = restore(checkpoint, agent, optimizer, envs, rank, args)
        restored.append(env_statistics(envs))
        return last_update

    monkeypatch.setattr(module, "restore", restore_and_look)
    return restored


def needs(*modules):
    """A mark that skips a test when one of these packages is missing, naming it: requirements.txt installs them all
    (CI runs every test), but a GPU machine with its own torch may lack envpool, wandb, moviepy or rliable."""
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (in requirements.txt), not installed here")


@pytest.fixture(params=SCRIPTS)
def script(request):
    """Each script in turn, for the tests of the pieces they share."""
    return load_script(request.param)


@pytest.fixture
def cont():
    return load_script("ppo_continuous_action")


def script_env(extra=None):
    """The environment a script runs in here: one torch thread, so that runs do not fight over the two cores; wandb
    offline."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", **(extra or {})}


class ForkServer:
    """tests/forkserver.py, started on the first run_script of this pytest process: runs a script in a forked copy of
    a Python that has imported torch and the rest once. It takes a run only when the run's environment is the one it
    was started in but for PYTHONPATH and pytest's name of the test (PPO_TESTS_FORK=0: never)."""

    process = None
    lock = threading.Lock()

    @classmethod
    def takes(cls, env):
        if os.environ.get("PPO_TESTS_FORK") == "0" or (cls.process is not None and cls.process.poll() is not None):
            return False
        if cls.process is None:
            cls.env = script_env()
            cls.process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "forkserver.py")], env=cls.env,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)  # fmt: skip
            cls.pending = b""
        without_path = lambda e: {k: v for k, v in e.items() if k not in ("PYTHONPATH", "PYTEST_CURRENT_TEST")}  # noqa: E731
        return without_path(env) == without_path(cls.env)

    @classmethod
    def answer(cls, timeout):
        """The server's next line, read from its pipe unbuffered (so that select sees every byte not yet read)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in cls.pending:
            ready, _, _ = select.select([cls.process.stdout], [], [], max(0, deadline - time.monotonic()))
            chunk = os.read(cls.process.stdout.fileno(), 4096) if ready else None
            if chunk is None:
                raise TimeoutError
            if not chunk:
                raise RuntimeError(f"tests/forkserver.py exited {cls.process.wait()}")
            cls.pending += chunk
        line, cls.pending = cls.pending.split(b"\n", 1)
        return line.decode()

    @classmethod
    def run(cls, args, cwd, env, timeout):
        with tempfile.TemporaryDirectory() as folder:
            out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
            request = {"script": args[1], "argv": args[2:], "cwd": str(cwd), "env": env, "stdout": out, "stderr": err}
            cls.process.stdin.write(json.dumps(request).encode() + b"\n")
            pid = int(cls.answer(timeout=60))
            try:
                returncode = int(cls.answer(timeout))
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                cls.answer(timeout=60)
                returncode = None
            stdout, stderr = Path(out).read_text(), Path(err).read_text()
        if returncode is None:
            raise subprocess.TimeoutExpired(args, timeout, stdout, stderr)
        return subprocess.CompletedProcess(args, returncode, stdout, stderr)


def run_script(name, *flags, cwd, timeout=600, env=None):
    """Runs a script as a user would, in `cwd`, in script_env: through the fork server where it takes the run (the
    same process a fresh `python` makes, less its start), else in a new Python."""
    args, env = [sys.executable, str(ROOT / f"{name}.py"), *flags], script_env(env)
    if ForkServer.lock.acquire(blocking=False):
        try:
            if ForkServer.takes(env):
                return ForkServer.run(args, cwd, env, timeout)
        finally:
            ForkServer.lock.release()
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def run_script_until(name, *flags, cwd, enough, timeout=600):
    """run_script, stopped with SIGTERM (the script saves, says how to resume and exits 0) at the first progress line
    whose mean return of the last 20 episodes is `enough` or more. For a learning test whose criterion is any
    20-episode window: that line's episodes are such a window in the event file, so a run that passes stops there
    instead of finishing its budget, and one that never gets there trains it all."""
    with open(Path(cwd) / "stderr.txt", "w+") as err:
        proc = subprocess.Popen([sys.executable, str(ROOT / f"{name}.py"), *flags], cwd=cwd, text=True,
                                env=script_env({"PYTHONUNBUFFERED": "1"}), stdout=subprocess.PIPE, stderr=err)  # fmt: skip
        lines, timed_out = [], []

        def kill():  # as run_script's timeout: a run that hangs without a line ends too
            timed_out.append(True)
            proc.kill()

        watchdog = threading.Timer(timeout, kill)
        watchdog.start()
        for line in proc.stdout:
            lines.append(line)
            mean = re.search(r"mean return \(last 20\) (-?[\d.]+)", line)
            if mean and float(mean.group(1)) >= enough:
                proc.send_signal(signal.SIGTERM)
                break
        lines += proc.stdout.readlines()
        proc.wait()
        watchdog.cancel()
        err.seek(0)
        if timed_out:
            raise subprocess.TimeoutExpired(proc.args, timeout, "".join(lines), err.read())
        return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines), err.read())


def pythonpath_first(folder):
    """A PYTHONPATH that puts `folder` first and keeps what PYTHONPATH held (a GPU machine's installed wheels, say)."""
    return os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))


def main_block(name):
    """A script's `if __name__ == "__main__":` block, compiled to run in its module's namespace (load_script's)."""
    import ast

    path = ROOT / f"{name}.py"
    tree = ast.parse(path.read_text())
    (block,) = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"]
    return compile(ast.Module(body=block.body, type_ignores=[]), str(path), "exec")


# the warnings Python leaves unprinted by default (a user's `python script.py` shows every other one on stderr)
UNSHOWN = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def run_main_here(name, *flags, cwd, monkeypatch, capfd, path_first=None):
    """`python <name>.py <flags>` run in `cwd` without a new process, for the checks a bad command line must meet before
    a run starts: the script's own __main__ block (tyro parses sys.argv; main() turns an error into one line and an
    exit code) in its module, with `path_first` first on the import path as PYTHONPATH puts it for run_script. Its
    distributed_setup, the first step of a run after the checks, raises instead, so that a bad input let through fails
    the test where a process would have trained. Returns (exit code, stderr as the user reads it: what reached file
    descriptor 2, then each warning a process would have printed, one line each). main() sets SIGINT and SIGTERM
    handlers; pytest's are put back."""
    import warnings

    module = load_script(name)

    def run_started(*args, **kwargs):
        raise AssertionError(f"{name}.py {' '.join(flags)} was let through: the run started")

    monkeypatch.setattr(module, "distributed_setup", run_started)
    monkeypatch.setattr(sys, "argv", [str(ROOT / f"{name}.py"), *flags])
    monkeypatch.chdir(cwd)
    if path_first is not None:
        monkeypatch.syspath_prepend(str(path_first))
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    capfd.readouterr()
    code = 0
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for category in UNSHOWN:
                warnings.filterwarnings("ignore", category=category)
            try:
                exec(main_block(name), vars(module))
            except SystemExit as end:
                code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    shown = [f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught]
    return code, capfd.readouterr().err + "".join(line + "\n" for line in shown)


def forget_modules(names, env_ids=()):
    """Drops modules a test imported from its own folder (sys.modules) and the env ids they registered (gymnasium's
    registry; "Maskprobe*" names every id that starts so), so that the next test imports its own copy as a new process
    would."""
    import gymnasium

    for module in names:
        sys.modules.pop(module, None)
    prefixes = tuple(env_id[:-1] for env_id in env_ids if env_id.endswith("*"))  # "Maskprobe*": every id it starts
    for env_id in list(gymnasium.envs.registry):
        if env_id in env_ids or (prefixes and env_id.startswith(prefixes)):
            del gymnasium.envs.registry[env_id]


def write_checkpoint(path, args, **extra):
    """A checkpoint file of a run of `args` as load_checkpoint reads it, holding no agent: enough for what is checked
    before an agent is made (flags, script, env, process count)."""
    from ppo_utils import checkpoints

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    checkpoint = {key: None for key in checkpoints.CHECKPOINT_KEYS} | {"run_name": Path(path).parent.name, "iteration": 0}
    checkpoint |= {"kl_beta": args.kl_beta, "rng": checkpoints.rng_state()}
    checkpoint |= {"global_step": extra.get("iteration", 0) * args.batch_size * extra.get("world_size", 1)}
    torch.save({**checkpoint, "script": args.script, "args": asdict(args), **extra}, path)
    return str(path)


def read_scalars(run_dir, tag):
    """The (step, value) pairs of one TensorBoard tag in a run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


# ---------------------------------------------------------------------------------------------------------------------
# agents on stand-in spaces


def as_script(script):
    """A script module, given the module or its name."""
    return load_script(script) if isinstance(script, str) else script


# the stand-in spaces of the discrete scripts: (observation shape, number of actions). ppo.py: CartPole's; ppo_masked.py:
# vector observations and 4 actions, some of which each fixed batch's masks leave invalid (D1)
DISCRETE_SPACES = {"ppo_atari": ((4, 84, 84, 1), 4), "ppo_rnn": ((2,), 2), "ppo": ((4,), 2), "ppo_masked": ((4,), 4)}


def observation_and_action_spaces(script, obs_shape=None, n_actions=None):
    """The spaces make_agent builds an agent for: the continuous scripts, Box observations (11,) and Box actions (3,);
    the discrete ones, DISCRETE_SPACES' (Atari's uint8 frames (4, 84, 84, 1) and Discrete(4); rnn's vector observations
    (2,) and Discrete(2); ppo.py's CartPole spaces, (4,) and Discrete(2); ppo_masked.py's (4,) and Discrete(4), the
    vector observation its D3 makes of a dict one). obs_shape and n_actions (the continuous agent's action size)
    override the defaults; an obs_shape of three or more dimensions is uint8 frames."""
    name = as_script(script).__name__
    if continuous(script):
        return Box(-np.inf, np.inf, obs_shape or (11,), np.float32), Box(-1.0, 1.0, (n_actions or 3,), np.float32)
    obs_shape = obs_shape or DISCRETE_SPACES[name][0]
    n_actions = n_actions or DISCRETE_SPACES[name][1]
    if len(obs_shape) >= 3:
        return Box(0, 255, obs_shape, np.uint8), Discrete(n_actions)
    return Box(-np.inf, np.inf, obs_shape, np.float32), Discrete(n_actions)


def device_of(agent):
    """The device an agent's parameters live on."""
    return next(agent.parameters()).device


def make_agent(script, obs_shape=None, n_actions=None, **flags):
    """script.Agent for the spaces above and script.Args(**flags), torch seeded with 0 first; on the CPU, whatever
    flags["cuda"] says (move it with .to(device))."""
    script = as_script(script)
    obs_space, action_space = observation_and_action_spaces(script, obs_shape, n_actions)
    torch.manual_seed(0)
    spaces = SimpleNamespace(single_observation_space=obs_space, single_action_space=action_space)
    return script.Agent(spaces, script.Args(**flags))


def random_obs(space, n, g):
    """n random observations of `space`: uint8 frames, or standard normal vectors; on the CPU (g is a CPU generator)."""
    if space.dtype == np.uint8:
        return torch.randint(0, 256, (n,) + space.shape, dtype=torch.uint8, generator=g)
    return torch.randn((n,) + space.shape, generator=g)


def masked(agent):
    """Whether an agent takes an action mask (ppo_masked.py's: D1, its actions one column per component, D2)."""
    return hasattr(agent, "nvec")


def all_valid(agent, n, device):
    """A masked agent's mask of n rows that allows every action of every component."""
    return torch.ones((n, sum(agent.nvec)), dtype=torch.bool, device=device)


def random_masks(agent, n, g):
    """n random action masks of a masked agent (on the CPU; g is a CPU generator): each action valid with probability
    3/4, and in each row of each component at least one (the first, where the draws left none)."""
    masks = torch.rand((n, sum(agent.nvec)), generator=g) < 0.75
    for part in masks.split(agent.nvec, dim=1):  # views of masks
        part[~part.any(1), 0] = True
    return masks


def forward(agent, obs, action=None):
    """(action, logprob, entropy, value) of any script's agent; a recurrent one takes obs as one step of len(obs) envs
    from its zero initial state, made on obs's device; a masked one, a mask that allows every action."""
    if hasattr(agent, "initial_state"):
        state, done = agent.initial_state(len(obs), obs.device), torch.zeros(len(obs), device=obs.device)
        return agent.get_action_and_value(obs, state, done, action)[:4]
    if masked(agent):
        return agent.get_action_and_value(obs, all_valid(agent, len(obs), obs.device), action)
    return agent.get_action_and_value(obs, action)


# ---------------------------------------------------------------------------------------------------------------------
# training batches


def fixed_batch(script, agent, n=64, seed=1, obs_shape=None):
    """A feed-forward script's flat training batch of n random observations (of make_agent's obs_shape), with the
    agent's own actions, log-probs and values, and random advantages and returns; on the agent's device (the same
    numbers on every device). A masked agent's batch holds random_masks too ("masks", as train() builds it), under
    which its actions were drawn."""
    g, device = torch.Generator().manual_seed(seed), device_of(agent)
    obs = random_obs(observation_and_action_spaces(script, obs_shape)[0], n, g).to(device)
    masks = {"masks": random_masks(agent, n, g).to(device)} if masked(agent) else {}
    with torch.no_grad():
        actions, logprobs, _, values = agent.get_action_and_value(obs, *masks.values())
    advantages = torch.randn(n, generator=g).to(device) * 3 + 1
    return {
        "obs": obs,
        **masks,
        "actions": actions,
        "logprobs": logprobs,
        "advantages": advantages,
        "returns": values.flatten() + torch.randn(n, generator=g).to(device),
        "values": values.flatten(),
    }


# each recurrent script's small task, on which an early policy's episodes (about 20 and 5 steps) end inside 64 steps
ROLLOUT_ENVS = {"ppo_rnn": "CartPoleNoVelocity-v1", "ppo_rnn_continuous_action": "InvertedPendulum-v5"}


def rollout_batch(tmp_path, monkeypatch, script="ppo_rnn", **flags):
    """A recurrent script's batch: a real rollout of 4 envs x 64 steps on its ROLLOUT_ENVS task, with a zero learning
    rate, so that the agent after the run is the rollout's; returns it with the flat batch, random advantages added,
    and the Args. The run trains where flags["cuda"] (Args' default: True) puts it; the batch is on the rollout's
    device, the agent's."""
    rnn = as_script(script)
    monkeypatch.chdir(tmp_path)
    defaults = dict(env_id=ROLLOUT_ENVS[rnn.__name__], num_envs=4, num_steps=64, total_timesteps=256, num_minibatches=2)
    args = rnn.Args(**{**defaults, "update_epochs": 1, "learning_rate": 0.0, **flags})
    result = rnn.train(args)
    r = result["rollout"]
    device = r["obs"].device  # the rewards and dones of train()'s rollout stay on the host
    batch = {key: r[key].flatten(0, 1).to(device) for key in ("obs", "actions", "logprobs", "values", "dones")}
    advantages = torch.randn(len(batch["obs"]), generator=torch.Generator().manual_seed(0))  # the same on every device
    batch["advantages"] = advantages.to(device)
    batch["returns"] = batch["values"] + batch["advantages"]
    batch["state"] = r["initial_state"]
    return result["agent"], batch, args


def update_case(script, tmp_path, monkeypatch):
    """(agent, batch, args) for one update_policy call of any script: the feed-forward scripts get fixed_batch (64
    samples, 4 minibatches); the recurrent ones, whose minibatches are whole env sequences with recomputed states, get
    rollout_batch (4 envs x 64 steps, 2 minibatches). Each case is on one device: the feed-forward ones on the CPU
    (make_agent's), the recurrent ones on their run's device (a GPU where one is visible)."""
    script = as_script(script)
    if hasattr(script.Agent, "initial_state"):
        return rollout_batch(tmp_path, monkeypatch, script)
    agent = make_agent(script)
    return agent, fixed_batch(script, agent), script.Args(num_envs=1, num_steps=64, num_minibatches=4)


def batch_logprobs(agent, batch):
    """The agent's log-probabilities of the batch's actions; a recurrent agent runs the batch's sequences from their
    initial state through their dones; a masked one takes each action's mask from the batch."""
    with torch.no_grad():
        if "state" in batch:
            return agent.get_action_and_value(batch["obs"], batch["state"], batch["dones"], batch["actions"])[1]
        return agent.get_action_and_value(batch["obs"], *masks_of(batch), batch["actions"])[1]


def masks_of(batch):
    """[the batch's action masks] where it has them (a masked script's), else []: the masked agent's extra argument."""
    return [batch["masks"]] if "masks" in batch else []


def reference_minibatch_loss(agent, mb, args, clip_coef):
    """The reference's loss written out from the formulas, independently of the script's loss functions."""
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb["obs"], *masks_of(mb), mb["actions"])
    ratio = (newlogprob - mb["logprobs"]).exp()
    adv = mb["advantages"]
    if args.norm_adv:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv).mean()
    v = newvalue.flatten()
    v_clipped = mb["values"] + (v - mb["values"]).clamp(-clip_coef, clip_coef)
    v_loss = 0.5 * torch.max((v - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2).mean()
    return -surrogate - args.ent_coef * entropy.mean() + args.vf_coef * v_loss


# ---------------------------------------------------------------------------------------------------------------------
# the README and the detail contract


def readme_block(heading):
    """The first bash block of the README's section `heading`."""
    section = (ROOT / "README.md").read_text().split(f"## {heading}", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


DETAILS = ROOT / "docs" / "details.md"  # the flag contract: ids, names, defaults
COLUMNS = {
    "ppo_atari": "A",
    "ppo_continuous_action": "C",
    "ppo_rnn": "R",
    "ppo_rnn_continuous_action": "RC",
    "ppo": "P",
    "ppo_masked": "PM",
}


def contract_flags(script_name):
    """(flag, detail id) pairs the contract gives this script; the id is None for the common research flags."""
    column, section, pairs = COLUMNS[script_name], None, []
    for line in DETAILS.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].split()[0]
        elif section == "Common" and "`--" in line:
            pairs += [(flag, None) for flag in re.findall(r"`--([a-z0-9-]+)", line)]
        elif line.startswith("| ") and not line.startswith(("| id", "| ---")):
            cells = [c.strip() for c in line.strip("|").split("|")]
            owners = {"MuJoCo": ["C", "RC"], "Atari": ["A", "R"], "Discrete-action": ["PM"]}.get(
                section, list(COLUMNS.values())
            )
            if section == "General":
                owners = [k for k, c in zip(COLUMNS.values(), cells[3:]) if c != "-"]
            if cells[0] == "B2":
                owners = ["R", "RC"]
            if column in owners and cells[0] != "X2":  # X2 is a launcher (torchrun), not a flag
                pairs += [(flag, cells[0]) for flag in re.findall(r"`--([a-z0-9-]+)", cells[2]) if flag != "envpool"]
    return pairs
