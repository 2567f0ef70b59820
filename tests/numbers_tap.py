"""Runs a PPO script (ours or CleanRL's) as `python SCRIPT FLAGS` would, and records the numbers it computes, for
tests/test_cleanrl_numbers.py to compare between the two:

    python tests/numbers_tap.py OUT STEPS_PER_UPDATE SCRIPT [FLAGS...]

writes to OUT (torch.save) a dict with
- "names", "initial": the agent's parameter names and values when the optimizer is made (the initial weights);
- "rollouts": for each update, the rollout storage (obs, actions, logprobs, rewards, dones, values) as it stands at
  the update's first optimizer step;
- "updates": for each update, the parameter values after its last optimizer step (STEPS_PER_UPDATE steps an update).

Both scripts name their agent `agent` and their rollout storage `obs`, `actions`, ... (ours kept CleanRL's names), so
the tap reads them from the frames that call Adam, whatever the script; it changes nothing that either computes."""

import inspect
import runpy
import sys
from pathlib import Path

import torch

STORAGE = ("obs", "actions", "logprobs", "rewards", "dones", "values")


def find_in_frames(names):
    """The innermost calling frame's variables that hold all of `names`."""
    for frame_info in inspect.stack()[2:]:
        variables = frame_info.frame.f_locals
        if all(name in variables for name in names):
            return {name: variables[name] for name in names}
    raise LookupError(f"no calling frame holds {names}")


def tap(out, steps_per_update):
    record = {"rollouts": [], "updates": []}
    Adam = torch.optim.Adam

    class TapAdam(Adam):
        def __init__(self, params, *args, **kwargs):
            params = list(params)
            agent = find_in_frames(["agent"])["agent"]
            names = {id(p): name for name, p in agent.named_parameters()}
            record["names"] = [names[id(p)] for p in params]
            record["initial"] = [p.detach().clone() for p in params]
            self.steps_taken = 0
            super().__init__(params, *args, **kwargs)

        def step(self, *args, **kwargs):
            if self.steps_taken % steps_per_update == 0:
                storage = find_in_frames(STORAGE)
                record["rollouts"].append({key: value.detach().cpu().clone() for key, value in storage.items()})
            result = super().step(*args, **kwargs)
            self.steps_taken += 1
            if self.steps_taken % steps_per_update == 0:
                params = [p for group in self.param_groups for p in group["params"]]
                record["updates"].append([p.detach().cpu().clone() for p in params])
            return result

    torch.optim.Adam = TapAdam
    return record


if __name__ == "__main__":
    out, steps_per_update, script, *flags = sys.argv[1:]
    record = tap(out, int(steps_per_update))
    sys.argv = [script, *flags]
    sys.path.insert(0, str(Path(script).resolve().parent))  # ours imports ppo_utils, CleanRL's cleanrl_utils
    runpy.run_path(script, run_name="__main__")
    torch.save(record, out)
