# PPO scripts and the benchmark runner in one image. It installs requirements.txt exactly as the README does.
#   docker build -t ppo-details .
#   docker run --rm ppo-details ppo_continuous_action.py --env-id Hopper-v5
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MUJOCO_GL=egl \
    WANDB_MODE=offline

# ffmpeg writes the videos of --capture-video; libegl1 and libgl1 let MuJoCo render without a display (MUJOCO_GL=egl);
# libglib2.0-0 is needed by OpenCV; g++ builds the compiled minibatch step of --compile (on by default; without a C++
# compiler the scripts run eagerly, slower). Versions come with the pinned Debian release of the base image.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ffmpeg g++ libegl1 libgl1 libglib2.0-0 \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 --user-group ppo
WORKDIR /home/ppo/app

COPY requirements.txt .
RUN python3 -m venv /home/ppo/.venv
ENV PATH=/home/ppo/.venv/bin:$PATH
RUN pip install -r requirements.txt

COPY ppo_continuous_action.py ppo_atari.py ppo_rnn.py ./
COPY ppo_utils/ ppo_utils/
COPY benchmark/ benchmark/
RUN mkdir -p runs videos benchmark/runs && chown -R ppo:ppo /home/ppo
USER 1000:1000

ENTRYPOINT ["python"]
CMD ["ppo_continuous_action.py", "--help"]
