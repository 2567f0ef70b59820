"""Runs a PPO script (ours or CleanRL's) as `python SCRIPT FLAGS` would, and records the numbers it computes, for
tests/test_cleanrl_numbers.py to compare between the two:

    python tests/numbers_tap.py OUT STEPS_PER_UPDATE SCRIPT [FLAGS...]

writes to OUT (torch.save) a dict with
- "names", "initial": the agent's parameter names and values when the optimizer is made (the initial weights);
- "rollouts": for each update, the rollout storage (obs, actions, logprobs, rewards, dones, values) as it stands at
  the update's first optimizer step;
- "updates": for each update, the parameter values after its last optimizer step (STEPS_PER_UPDATE steps an update).

Both scripts name their agent `agent` and their rollout storage `obs`, `actions`, ... (ours kept CleanRL's names), so
the tap reads them from the frames that call Adam, whatever the script; it changes nothing that either computes. The
script's own folder must be on PYTHONPATH (ours imports ppo_utils, CleanRL's cleanrl_utils)."""

import runpy
import sys

import torch

STORAGE = ("obs", "actions", "logprobs", "rewards", "dones", "values")


def find_in_frames(names):
    """The variables `names` of the innermost frame that holds them all, above the tap's own two frames."""
    frame = sys._getframe(2)
    while frame is not None and not all(name in frame.f_locals for name in names):
        frame = frame.f_back
    if frame is None:
        raise LookupError(f"no calling frame holds {names}")
    return {name: frame.f_locals[name] for name in names}


def tap(steps_per_update):
    """Puts a recording Adam in torch.optim's place; returns the record it fills."""
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
                # ours keeps the rewards and episode ends in numpy arrays until the rollout ends
                record["rollouts"].append({key: torch.as_tensor(v).detach().cpu().clone() for key, v in storage.items()})
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
    record = tap(int(steps_per_update))
    sys.argv = [script, *flags]
    runpy.run_path(script, run_name="__main__")
    torch.save(record, out)
