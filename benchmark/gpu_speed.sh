#!/usr/bin/env bash
# Atari speed on one CUDA machine, side by side with CleanRL's ppo_atari.py, as one prepared command (at most 8
# minutes there; each part is cut at a shared deadline, and what finished is kept), each part a run of benchmark/speed.py:
#   1. versus: Breakout, default flags of both, alternating rounds (ours first) of 20,480 steps each;
#   2. sps-fast, sps-default: env-only SPS, training SPS and the split of an iteration (env steps, policy calls, update,
#      the rest) and one update_policy call alone, of the fast configuration (FAST below), then of the default one;
#   3. tf32: one update_policy call's time with float32 and with --tf32 (the median of 3, on the GPU);
#   between 1 and 2, seeds: Hopper with 8 and 16 seeds in one process of ppo_continuous_action_seeds.py (on the GPU)
#      against the single script, one round of GPU_SPEED_SEEDS_STEPS per seed, each beside its env-only ceiling.
# On an H100 (2026-11-27) parts 1 and 2 took 388 s and 170 s with the fast run at 40,960 steps (now 24,576);
# its results and what they mean: benchmark/results/gpu-speed.md. The tests of CUDA paths are in benchmark/gpu_suite.sh.
#
# Prepare here, once (both stay out of git):
#   printf '/.whl/\n/.peers/\n' >> "$(git rev-parse --git-common-dir)/info/exclude"
#   bash ../shared/gpu-wheels.sh          # the workplace's script: gymnasium, ale-py, tyro, stable-baselines3 ... in .whl/
#   mkdir -p .peers && cp -r "$CLEANRL_DIR" .peers/cleanrl   # CleanRL's scripts (CLEANRL_DIR there, by default)
# then, with the device tool: command `bash benchmark/gpu_speed.sh`, carry [".whl", ".peers"], timeout_s 600.
# A dry run here on the CPU (tiny sizes; no .whl: nothing is installed):
#   GPU_SPEED_STEPS=2048 GPU_SPEED_ROUNDS=1 GPU_SPEED_FAST_STEPS=4096 GPU_SPEED_SEEDS_STEPS=2048 OUT=/tmp/gs bash benchmark/gpu_speed.sh
# Environment: OUT (results, default /tmp/gpu-speed-out), GPU_SPEED_DEADLINE (seconds for all of it, 560),
# GPU_SPEED_STEPS (20480), GPU_SPEED_ROUNDS (3), GPU_SPEED_FAST (the fast configuration's flags),
# GPU_SPEED_FAST_STEPS (24576), GPU_SPEED_SEEDS_STEPS (20480), CLEANRL_DIR (.peers/cleanrl). Writes $OUT/machine.txt,
# versus.md, seeds-speed.md, sps-fast.md, sps-default.md, tf32.md, console.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-speed-out}
mkdir -p "$OUT"
START=$SECONDS
DEADLINE=${GPU_SPEED_DEADLINE:-560}
STEPS=${GPU_SPEED_STEPS:-20480}
ROUNDS=${GPU_SPEED_ROUNDS:-3}
FAST=${GPU_SPEED_FAST:---vector-env async --num-envs 16}
FAST_STEPS=${GPU_SPEED_FAST_STEPS:-24576}
SEEDS_STEPS=${GPU_SPEED_SEEDS_STEPS:-20480}
export CLEANRL_DIR=${CLEANRL_DIR:-$PWD/.peers/cleanrl} PYTHONUNBUFFERED=1 WANDB_MODE=offline
unset MUJOCO_GL  # MUJOCO_GL=egl breaks `import mujoco` where libEGL is missing

if [ -d .whl ]; then  # the install line the workplace's gpu-wheels.sh prints
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
    { echo "error: the wheels of .whl/ did not install"; exit 99; }
  export PYTHONPATH=/tmp/site PATH="/tmp/site/bin:$PATH"
fi
[ -f "$CLEANRL_DIR/ppo_atari.py" ] || { echo "error: no $CLEANRL_DIR/ppo_atari.py: copy it to .peers/cleanrl, carry .peers"; exit 98; }

left() { echo $((DEADLINE - (SECONDS - START))); }
part() {  # part NAME COMMAND...: runs COMMAND within the time left, its output into console.log
  local limit; limit=$(left)
  if [ "$limit" -lt 20 ]; then echo "== $1: skipped, the deadline is near" | tee -a "$OUT/console.log"; return; fi
  echo "== $1 ($((SECONDS - START)) s in, $limit s left): ${*:2}" | tee -a "$OUT/console.log"
  timeout --signal=INT --kill-after=10 "$limit" "${@:2}" 2>&1 | tee -a "$OUT/console.log"
  echo "== $1: exit ${PIPESTATUS[0]} after $((SECONDS - START)) s" | tee -a "$OUT/console.log"
}

{
  nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none here"
  python3 -c "import sys; sys.path.insert(0, 'benchmark'); from speed import machine; print(machine())"
} 2>&1 | tee "$OUT/machine.txt"

part versus python3 benchmark/speed.py ours=ppo_atari.py 'cleanrl=$CLEANRL_DIR/ppo_atari.py' --base cleanrl \
  --flags "--env-id BreakoutNoFrameskip-v4 --total-timesteps $STEPS --seed 1" --rounds "$ROUNDS" --timeout 200 \
  --output "$OUT/versus.md"
# many MuJoCo seeds in one process (ppo_continuous_action_seeds.py, on the GPU) against one process per seed
part seeds python3 benchmark/speed.py single=ppo_continuous_action.py 'seeds8=ppo_continuous_action_seeds.py --seeds {1..8}' \
  'seeds16=ppo_continuous_action_seeds.py --seeds {1..16}' 'env1=env-only --steps 2048 ppo_continuous_action.py' \
  'env8=env-only --steps 2048 ppo_continuous_action_seeds.py --seeds {1..8}' \
  'env16=env-only --steps 2048 ppo_continuous_action_seeds.py --seeds {1..16}' --ceiling single=env1 --ceiling seeds8=env8 \
  --ceiling seeds16=env16 --flags "--env-id Hopper-v5 --total-timesteps $SEEDS_STEPS" --rounds 1 --output "$OUT/seeds-speed.md"
sps() {  # sps NAME STEPS FLAGS: env-only, the split of training and the update alone, of ppo_atari.py with FLAGS
  part "$1" python3 benchmark/speed.py 'env=env-only --steps 8192 ppo_atari.py' 'train=split ppo_atari.py' \
    'update=update ppo_atari.py' --ceiling train=env --flags "--total-timesteps $2 $3" --rounds 1 --output "$OUT/$1.md"
}
sps sps-fast "$FAST_STEPS" "$FAST"
sps sps-default 10240 ""
part tf32 python3 benchmark/speed.py 'fp32=update ppo_atari.py' 'tf32=update ppo_atari.py --tf32' \
  --flags "--env-id BreakoutNoFrameskip-v4 --total-timesteps 10240" --rounds 1 --output "$OUT/tf32.md"
echo "done in $((SECONDS - START)) s" | tee -a "$OUT/console.log"
