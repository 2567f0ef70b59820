"""What the scripts share that is not the PPO algorithm, a module per job: what a script must define for it (contract.py,
checked at start), the command line (command_line.py: main, the stop signals, one-line errors), a run's life cycle
(run.py: the run folder, the NaN guard, the checkpoint's save and the last lines, for one run or several), what a run
logs (logs.py: TensorBoard, wandb, progress lines), --eval- checkpoint (evaluation.py), MuJoCo's log (mujoco_log.py),
checkpoints (checkpoints.py: what one holds, --resume), the M1/M3 statistics they keep (env_statistics.py), the checks
of the run flags and the env id (flag_checks.py; a script's own flags are checked by its Args), --compile
(compiled.py), and the runs of ppo_continuous_action_seeds.py (seeds.py) with their optimizer (agents_adam.py). The few
details it implements are each called from the scripts' train() or make_envs(), where they can be seen: envpool's
backend of G10 (envpool_backend.py), X2's process group, seeds and averaging (distributed.py), and the batched script's
Adam (agents_adam.py). It reads the run flags only (contract.py lists those it reads); a script's learning flags reach
it as arguments."""
