"""X2, the update run in parallel by several processes under torchrun: the process group and each rank's device,
each rank's seed (train() seeds with it), and the averaging that keeps the ranks' parameters and normalization
statistics identical (the gradients before each optimizer step, the M1/M3 statistics after each update). A single
process (no torchrun) is rank 0 of 1, for which each of these leaves everything as it is."""

import os

import numpy as np
import torch
import torch.distributed as dist

from .env_statistics import env_statistics, set_env_statistics
from .flag_checks import ArgError


def launched_processes():
    """X2: how many processes torchrun started for this run (its WORLD_SIZE); 1 for a plain run."""
    return int(os.environ.get("WORLD_SIZE", 1))


def process_rank():
    """X2: this process's rank among them (torchrun's RANK); 0 for a plain run, the one that speaks and writes."""
    return int(os.environ.get("RANK", 0))


def processes_per_machine():
    """X2: how many of them torchrun started on this machine (its LOCAL_WORLD_SIZE); 1 for a plain run."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", 1))


def rank_seed(seed, rank):
    """X2: the seed of rank `rank`'s python, numpy and torch generators (its env i gets this + i). Rank 0 keeps --seed, so
    a single process is unchanged; rank r > 0 takes a number numpy's SeedSequence derives from (seed, r), so that
    neighbouring seeds share no stream (with seed + r, seed 1 rank 1 would be seed 2 rank 0)."""
    return seed if rank == 0 else int(np.random.SeedSequence([seed, rank]).generate_state(1)[0] % 2**31)


def distributed_setup(cuda):
    """X2: under torchrun (which sets RANK, WORLD_SIZE and LOCAL_RANK) joins the process group, gloo on CPUs, NCCL on
    GPUs with rank r on GPU LOCAL_RANK of its node; a plain run is rank 0 of 1. Returns (rank, world_size, device).
    More processes on a node than it has GPUs (with --cuda) is an ArgError before the rendezvous: every rank of the node
    sees the same counts and raises it, so none is left waiting for the others."""
    rank, world_size = process_rank(), launched_processes()
    use_cuda = torch.cuda.is_available() and cuda
    local_rank, local_world_size = int(os.environ.get("LOCAL_RANK", 0)), processes_per_machine()
    gpus = torch.cuda.device_count() if use_cuda else 0
    if use_cuda and max(local_world_size, local_rank + 1) > gpus:
        raise ArgError(
            f"torchrun starts {max(local_world_size, local_rank + 1)} processes on this machine, which has {gpus} "
            f"GPU{'s' if gpus > 1 else ''} (with --cuda each process takes one); pass --nproc-per-node {gpus} (at most "
            "the GPU count), or --no-cuda to run on CPUs"
        )
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if use_cuda else "gloo"
        try:
            dist.init_process_group(backend, rank=rank, world_size=world_size, store=workers_start_store(rank, world_size))
        except Exception as e:
            raise ArgError(
                f"torchrun: the {backend} backend did not start ({type(e).__name__}: {e}); check --nnodes, --node-rank and "
                "--rdzv-endpoint"
            ) from None
    return rank, world_size, device


def workers_start_store(rank, world_size):
    """X2: the store the process group meets on. torchrun restarts a job's workers (--max-restarts, after one died) on
    the store of its first start, where the first workers' gloo addresses still stand: the restarted workers would
    wait on a dead peer, or be refused (seen with torch 2.13 in most restarts). Each start of the workers keeps its keys
    under a prefix of its own (torchrun's TORCHELASTIC_RESTART_COUNT). None (torch's env:// store) without torchrun."""
    start = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if start is None:
        return None
    hosted_by_torchrun = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # else rank 0 hosts it, as env:// does
    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    store = dist.TCPStore(address, port, world_size, is_master=rank == 0 and not hosted_by_torchrun)
    return dist.PrefixStore(f"ppo_workers_start_{start}", store)


def all_ranks_mean(tensor, world_size):
    """X2: the mean of `tensor` over all ranks, in place; a single process keeps it as it is."""
    if world_size > 1:
        dist.all_reduce(tensor)
        tensor /= world_size
    return tensor


def average_gradients(parameters, world_size):
    """X2: replaces each gradient by its mean over all ranks (one all-reduce for all of them), so that every rank takes
    the same optimizer step; a single process keeps its gradients."""
    if world_size > 1:
        grads = [p.grad for p in parameters if p.grad is not None]
        averaged = all_ranks_mean(torch.cat([g.flatten() for g in grads]), world_size)
        for g, mean in zip(grads, averaged.split([g.numel() for g in grads])):
            g.copy_(mean.view_as(g))


def broadcast_parameters(agent, world_size):
    """X2: every rank takes rank 0's parameters; a single process keeps its own."""
    if world_size > 1:
        for param in agent.parameters():
            dist.broadcast(param.data, src=0)


def average_env_statistics(envs, world_size, device):
    """X2: replaces each rank's normalization statistics (M1, M3) by those of all ranks' values together: the mean of
    the ranks' means, and the mean of each rank's variance plus its mean's squared distance from that mean. Since the
    ranks agreed last, each has counted equally many values, so this is what one process seeing every rank's values
    would hold (with the count of one rank, which keeps the weight of later values the same). A single process keeps
    its own."""
    if world_size == 1:
        return
    stats = env_statistics(envs)
    for rms in stats.values():
        if rms is not None:
            mean = all_ranks_mean(rms["mean"].to(device, torch.float64, copy=True), world_size)  # in place: a copy
            var = all_ranks_mean(rms["var"].to(device, torch.float64) + (rms["mean"].to(device) - mean) ** 2, world_size)
            rms["mean"], rms["var"] = mean.cpu(), var.cpu()
    set_env_statistics(envs, stats)
