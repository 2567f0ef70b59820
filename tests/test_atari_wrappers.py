"""ppo_atari.py's per-env wrapper stack (A1-A7), on a stand-in game whose frames, rewards and lives are all known, and
on the real ALE for the frame warp."""

import gymnasium as gym
import numpy as np
import pytest
from conftest import load_script

atari = load_script("ppo_atari")


class FakeGame(gym.Env):
    """An ALE-like game: RGB frames whose pixels all take a known value per frame (odd frames 100 + f, even frames f),
    reward `rewards[f % len(rewards)]` at frame f, a life lost every `frames_per_life` frames. It records the actions
    it receives since the last real reset and counts real resets."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, lives=3, frames_per_life=20, rewards=(1.0,), meanings=("NOOP", "FIRE", "RIGHT", "LEFT")):
        self.observation_space = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(len(meanings))
        self.meanings, self.total_lives, self.frames_per_life, self.rewards = list(meanings), lives, frames_per_life, rewards
        self.ale = self
        self.real_resets = 0

    def get_action_meanings(self):
        return self.meanings

    def lives(self):
        return self.remaining_lives

    def frame_value(self):
        return 100 + self.frame if self.frame % 2 else self.frame

    def image(self):
        return np.full((210, 160, 3), self.frame_value() % 256, dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.real_resets += 1
        self.frame, self.remaining_lives, self.actions = 0, self.total_lives, []
        return self.image(), {}

    def step(self, action):
        self.actions.append(int(action))
        self.frame += 1
        reward = self.rewards[self.frame % len(self.rewards)]
        if self.frame % self.frames_per_life == 0:
            self.remaining_lives -= 1
        return self.image(), reward, self.remaining_lives == 0, False, {}


gym.register("FakeGame-v0", entry_point=FakeGame, disable_env_checker=True)
ALL_OFF = dict(
    noop_max=0, fire_reset=False, episodic_life=False, frame_skip=1, warp_frame=False, frame_stack=1, clip_reward_sign=False
)


def make(env_kwargs=None, **flags):
    """Our make_env's stack around a FakeGame, with every A flag off unless given."""
    args = atari.Args(env_id="FakeGame-v0", **{**ALL_OFF, **flags})
    gym.registry["FakeGame-v0"].kwargs = env_kwargs or {}
    return atari.make_env(args, 1, "test")()


def chain(env):
    names = []
    while isinstance(env, gym.Wrapper):
        if type(env).__name__ not in ("OrderEnforcing", "PassiveEnvChecker"):
            names.append(type(env).__name__)
        env = env.env
    return names


REFERENCE_STACK = [
    "FrameStackObservation",
    "WarpFrame",
    "ClipRewardEnv",
    "FireResetEnv",
    "EpisodicLifeEnv",
    "RecordEpisodeStatistics",
    "MaxAndSkipEnv",
    "NoopResetEnv",
]


@pytest.mark.parametrize(
    "flag,value,wrapper",
    [
        ("noop_max", 0, "NoopResetEnv"),
        ("fire_reset", False, "FireResetEnv"),
        ("episodic_life", False, "EpisodicLifeEnv"),
        ("frame_skip", 1, "MaxAndSkipEnv"),
        ("warp_frame", False, "WarpFrame"),
        ("frame_stack", 1, "FrameStackObservation"),
        ("clip_reward_sign", False, "ClipRewardEnv"),
    ],
)
def test_each_flag_removes_exactly_its_wrapper(flag, value, wrapper):
    defaults = {f: getattr(atari.Args(), f) for f in ALL_OFF}
    assert chain(make(**defaults)) == REFERENCE_STACK
    assert chain(make(**{**defaults, flag: value})) == [w for w in REFERENCE_STACK if w != wrapper]


def test_fire_reset_only_in_games_with_fire():
    env = make(env_kwargs={"meanings": ("NOOP", "RIGHT", "LEFT")}, fire_reset=True)
    assert "FireResetEnv" not in chain(env)


def test_fire_reset_presses_fire():
    env = make(fire_reset=True)
    env.reset(seed=0)
    assert env.unwrapped.actions[0] == 1 and env.unwrapped.get_action_meanings()[1] == "FIRE"


def test_noop_reset_takes_1_to_noop_max_noops():
    env = make(noop_max=30)
    counts = []
    for seed in range(300):
        env.reset(seed=seed)
        assert set(env.unwrapped.actions) == {0}  # only NOOP
        counts.append(len(env.unwrapped.actions))
    assert min(counts) == 1 and max(counts) == 30 and len(set(counts)) > 20


def test_max_and_skip_sums_rewards_and_max_pools_the_last_two_frames():
    env = make(env_kwargs={"rewards": (1.0, 2.0, 4.0, 8.0, 16.0)}, frame_skip=4)
    env.reset(seed=0)
    obs, reward, *_ = env.step(2)
    assert env.unwrapped.actions == [2, 2, 2, 2]  # the action is repeated
    assert reward == 2.0 + 4.0 + 8.0 + 16.0  # frames 1-4 carry rewards[1..4]
    assert np.all(obs == 103)  # frame 3 shows 103, frame 4 shows 4: the pixelwise max is 103


def test_episodic_life_ends_episodes_on_life_loss_and_resets_only_on_game_over():
    env = make(env_kwargs={"lives": 3, "frames_per_life": 5, "rewards": (1.0,)}, episodic_life=True)
    env.reset(seed=0)
    game = env.unwrapped
    terminations, episodes, frames_in_game = 0, [], None
    while game.real_resets == 1:
        obs, reward, terminated, truncated, info = env.step(2)
        if "episode" in info:
            episodes.append(info["episode"])
        if terminated:
            terminations += 1
            lives_before, frames_in_game = game.remaining_lives, game.frame
            env.reset()
            if lives_before > 0:
                assert game.real_resets == 1 and game.remaining_lives == lives_before  # the game goes on
    assert terminations == 3  # one per life
    assert len(episodes) == 1  # the statistics are of the whole game: every frame's reward 1, all lives
    assert episodes[0]["r"] == frames_in_game == 15


def test_sign_clipping_keeps_real_returns_in_the_statistics():
    env = make(env_kwargs={"lives": 1, "frames_per_life": 6, "rewards": (5.0, -3.0, 0.0)}, clip_reward_sign=True)
    env.reset(seed=0)
    rewards, info = [], {}
    for _ in range(6):
        _, reward, terminated, _, info = env.step(0)
        rewards.append(reward)
    # frames 1..6 carry -3, 0, 5, -3, 0, 5: signs only; the episode's statistics keep the raw sum 4
    assert rewards == [-1.0, 0.0, 1.0, -1.0, 0.0, 1.0]
    assert terminated and info["episode"]["r"] == 4.0


def test_frame_stack_keeps_the_newest_frame_last():
    env = make(frame_stack=4)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 210, 160, 3) and obs.dtype == np.uint8
    assert np.all(obs == 0)  # the reset frame, repeated
    for _ in range(5):
        obs, *_ = env.step(0)
    # frames 2, 3, 4, 5 show 2, 103, 4, 105
    assert [int(frame[0, 0, 0]) for frame in obs] == [2, 103, 4, 105]


def test_warp_frame_is_84x84_grayscale():
    env = make(warp_frame=True)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84, 1) and obs.dtype == np.uint8
    gray = env.observation(np.broadcast_to(np.array([200, 50, 10], np.uint8), (210, 160, 3)).copy())
    # ITU-R 601 luma, as the reference's cv2 conversion: 0.299 * 200 + 0.587 * 50 + 0.114 * 10 = 90.29
    assert gray.shape == (84, 84, 1) and np.all(np.abs(gray.astype(int) - 90) <= 1)


def test_gray_after_resize_is_gymnasiums_order_and_weights_on_real_pong_frames():
    """The reference grays (OpenCV: 0.299 R + 0.587 G + 0.114 B, rounded) and then area-resizes; --gray-after-resize
    area-resizes the RGB frame and then grays it with gymnasium's weights (0.2125, 0.7154, 0.0721, truncated), as
    CleanRL's stack does. Both computed here from the raw frame with OpenCV and numpy alone."""
    import ale_py  # noqa: F401
    import cv2

    raw = gym.make("PongNoFrameskip-v4")
    frame, _ = raw.reset(seed=3)
    for _ in range(60):  # into the rally: ball and both paddles on screen
        frame, *_ = raw.step(0)
    reference = cv2.resize(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), (84, 84), interpolation=cv2.INTER_AREA)
    resized = cv2.resize(frame, (84, 84), interpolation=cv2.INTER_AREA).astype(np.float64)
    gymnasium_order = np.sum(resized * np.array([0.2125, 0.7154, 0.0721]), axis=-1).astype(np.uint8)
    observed = {}
    for after in (False, True):
        args = atari.Args(env_id="PongNoFrameskip-v4", **{**ALL_OFF, "warp_frame": True}, gray_after_resize=after)
        env = atari.make_env(args, 1, "test")()
        obs, _ = env.reset(seed=3)
        for _ in range(60):
            obs, *_ = env.step(0)
        assert obs.shape == (84, 84, 1) and obs.dtype == np.uint8
        observed[after] = obs[..., 0]
    np.testing.assert_array_equal(observed[False], reference)
    np.testing.assert_array_equal(observed[True], gymnasium_order)
    assert (reference != gymnasium_order).mean() > 0.5  # the background alone differs: 87 against 83


def test_real_breakout_observations_stay_uint8_until_the_network():
    args = atari.Args(num_envs=2)
    envs = atari.make_envs(args, "test")
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84, 1) and obs.dtype == np.uint8
    assert envs.single_observation_space.dtype == np.uint8
    envs.close()
