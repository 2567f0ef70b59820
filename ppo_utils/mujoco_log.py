"""MuJoCo's own log: where its warnings and errors go (a run's folder, or the console alone) and its settotalmass
warning said once a process. The scripts' runs and evaluations set it (run.py, evaluation.py), the env checks load
MuJoCo with it (flag_checks.py). It decides no PPO detail."""

import os
import sys
import time


SETTOTALMASS = "compiler attribute 'settotalmass' is deprecated"  # MuJoCo 4's warning at each compile of such a model


def say_settotalmass_once():
    """MuJoCo 4 warns that the compiler attribute settotalmass is deprecated each time it compiles a model that sets it
    (gymnasium's HalfCheetah: in the flag checks, in each env, in an evaluation's): with this process's MuJoCo loaded,
    that warning is said once a process, on the console, and kept out of MUJOCO_LOG.TXT (it is about gymnasium's model,
    not the run; the first one, in the flag checks, wrote the file in the working folder before any run folder existed).
    Every other warning goes where MuJoCo's default handler sends it, as MjLogConfig says (keep_mujoco_log): the console
    and the log file. A warning handler of one's own, installed before, is left as it is."""
    mujoco = sys.modules.get("mujoco")
    if mujoco is None or not hasattr(mujoco, "MjLogConfig") or mujoco.get_mju_user_warning() is not None:
        return
    said = []  # an AsyncVectorEnv's forked workers inherit it: what the trainer said, they do not say again

    def on_warning(message):
        config = mujoco.MjLogConfig.get()
        if SETTOTALMASS in message:
            if said:
                return
            said.append(message)
        elif config.logto_file:
            try:
                with open(config.logfile or "MUJOCO_LOG.TXT", "a") as log:
                    log.write(f"WARNING {time.ctime()}: {message}\n\n")  # MuJoCo's default handler's form
            except OSError:  # as MuJoCo's: a log that cannot be written is not the run's failure
                pass
        if config.logto_console:
            sys.stderr.write(f"WARNING: {message}\n\n")
            sys.stderr.flush()

    mujoco.set_mju_user_warning(on_warning)


def keep_mujoco_log(folder):
    """MuJoCo writes its warnings and errors (an unstable simulation's "Nan, Inf or huge value in QACC") to
    MUJOCO_LOG.TXT in the working folder, besides printing them: where this process has loaded MuJoCo, its log goes to
    `folder`'s MUJOCO_LOG.TXT instead, or, with no folder (an evaluation without videos, a run that has ended, a
    folder another machine holds: X2), nowhere but the console. The setting is the process's; an AsyncVectorEnv's
    workers, forked after it is made, inherit it."""
    mujoco = sys.modules.get("mujoco")  # not imported here: loading it for an Atari run would cost time and GL trouble
    if mujoco is None or not hasattr(mujoco, "MjLogConfig"):  # MjLogConfig: MuJoCo 4's (requirements.txt pins it)
        return
    say_settotalmass_once()
    config = mujoco.MjLogConfig.get()
    path = os.path.abspath(os.path.join(folder, "MUJOCO_LOG.TXT")) if folder and os.path.isdir(folder) else None
    config.logto_file = path is not None and len(path.encode()) < 1024  # MuJoCo keeps the path in 1024 bytes
    if config.logto_file:
        config.logfile = path
    config.set()
