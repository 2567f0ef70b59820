"""The agents' optimizer of ppo_continuous_action_seeds.py (`AgentsAdam`): Adam (G11) over parameters stacked on a
leading agent axis, each agent's moments, step count, learning rate and epsilon its own, and each agent's part as a
torch.optim.Adam of views of its rows (what its checkpoint saves and --resume loads). Adam's numbers are
torch.optim.adam.adam's: it decides no PPO detail."""

from functools import partial

import numpy as np
import torch
from torch.optim.adam import adam


class AgentsAdam:
    """Adam (G11) for agents whose parameters are stacked on a leading agent axis: as torch.optim.Adam (fused, or
    PyTorch's default) steps each agent's own parameters, each with its own moments, step count, learning rate and
    epsilon (param_groups[i]["lr"] and ["eps"]: agent i's, which G6 anneals), in one call of torch.optim.adam.adam per
    minibatch and group of running agents that share a learning rate and epsilon: over the stacked tensors while all
    agents run with equal step counts and share them, else over the group's rows (X3 stops agents one by one: a stopped
    agent's parameters, moments and step count stay)."""

    def __init__(self, params, lr, eps, fused):
        """lr, eps: one per agent."""
        self.params, self.fused = list(params), fused
        self.param_groups = [{"lr": rate, "eps": epsilon} for rate, epsilon in zip(lr, eps, strict=True)]
        self.exp_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        device = self.params[0].device if fused else "cpu"  # where torch.optim.Adam keeps its step counts
        self.steps = torch.zeros(len(self.params[0]), dtype=torch.float32, device=device)  # each agent's
        self.counts = np.zeros(len(self.params[0]), dtype=np.int64)  # the same on the host

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, running):
        """One Adam step of the agents where `running` (a bool per agent) holds, each with its param group's lr and eps."""
        groups = {}  # (lr, eps) -> the running agents that step with them, in order
        for i in np.flatnonzero(running):
            groups.setdefault((self.param_groups[i]["lr"], self.param_groups[i]["eps"]), []).append(i)
        for (lr, eps), agents in groups.items():
            self.step_rows(agents, lr, eps)
        self.steps += torch.as_tensor(running, device=self.steps.device)
        self.counts += running

    def step_rows(self, agents, lr, eps):
        """torch.optim.adam.adam over the rows of `agents`: one slice of each stacked tensor where they are consecutive
        rows with one step count (all agents, where they share everything), else each agent's rows apart."""
        k, first, end = len(self.params), agents[0], agents[-1] + 1
        tensors = (self.params, [p.grad for p in self.params], self.exp_avgs, self.exp_avg_sqs)
        if end - first == len(agents) and (self.counts[first:end] == self.counts[first]).all():
            params, grads, avgs, sqs = ([t[first:end] for t in kind] for kind in tensors)
            steps = self.steps[first : first + 1].repeat(k)  # copies, which adam() counts up
        else:
            params, grads, avgs, sqs = ([t[i] for i in agents for t in kind] for kind in tensors)  # each agent's rows
            steps = self.steps[torch.as_tensor(agents, device=self.steps.device)].repeat_interleave(k)
        adam(params, grads, avgs, sqs, [], list(steps.unbind()), fused=self.fused, amsgrad=False, beta1=0.9, beta2=0.999,
             lr=lr, weight_decay=0.0, eps=eps, maximize=False)  # fmt: skip

    def agent_optimizer(self, i, params):
        """Agent i's part as a torch.optim.Adam over `params` (its parameters, views of row i) whose state views row i
        of the moments and step counts: its state_dict() is what ppo_continuous_action.py's optimizer saves, and its
        load_state_dict() (--resume) loads such a state into row i (load_agent), where torch's would replace the views."""
        group = self.param_groups[i]
        optimizer = torch.optim.Adam(params, lr=group["lr"], eps=group["eps"], fused=self.fused)
        for p, avg, sq in zip(optimizer.param_groups[0]["params"], self.exp_avgs, self.exp_avg_sqs):
            optimizer.state[p] = {"step": self.steps[i], "exp_avg": avg[i], "exp_avg_sq": sq[i]}
        optimizer.load_state_dict = partial(self.load_agent, i)
        return optimizer

    def load_agent(self, i, saved):
        """Loads a torch.optim.Adam state_dict of one agent (its checkpoint's) into row i."""
        for k, entry in saved["state"].items():
            self.exp_avgs[k][i].copy_(entry["exp_avg"])
            self.exp_avg_sqs[k][i].copy_(entry["exp_avg_sq"])
            self.steps[i], self.counts[i] = entry["step"], int(entry["step"])
