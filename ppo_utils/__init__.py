"""What the scripts share that is not the PPO algorithm: the run's life cycle (run.py: the command line, signals, the
run folder, TensorBoard and wandb, the NaN guard, --eval-checkpoint, the last lines), checkpoints (checkpoints.py: what
one holds, --resume), the M1/M3 statistics they keep (env_statistics.py), the checks of the run flags and the env id
(flag_checks.py; a script's own flags are checked by its Args), --compile (compiled.py), and the runs of
ppo_continuous_action_seeds.py (seeds.py). The few details it implements are each called from the scripts' train() or
make_envs(), where they can be seen: envpool's backend of G10 (envpool_backend.py), and X2's process group, seeds and
averaging (distributed.py). It reads the run flags only (docs/flags.md lists them); a script's learning flags reach it
as arguments."""
