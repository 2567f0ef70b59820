#!/usr/bin/env bash
# Issue 99's speed figures, side by side with CleanRL's scripts at each one's defaults: 3 alternating rounds each, one
# process at a time. Run it alone on the machine (no other work beside it): the reports are ratios measured in one run.
#   CLEANRL_DIR=../shared/peers/cleanrl bash benchmark/speed_vs_cleanrl.sh [results folder]
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CLEANRL_DIR:?set CLEANRL_DIR to the folder holding CleanRL ppo.py, ppo_continuous_action.py and ppo_atari.py}"
out=${1:-benchmark/results/speed-99}
mkdir -p "$out"
versus() { python benchmark/versus.py "$@"; }

# start-up: one update of a 512-step batch (imports, checks, env and log set-up, the first steps)
versus ppo.py "$CLEANRL_DIR/ppo.py" --env-id CartPole-v1 --total-timesteps 512 --output "$out/startup-ppo.md"
versus ppo_continuous_action.py "$CLEANRL_DIR/ppo_continuous_action.py" --env-id Hopper-v5 --total-timesteps 512 \
    --num-steps 512 --output "$out/startup-continuous.md"
versus ppo_atari.py "$CLEANRL_DIR/ppo_atari.py" --env-id BreakoutNoFrameskip-v4 --total-timesteps 512 --num-steps 64 \
    --output "$out/startup-atari.md"
versus ppo_rnn.py "$CLEANRL_DIR/ppo_atari.py" --env-id BreakoutNoFrameskip-v4 --total-timesteps 512 --num-steps 64 \
    --output "$out/startup-rnn.md"
# the everyday runs
versus ppo_continuous_action.py "$CLEANRL_DIR/ppo_continuous_action.py" --env-id Hopper-v5 --total-timesteps 102400 \
    --output "$out/hopper-102400.md"
versus ppo.py "$CLEANRL_DIR/ppo.py" --env-id CartPole-v1 --total-timesteps 500000 --output "$out/cartpole-500k.md"
versus ppo_atari.py "$CLEANRL_DIR/ppo_atari.py" --env-id BreakoutNoFrameskip-v4 --total-timesteps 40960 \
    --output "$out/breakout-40960.md"
