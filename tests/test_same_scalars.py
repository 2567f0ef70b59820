"""benchmark/same_scalars.py: its comparison to the bit on hand-made scalars, and the tool end to end on one tiny run of
this checkout against itself."""

import pytest
import importlib.util
import os
import subprocess
import sys
import types

import numpy as np
from conftest import ROOT

TOOL = ROOT / "benchmark" / "same_scalars.py"
spec = importlib.util.spec_from_file_location("same_scalars", TOOL)  # benchmark/ is no package: loaded by its path
same_scalars = importlib.util.module_from_spec(spec)
spec.loader.exec_module(same_scalars)

SCALARS = {
    "charts/episodic_return": [(200, -1234.5), (400, -1100.25)],
    "losses/value_loss": [(256, 0.5), (512, 0.1)],
    "charts/SPS": [(256, 900.0), (512, 950.0)],
}


def with_tag(tag, values, scalars=SCALARS):
    return {**scalars, tag: values}


def test_identical_scalars_have_no_difference():
    assert same_scalars.first_difference(SCALARS, {tag: list(values) for tag, values in SCALARS.items()}) is None


def test_a_value_one_bit_off_is_found_with_its_tag_and_step():
    off = float(np.nextafter(0.1, 1.0))  # the next double: only the last bit differs
    found = same_scalars.first_difference(SCALARS, with_tag("losses/value_loss", [(256, 0.5), (512, off)]))
    assert found == f"losses/value_loss: OLD step 512 value 0.1, NEW step 512 value {off!r}"


def test_the_earliest_step_is_reported_and_a_missing_tag_is_a_difference():
    new = with_tag("charts/episodic_return", [(200, -1234.5)])  # its second value missing
    new = with_tag("losses/value_loss", [(256, 0.5), (512, 0.2)], new)  # a later difference (512) than 400
    assert same_scalars.first_difference(SCALARS, new) == "charts/episodic_return: only OLD logs step 400 (value -1100.25)"
    lacking = {tag: values for tag, values in SCALARS.items() if tag != "losses/value_loss"}
    assert same_scalars.first_difference(SCALARS, lacking) == "losses/value_loss: only OLD logs step 256 (value 0.5)"
    assert "only NEW logs step 256" in same_scalars.first_difference(lacking, SCALARS)


def test_sps_is_ignored():
    assert same_scalars.first_difference(SCALARS, with_tag("charts/SPS", [(256, 1.0)])) is None
    assert same_scalars.first_difference(SCALARS, {t: v for t, v in SCALARS.items() if t != "charts/SPS"}) is None


@pytest.mark.slow
def test_one_run_of_this_checkout_against_itself_is_identical():
    tool = [sys.executable, str(TOOL), str(ROOT), str(ROOT), "--runs", "continuous-eager"]
    result = subprocess.run(tool, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("continuous-eager: identical ("), result.stdout


@pytest.mark.slow
def test_a_revision_that_does_not_exist_is_one_line_and_exit_2():
    tool = [sys.executable, str(TOOL), "no-such-revision", str(ROOT)]
    result = subprocess.run(tool, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: OLD no-such-revision is neither a folder nor a revision")


def test_a_run_of_several_seeds_is_compared_seed_by_seed(tmp_path, monkeypatch):
    """compare_run with the scripts stood in for by hand-made run folders, one a seed, alike in all but seed 2's second
    loss on NEW: the difference is found in run folder 2 of 2. Alike, the line counts both folders' values (2 tags x 2
    steps x 2 seeds = 8); a side with a folder fewer is a difference."""
    from torch.utils.tensorboard import SummaryWriter

    losses = {"old": [0.25, 0.125], "new": [0.25, 0.375], "mended": [0.25, 0.125], "one seed": [0.25]}

    def start(python, checkout, argv, cwd):  # the folders runs/{env_id}__{exp_name}__{seed}__{time} of seeds 1, 2
        for seed, loss in zip((1, 2), losses[checkout]):
            with SummaryWriter(os.path.join(cwd, "runs", f"Pendulum-v1__seeds__{seed}__{len(checkout)}")) as writer:
                for step, value in ((256, 0.5), (512, loss)):
                    writer.add_scalar("losses/value_loss", value, step)
                    writer.add_scalar("charts/episodic_return", -1000.0 * seed, step)
        return types.SimpleNamespace(wait=lambda: 0)

    def compared(new):
        tmp = tmp_path / new  # a fresh folder for each comparison's runs
        return same_scalars.compare_run("seeds", {"OLD": "old", "NEW": new}, sys.executable, str(tmp))

    monkeypatch.setattr(same_scalars, "start", start)
    loss = "losses/value_loss: OLD step 512 value 0.125, NEW step 512 value 0.375"
    assert compared("new") == (False, f"differs: run folder 2 of 2: {loss}")
    assert compared("mended") == (True, "identical (2 run folders: 8 values of 2 tags)")
    assert compared("one seed") == (False, "differs: OLD left 2 run folders, NEW 1")
