"""benchmark/tune.py on a real PostgreSQL server (never a mock): a throwaway cluster started for this module, whose
database two tuner processes started together share (each trial once, the cap exact, every run trained once); a
storage URL that cannot be opened (one line, nothing written); a study joined with another space (one line, no trial
added); and the plain postgresql:// URL that tune.py's docstring gives, opened with the driver requirements.txt pins (psycopg 3,
SQLAlchemy 2.1's default for postgresql://).

The cluster: initdb and pg_ctl from PATH or /usr/lib/postgresql/*/bin (PPO_TESTS_PG_BIN names a folder to take them
from instead), run as the postgres user where the tests run as root (postgres refuses root), in a temporary folder,
trust auth, on a free TCP port of 127.0.0.1; stopped (immediate) and removed at the end, whatever happened. The module
is skipped, naming what is missing, where the binaries, the postgres user or psycopg are not there."""

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import pytest
from conftest import ROOT, free_port
from optuna.trial import TrialState

BINARIES = ("initdb", "pg_ctl", "postgres")
AS_ROOT = os.geteuid() == 0  # then the cluster runs as the postgres user


def postgres_bin():
    """The folder holding initdb, pg_ctl and postgres: PPO_TESTS_PG_BIN, else pg_ctl's on PATH (its link resolved: the
    others lie beside it), else the newest /usr/lib/postgresql/<version>/bin; None where there is none."""
    if "PPO_TESTS_PG_BIN" in os.environ:
        candidates = [os.environ["PPO_TESTS_PG_BIN"]]
    else:
        on_path = shutil.which("pg_ctl")
        versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: [int(x) if x.isdigit() else 0 for x in
                                                                                   Path(p).parent.name.split(".")])  # fmt: skip
        candidates = ([str(Path(on_path).resolve().parent)] if on_path else []) + versions[::-1]
    for folder in candidates:
        if all(os.access(Path(folder) / name, os.X_OK) for name in BINARIES):
            return Path(folder)
    return None


def missing():
    """What this machine lacks for the cluster, in words (empty where nothing)."""
    lacks = []
    if postgres_bin() is None:
        where = os.environ.get("PPO_TESTS_PG_BIN") or "PATH or /usr/lib/postgresql/*/bin"
        lacks.append(f"PostgreSQL's {', '.join(BINARIES)} (none in {where})")
    if AS_ROOT:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            lacks.append("a 'postgres' system user (the tests run as root, and postgres refuses to)")
    if importlib.util.find_spec("psycopg") is None:
        lacks.append("psycopg (psycopg[binary], in requirements.txt)")
    return lacks


MISSING = missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason="a PostgreSQL server for tune.py: needs " + "; ".join(MISSING))

# a tiny Pendulum run: 4 updates of 256 steps (tests/test_tune.py's)
TINY = ["--env-id", "Pendulum-v1", "--total-timesteps", "1024",
        "--flags=--num-steps 256 --num-minibatches 4 --update-epochs 2 --no-compile"]  # fmt: skip
SPACE = ["--space", "ent-coef=0..0.01", "--space", "clip-coef=0.1,0.2,0.3"]


def as_postgres(*command, cwd, check=True):
    """A command of the cluster's, as the postgres user where we are root (in `cwd`, a folder that user can enter)."""
    prefix = ["runuser", "-u", "postgres", "--"] if AS_ROOT else []
    return subprocess.run([*prefix, *map(str, command)], cwd=cwd, capture_output=True, text=True, check=check, timeout=120)


@pytest.fixture(scope="module")
def postgres_url():
    """A database on a throwaway PostgreSQL cluster: postgresql://postgres@127.0.0.1:PORT/tune. The cluster lives in a
    temporary folder owned by the postgres user (its socket there too), trusts every local connection, and is stopped
    (-m immediate) and removed at the end, also where starting it or a test failed."""
    import psycopg

    bin_dir, folder = postgres_bin(), Path(tempfile.mkdtemp(prefix="ppo-tests-postgres-"))
    data, port = folder / "data", free_port()
    try:
        if AS_ROOT:
            os.chown(folder, pwd.getpwnam("postgres").pw_uid, pwd.getpwnam("postgres").pw_gid)
        initdb = as_postgres(bin_dir / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                             "--no-sync", cwd=folder, check=False)  # fmt: skip
        assert initdb.returncode == 0, initdb.stdout + initdb.stderr
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
        started = as_postgres(bin_dir / "pg_ctl", "-D", data, "-l", folder / "server.log", "-w", "-t", "60", "-o",
                              options, "start", cwd=folder, check=False)  # fmt: skip
        assert started.returncode == 0, started.stdout + started.stderr + read(folder / "server.log")
        with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True) as connection:
            connection.execute("CREATE DATABASE tune")
        yield f"postgresql://postgres@127.0.0.1:{port}/tune"
    finally:
        if (data / "postmaster.pid").exists():
            stopped = as_postgres(bin_dir / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop", cwd=folder, check=False)
            if stopped.returncode != 0 and (data / "postmaster.pid").exists():  # the server we started, by its pid
                with contextlib.suppress(OSError, ValueError, IndexError):  # a postmaster.pid gone or half written
                    os.kill(int((data / "postmaster.pid").read_text().split()[0]), 9)
        shutil.rmtree(folder, ignore_errors=True)


def read(path):
    return Path(path).read_text() if Path(path).exists() else ""


def tune_command(out, url, study, *words):
    """benchmark/tune.py on the tiny runs, its runs in <out>/runs and its report in <out>/results, on study `study` of
    the database at `url`."""
    return [sys.executable, str(ROOT / "benchmark" / "tune.py"), *TINY, *words, "--storage", url, "--study", study,
            "--out", str(out / "runs"), "--results", str(out / "results"), "--no-test", "--last", "5"]  # fmt: skip


def load(url, study):
    return optuna.load_study(study_name=study, storage=url)


def tree(folder):
    """Every path under `folder` with its modification time: what a refused command must leave as it was."""
    return {str(p): p.stat().st_mtime_ns for p in Path(folder).rglob("*")} if Path(folder).exists() else None


@pytest.mark.long
def test_two_tuners_on_one_postgres_study_run_each_trial_once(postgres_url, tmp_path):
    """Two tuner processes started together on a fresh database (both create Optuna's tables and the study, or join
    it): both exit 0; 4 trials complete, none failed, slots 0..3 once each, taken by the two workers; every trial's
    seed folders have done.json and one run folder each (no run trained twice)."""
    url = postgres_url
    command = tune_command(tmp_path, url, "S", *SPACE, "--trials", "4", "--seeds", "1", "2", "--agents", "4",
                           "--workers", "1")  # fmt: skip
    tuners = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(2)]  # fmt: skip
    try:
        outputs = [tuner.communicate(timeout=300)[0] for tuner in tuners]
    finally:
        for tuner in tuners:
            if tuner.poll() is None:
                tuner.kill()
                tuner.wait()
    assert [tuner.returncode for tuner in tuners] == [0, 0], outputs
    study = load(url, "S")
    trials = study.get_trials(deepcopy=False)
    states = [(t.number, t.state.name, t.user_attrs) for t in trials]
    assert len(trials) == 4 and all(t.state == TrialState.COMPLETE for t in trials), states
    assert sorted(t.user_attrs["slot"] for t in trials) == [0, 1, 2, 3], states
    names = {f"{socket.gethostname()}:{tuner.pid}" for tuner in tuners}
    assert {t.user_attrs["worker"] for t in trials} == names, (states, outputs)
    for slot in range(4):
        for seed in (1, 2):
            folder = tmp_path / "runs" / "Pendulum-v1" / f"trial-{slot}" / f"seed{seed}"
            assert (folder / "done.json").exists(), sorted(map(str, (tmp_path / "runs").rglob("*")))
            assert len(list((folder / "runs").iterdir())) == 1, list((folder / "runs").iterdir())
    # no batch folder kept a run folder of its own: every run folder is a trial's seed's
    assert sorted(p.parent.name for p in (tmp_path / "runs" / "Pendulum-v1").glob("*/runs")) == [], outputs


@pytest.mark.slow
def test_a_postgres_storage_that_cannot_be_opened_is_one_line_and_nothing_written(tmp_path):
    """A postgresql:// URL on a port nothing listens on: exit non-zero, one line on stderr ('error: --storage ...'), no
    traceback, and neither --out nor --results created. (No server needed: the module's skip still asks for the
    driver.)"""
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nodb"
    said = subprocess.run(tune_command(tmp_path, url, "S", *SPACE, "--trials", "2"), cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert said.returncode != 0, said.stdout + said.stderr
    assert said.stderr.startswith(f"error: --storage {url}: cannot open it"), said.stderr
    assert said.stderr.strip().count("\n") == 0 and "Traceback" not in said.stderr, said.stderr
    assert "connection" in said.stderr.lower() and "DB access module" not in said.stderr, said.stderr  # the port's
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists(), sorted(tmp_path.rglob("*"))


@pytest.mark.long
def test_a_postgres_study_joined_with_another_space_is_refused_and_left_as_it_was(postgres_url, tmp_path):
    """A study created by a 1-trial run (one seed); the same command with another --space exits with one line 'error:
    --study S3 exists in this storage with another space ...', adds no trial, changes none of the study's attributes
    and writes nothing under --out or --results."""
    url = postgres_url
    first = tune_command(tmp_path, url, "S3", *SPACE, "--trials", "1", "--seeds", "1")
    made = subprocess.run(first, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    before = load(url, "S3")
    trials_before = [(t.number, t.state, t.params) for t in before.get_trials(deepcopy=False)]
    assert len(trials_before) == 1 and trials_before[0][1] == TrialState.COMPLETE, trials_before
    attrs_before, files_before = before.user_attrs, tree(tmp_path)
    other = tune_command(tmp_path, url, "S3", "--space", "ent-coef=0..0.02", "--trials", "1", "--seeds", "1")
    said = subprocess.run(other, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert said.returncode != 0, said.stdout + said.stderr
    assert said.stderr.startswith("error: --study S3 exists in this storage with another space "), said.stderr
    assert said.stderr.strip().count("\n") == 0 and "Traceback" not in said.stderr, said.stderr
    after = load(url, "S3")
    assert [(t.number, t.state, t.params) for t in after.get_trials(deepcopy=False)] == trials_before
    assert after.user_attrs == attrs_before and tree(tmp_path) == files_before


@pytest.mark.long
def test_the_plain_postgresql_url_opens_with_the_drivers_requirements_txt_installs(postgres_url, tmp_path):
    """tune.py's docstring's URL, postgresql://user@host/db, SQLAlchemy choosing the driver: tune.py opens the storage
    and reads its studies, shown without training by a study of that name made beforehand (through Optuna) without
    tune.py's attributes, which tune.py then refuses to join ('exists in this storage with another ...')."""
    optuna.create_study(storage=postgres_url, study_name="plain", direction="maximize")
    said = subprocess.run(tune_command(tmp_path, postgres_url, "plain", *SPACE), cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert said.returncode != 0 and said.stderr.startswith("error: --study plain exists in this storage with another"), (
        said.stderr
    )
