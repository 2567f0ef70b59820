"""The docs check: what the README and docs/ say, against the code and the committed data they speak of (marked
`docs`: `python -m pytest -m docs`, a few seconds; the README's test command runs it). Moved here from the modules of
what they speak of (docs/tests.md): the Dockerfile's and the README's install and Docker lines (test_docker.py), the
size of `diff ppo.py ppo_masked.py` (test_masked.py), the masking table (test_masking_bench.py) and Table 1's rows and
counts (test_table1.py)."""

import re
from pathlib import Path

import masking  # benchmark/masking.py (pyproject.toml puts benchmark/ on pytest's path)
import pandas as pd
import pytest
import report_table1
from conftest import ROOT, needs, readme_block

pytestmark = pytest.mark.docs

DOCKERFILE = ROOT / "Dockerfile"
README = ROOT / "README.md"


# ---------------------------------------------------------------------------------------------------------------------
# the Dockerfile and the README's Docker section (test_docker.py builds and runs the image where a daemon answers)


def pip_installs(text):
    """The pip install commands in a text, with their arguments, without options that only change pip's cache."""
    commands = re.findall(r"pip install ([^\n&;\\]+)", text)
    return sorted(" ".join(a for a in c.split() if a != "--no-cache-dir") for c in commands)


def test_dockerfile_installs_what_the_readme_installs():
    docker_runs = "\n".join(line for line in DOCKERFILE.read_text().splitlines() if line.startswith("RUN"))
    assert pip_installs(docker_runs) == pip_installs(readme_block("Set up and train")) == ["-r requirements.txt"]
    assert re.search(r"^COPY requirements\.txt ", DOCKERFILE.read_text(), re.M)


def test_readme_shows_the_docker_lines():
    text = README.read_text()
    assert re.search(r"^docker build -t (\S+) \.$", text, re.M)
    image = re.search(r"^docker build -t (\S+) \.$", text, re.M).group(1)
    runs = [line for line in text.splitlines() if line.startswith("docker run")]
    assert any("ppo_continuous_action.py" in line and image in line for line in runs)
    assert any("benchmark/run.py" in line and " -v " in line and image in line for line in runs)


def test_readme_names_each_container_it_runs_and_stops_them_by_name():
    """`docker stop` needs a container's name or id: each docker run line gives a --name, and the text stops the training
    run and the benchmark matrix by theirs."""
    runs = [line for line in readme_block("Docker").splitlines() if line.startswith("docker run")]
    names = {line: re.search(r" --name (\S+) ", line) for line in runs}
    assert runs and all(names.values()), [line for line, name in names.items() if not name]
    text = README.read_text().split("## Docker", 1)[1]
    for started in ("--capture-video", "benchmark/run.py"):
        (name,) = [name.group(1) for line, name in names.items() if started in line]
        assert f"`docker stop {name}`" in text, name


# ---------------------------------------------------------------------------------------------------------------------
# the README's figures


def rounded_like(said: str, value: float) -> bool:
    """Whether `said` (a README cell's number: 16.8, 2649, 2,649) is `value` rounded to said's own last digit."""
    said = said.replace(",", "")
    decimals = len(said.split(".")[1]) if "." in said else 0
    return abs(float(said) - value) <= 0.5 * 10**-decimals + 1e-9


@needs("envpool")
def test_the_masking_table_and_the_readmes_row_are_the_reports_data():
    """Each number of the masking table (docs/results.md; the README's until it moved there) is the committed data's,
    as masking.py's tables compute it; so are the README's results row's figures: ours masked against the random
    policy over valid actions, on each task in the table's order."""
    data = ROOT / "benchmark" / "results" / "masking" / "data"
    scores, shares, _, _ = masking.masking_tables(Path(data), last=100)
    table = {}
    for line in scores.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        table[cells[0]] = [[float(n) for n in re.findall(r"-?[\d.]+", cell)] for cell in cells[1:]]
    share = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in shares.splitlines()[2:]}
    page = (ROOT / "docs" / "results.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith(tuple(f"| {task} |" for task in table))]
    assert len(rows) == len(table) == 3
    for line in rows:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        ours = table[cells[0]]  # ours masked, unmasked, MaskablePPO, random valid, random all, mask on, mask removed
        assert rounded_like(cells[2].rstrip("%"), float(share[cells[0]].rstrip("%"))), cells
        for cell, (mean, *std) in zip(cells[3:6], ours[:3]):  # mean ± std
            said_mean, said_std = cell.split(" ± ")
            assert rounded_like(said_mean, mean) and rounded_like(said_std, std[0]), (cells[0], cell, mean, std)
        assert rounded_like(cells[6], ours[3][0]), (cells[0], cells[6], ours[3])
        assert rounded_like(cells[7].split()[0], ours[6][0]), (cells[0], cells[7], ours[6])
    (row,) = [line for line in README.read_text().splitlines() if line.startswith("| Invalid-action masking ")]
    said = re.search(r"learns all three: ([\d.]+), ([\d.]+), ([\d.]+) against random ([\d.]+), ([\d.]+), ([\d.]+);", row)
    assert said, row
    tasks = [line.split("|")[1].strip() for line in rows]
    for task, masked, random_valid in zip(tasks, said.groups()[:3], said.groups()[3:], strict=True):
        assert rounded_like(masked, table[task][0][0]) and rounded_like(random_valid, table[task][3][0]), task


def test_the_results_page_shows_table1_as_the_committed_report_has_it():
    """docs/results.md's Table 1 rows, and its and the README's count of runs, are the committed report's, which
    rebuilds from the data: a page left behind when runs land fails here."""
    page, readme = (ROOT / "docs/results.md").read_text(), (ROOT / "README.md").read_text()
    results = (ROOT / "benchmark/results/table1/README.md").read_text()
    rows = [line for line in page.splitlines() if line.split(" | ")[0][2:] in report_table1.PAPER_TABLE1]
    assert [row.split(" | ")[0][2:] for row in rows] == list(report_table1.PAPER_TABLE1)
    assert all(row in results.splitlines() for row in rows)
    table = report_table1.table1_seeds(pd.read_csv(ROOT / "benchmark/results/table1/data/runs.csv"))[0]
    total = 7 * len(report_table1.PAPER_TABLE1) * max(3, table["seed"].nunique())  # runs of whole seeds: 231, 462
    assert all(f"{len(table)} of {total} runs are in" in text for text in (page, readme, results))
    clip = next(row for row in rows if row.startswith("| clip-0.2 |")).split(" | ")[2]  # the README's headline figure
    assert f"clipping at 0.2: {clip}" in readme


def test_the_readme_is_a_newcomers_page_of_at_most_170_lines():
    """The README holds what a newcomer needs first (set up, test, the scripts, the flags, the results' headline table);
    the detail lives in docs/."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 170, f"README.md has {len(lines)} lines; move detail to docs/"


def test_ci_runs_the_readmes_test_command():
    """.ci/run (CI) runs the README's test command, word for word: the first line of the README's Test block."""
    command = readme_block("Test").strip().splitlines()[0]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("python -m pytest")]
    assert ci == [command], (ci, command)


# ---------------------------------------------------------------------------------------------------------------------
# the versions the README and docs/ name, against requirements.txt's pins

REQUIREMENTS = ROOT / "requirements.txt"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
# a pinned package named beside another version on purpose, where the text says so: {mention: where and why}
OTHER_VERSIONS = {
    "torch 1.2": "docs/docker.md: torch's 1.2 GB in the CUDA image, a size",
    "torch 2.11": "docs/torchrun.md: the GPU machine's torch, whose torchrun lacks --shutdown-timeout",
}


def pins():
    """requirements.txt's pins, {name: version}: names lowercased, `_` as `-`, extras dropped (gymnasium[atari,mujoco]
    is gymnasium); and Python, from the line that says which Python they were tested on."""
    text = REQUIREMENTS.read_text()
    found = {"python": re.search(r"tested on Python (\d+\.\d+)", text).group(1)}
    for name, version in re.findall(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)$", text, re.M):
        found[name.lower().replace("_", "-")] = version
    return found


def version_mentions(text, names):
    """(name, version, mention) for each `name==1.2.3`, `name[extras]==1.2.3` or `name 1.2` (`1.x`, `5`) in `text`,
    of the given names (any case, `-` or `_`; PyTorch for torch)."""
    spelled = {name: re.escape(name).replace(r"\-", "[-_]") for name in names} | {"torch": "(?:py)?torch"}
    found = []
    for name in names:
        pattern = rf"(?<![\w-])(?:{spelled[name]})(?:\[[^\]]*\])?(?:==| )(\d+(?:\.(?:\d+|x))*)(?![\w-]|\.\d)"
        for match in re.finditer(pattern, text, re.I):
            found.append((name, match.group(1), " ".join(match.group(0).split())))
    return found


def agrees(said, pinned):
    """Whether a version said (2.13, 1.x, 3) names the pinned one (2.13.0, 1.4.0, 3.3.9): its parts lead the pin's."""
    said, pinned = said.split("."), pinned.split(".")
    return len(said) <= len(pinned) and all(s in ("x", p) for s, p in zip(said, pinned))


def test_the_versions_the_docs_name_are_the_pinned_ones():
    """Each `package==version` and `package X.Y` of a package requirements.txt pins (and `Python X.Y`), in the README and
    docs/, names the pinned version, but for the mentions of another version on purpose (OTHER_VERSIONS, each still
    there); and psycopg2, which is not pinned, is named nowhere as the driver: requirements.txt pins psycopg 3."""
    pinned = pins()
    wrong, other = [], set()
    for page in DOCS:
        for name, said, mention in version_mentions(page.read_text(), pinned):
            if mention.lower() in (m.lower() for m in OTHER_VERSIONS):
                other.add(mention.lower())
            elif not agrees(said, pinned[name]):
                wrong.append(f"{page.relative_to(ROOT)}: {mention!r}, pinned {name}=={pinned[name]}")
    assert not wrong, wrong
    assert other == {m.lower() for m in OTHER_VERSIONS}, "an exception no page needs any more"
    assert "psycopg2" not in pinned and pinned["psycopg"].startswith("3.")
    assert not [page.name for page in DOCS if "psycopg2" in page.read_text()], "requirements.txt pins psycopg 3"


def test_version_mentions_are_found_and_compared_by_hand():
    """The check's reader on hand-written lines: what it finds, what it leaves (MuJoCo v5 is an env version, 1.2 GB
    a size), and which versions agree."""
    text = "torch==2.13.0, PyTorch 2.13's torchrun, gymnasium 1.x's API, psycopg[binary]==3.3.9, MuJoCo v5, ale_py 0.12"
    assert version_mentions(text, ["torch", "gymnasium", "psycopg", "mujoco", "ale-py"]) == [
        ("torch", "2.13.0", "torch==2.13.0"), ("torch", "2.13", "PyTorch 2.13"), ("gymnasium", "1.x", "gymnasium 1.x"),
        ("psycopg", "3.3.9", "psycopg[binary]==3.3.9"), ("ale-py", "0.12", "ale_py 0.12"),
    ]  # fmt: skip
    assert agrees("2.13", "2.13.0") and agrees("1.x", "1.4.0") and agrees("3", "3.3.9")
    assert not agrees("2.12", "2.13.0") and not agrees("2.13.0.1", "2.13.0") and not agrees("2", "3.3.9")
