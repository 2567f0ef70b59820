"""What the three scripts share that is not the PPO algorithm: the run's life cycle (run.py: the command line, signals,
the run folder, TensorBoard and wandb, the NaN guard, the last lines), checkpoints (checkpoints.py: --resume,
--eval-checkpoint), the flag checks (flag_checks.py), --compile (compiled.py). The few details it implements are each
called from the scripts' train() or make_envs(), where they can be seen: M1/M2's observation normalization wrapper
and envpool's backend of G10 (env_adapters.py), and X2's process group, seeds and averaging (distributed.py)."""
