"""benchmark/same_curve.py: where two runs of one seed part, read from their TensorBoard logs."""

import pytest
import same_curve  # benchmark/same_curve.py (pyproject.toml puts benchmark/ on pytest's path)


def tensorboard_run(folder, episodes, explained_variance):
    """A run folder as benchmark/run.py leaves one: (step, return) episodes and (step, value) explained variances."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder / "runs" / "run"))
    for step, value in episodes:
        writer.add_scalar("charts/episodic_return", value, step)
    for step, value in explained_variance:
        writer.add_scalar("losses/explained_variance", value, step)
    writer.close()
    return folder


EPISODES = [(672, -21.0), (680, -21.0), (928, -20.0), (1500, -21.0)]
UPDATES = [(1024, 0.0125), (2048, -0.5), (3072, 0.25)]
EPISODE_3 = EPISODES[:2], EPISODES[3:]
UPDATE_2 = UPDATES[:1], UPDATES[2:]


@pytest.mark.parametrize(
    "other, episodes, updates",  # the other run; (alike, compared) of the episodes and of the updates
    [
        ((EPISODES, UPDATES), (4, 4), (3, 3)),
        (([*EPISODE_3[0], (928, -19.0), *EPISODE_3[1]], UPDATES), (2, 4), (3, 3)),  # another return
        (([*EPISODE_3[0], (932, -20.0), *EPISODE_3[1]], UPDATES), (2, 4), (3, 3)),  # the same return, later
        ((EPISODES, [*UPDATE_2[0], (2048, -0.50001), *UPDATE_2[1]]), (4, 4), (1, 3)),
        ((EPISODES[:3], UPDATES[:2]), (3, 3), (2, 2)),  # alike up to the shorter's end
    ],
)
def test_same_curve_finds_where_two_runs_part(tmp_path, capsys, other, episodes, updates):
    a = tensorboard_run(tmp_path / "a", EPISODES, UPDATES)
    b = tensorboard_run(tmp_path / "b", *other)
    found = same_curve.compare(a, b)
    assert found[("episodes", "episodic_return")][:2] == episodes
    assert found[("updates", "explained_variance")][:2] == updates
    parted = episodes[0] < episodes[1] or updates[0] < updates[1]
    assert same_curve.main([str(a), str(b)]) == int(parted)


def test_same_curve_refuses_a_folder_without_episodes(tmp_path, capsys):
    a = tensorboard_run(tmp_path / "a", EPISODES, UPDATES)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        same_curve.main([str(a), str(tmp_path / "empty")])
    assert exit_info.value.code == 2 and "no episodes" in capsys.readouterr().err
