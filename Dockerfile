# PPO scripts and the benchmark runner in one image. It installs requirements.txt exactly as the README does.
#   docker build -t ppo-details .
#   docker run --rm --user "$(id -u):$(id -g)" -v "$PWD/runs:/home/ppo/app/runs" ppo-details ppo_atari.py
# Everything a run writes lands in runs/ (logs, checkpoints, videos, wandb's files; benchmark runs and reports with
# --out runs/...): the one folder to mount. --user lets any uid write there; the image's files are readable by all.
FROM python:3.11-slim

# HOME=/tmp: caches and config files (matplotlib's, wandb's, inductor's) go where any --user can write them
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MUJOCO_GL=egl \
    WANDB_MODE=offline \
    HOME=/tmp \
    USER=ppo

# ffmpeg writes the videos of --capture-video; libegl1, libegl-mesa0 and libgl1 let MuJoCo render without a display
# (MUJOCO_GL=egl, Mesa's software renderer where no GPU is passed in); libglib2.0-0 is needed by OpenCV; g++ builds the
# compiled minibatch step of --compile (on by default; without a C++ compiler the scripts run eagerly, slower).
# Versions come with the pinned Debian release of the base image.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ffmpeg g++ libegl1 libegl-mesa0 libgl1 libglib2.0-0 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 --user-group ppo

# the virtual environment and the app folder are made by the user that runs them: written once, in one layer each
USER 1000:1000
RUN mkdir -p /home/ppo/app/runs
WORKDIR /home/ppo/app
COPY requirements.txt .
RUN python3 -m venv /home/ppo/.venv && /home/ppo/.venv/bin/pip install -r requirements.txt
ENV PATH=/home/ppo/.venv/bin:$PATH

COPY ppo.py ppo_masked.py ppo_continuous_action.py ppo_continuous_action_seeds.py ppo_atari.py ppo_rnn.py ppo_rnn_continuous_action.py ./
COPY ppo_utils/ ppo_utils/
COPY benchmark/ benchmark/

ENTRYPOINT ["python"]
CMD ["ppo_continuous_action.py", "--help"]
