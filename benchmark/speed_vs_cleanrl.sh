#!/usr/bin/env bash
# Issue 99's speed figures, side by side with CleanRL's scripts at each one's defaults: 3 alternating rounds each, one
# process at a time. Run it alone on the machine (no other work beside it): the reports are ratios measured in one run.
#   CLEANRL_DIR=~/cleanrl/cleanrl bash benchmark/speed_vs_cleanrl.sh [results folder]
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CLEANRL_DIR:?set CLEANRL_DIR to the folder holding CleanRL ppo.py, ppo_continuous_action.py and ppo_atari.py}"
out=${1:-benchmark/results/speed-99}
mkdir -p "$out"
versus() {  # versus OURS PEER FLAGS REPORT: ours and CleanRL's PEER (its name under $CLEANRL_DIR), the peer as the base
  python benchmark/speed.py "ours=$1" "cleanrl=\$CLEANRL_DIR/$2" --flags "$3 --seed 1" --base cleanrl --output "$out/$4"
}

# start-up: one update of a 512-step batch (imports, checks, env and log set-up, the first steps)
versus ppo.py ppo.py "--env-id CartPole-v1 --total-timesteps 512" startup-ppo.md
versus ppo_continuous_action.py ppo_continuous_action.py "--env-id Hopper-v5 --total-timesteps 512 --num-steps 512" \
    startup-continuous.md
versus ppo_atari.py ppo_atari.py "--env-id BreakoutNoFrameskip-v4 --total-timesteps 512 --num-steps 64" startup-atari.md
versus ppo_rnn.py ppo_atari.py "--env-id BreakoutNoFrameskip-v4 --total-timesteps 512 --num-steps 64" startup-rnn.md
# the everyday runs
versus ppo_continuous_action.py ppo_continuous_action.py "--env-id Hopper-v5 --total-timesteps 102400" hopper-102400.md
versus ppo.py ppo.py "--env-id CartPole-v1 --total-timesteps 500000" cartpole-500k.md
versus ppo_atari.py ppo_atari.py "--env-id BreakoutNoFrameskip-v4 --total-timesteps 40960" breakout-40960.md
