"""A Python that has imported torch (with dynamo and tensorboard), numpy, gymnasium and tyro once and forks a copy of itself for each script run
that tests/conftest.py's run_script asks of it, so that a run does not pay ~2 s of interpreter start and imports.

The copy runs the script as `python SCRIPT FLAGS...` would: its own process, the script as __main__ (runpy), argv,
cwd, the environment the run asks for, sys.path as a fresh interpreter builds it (the script's folder, then
PYTHONPATH, then the site folders), stdout and stderr into files, stdin empty, and the interpreter's own exit
(SystemExit's code, 1 and a traceback for an uncaught exception, atexit handlers run). What it cannot give a run,
the client does not ask of it: conftest sends a run here only when the run's environment equals this server's but for
PYTHONPATH (torch read the rest when it was imported).

Protocol, one JSON line a run on stdin: {"script", "argv", "cwd", "env", "stdout", "stderr"}; it answers the copy's pid,
then, once it has exited, its exit status as subprocess gives it (-N for signal N), a line each."""

import json
import os
import runpy
import sys
import traceback

import gymnasium  # noqa: F401
import numpy  # noqa: F401
import torch  # noqa: F401
import torch._dynamo  # noqa: F401  (2 s of imports; every script's compiled path imports it)
import torch.utils.tensorboard  # noqa: F401
import tyro  # noqa: F401

SITE = sys.path[1 + len([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]) :]  # after ours and PYTHONPATH


def run(request):
    """In the forked copy: become `python script argv...` and exit as it would."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    pythonpath = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.path.dirname(request["script"]), *pythonpath, *SITE]
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.argv = [request["script"], *request["argv"]]
    try:
        runpy.run_path(request["script"], run_name="__main__")
    except SystemExit:
        raise  # the interpreter's own handling: None is 0, a number is the status, anything else printed and 1
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
    sys.exit(0)


def serve():
    answers = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol's; fd 1 becomes each copy's stdout
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            answers.close()
            run(request)
        answers.write(f"{pid}\n")
        _, status = os.waitpid(pid, 0)
        answers.write(f"{os.waitstatus_to_exitcode(status)}\n")


if __name__ == "__main__":
    serve()
