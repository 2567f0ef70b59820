#!/usr/bin/env bash
# The whole test suite on one CUDA machine: an NVIDIA H100 or H200 with 16 cores, Python 3.12 and its own torch with
# CUDA, no package index. One pytest run of every test file, with as many workers as the cores allow (the `slow` tests
# first: tests/conftest.py orders them), a per-test limit and a limit on the whole; at most 8 minutes there.
#
# Prepare here, once (the wheels stay out of git):
#   echo /.whl/ >> .git/info/exclude
#   (the workplace's gpu-wheels.sh: gymnasium, ale-py, mujoco, tyro, stable-baselines3 and their needs as wheels in .whl/)
# then, with the device tool: command `bash benchmark/gpu_suite.sh`, carry [".whl"], timeout_s 540.
# Here, on the CPU (no .whl: nothing is installed; tests/test_gpu.py skips), a dry run of a few tests:
#   bash benchmark/gpu_suite.sh -k "test_gae or test_layout"
# Arguments go to pytest. Environment: OUT (the results' folder, default /tmp/gpu-suite-out), GPU_SUITE_WORKERS (default:
# the cores less 2, for the xdist controller and the tests' own subprocesses: torchrun's second rank, async envs, the
# scripts), GPU_SUITE_TEST_TIMEOUT (per test, 300 s), GPU_SUITE_DEADLINE (the whole run, 420 s; then SIGINT).
# Writes $OUT/junit.xml, $OUT/console.log and $OUT/summary.txt (counts, failures, skip reasons, the 15 slowest tests);
# exits with pytest's status, or 124 where the deadline stopped it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-suite-out}
mkdir -p "$OUT"
CORES=$(nproc)
WORKERS=${GPU_SUITE_WORKERS:-$((CORES > 4 ? CORES - 2 : CORES))}
unset MUJOCO_GL  # MUJOCO_GL=egl breaks `import mujoco` where libEGL is missing; the tests set it where they render

if [ -d .whl ]; then  # the install line that script prints
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
    { echo "error: the wheels of .whl/ did not install"; exit 99; }
  export PYTHONPATH=/tmp/site PATH="/tmp/site/bin:$PATH"
fi

limit=()  # pytest-timeout's per-test limit where it is installed (the GPU machine's image has it)
if python3 -c "import pytest_timeout" 2>/dev/null; then limit=(--timeout "${GPU_SUITE_TEST_TIMEOUT:-300}"); fi
{
  nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none here"
  python3 -c "import torch, os; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'cores', os.cpu_count())"
  echo "workers $WORKERS; per-test limit: ${limit[*]:-none (no pytest-timeout)}; deadline ${GPU_SUITE_DEADLINE:-420} s"
  timeout --foreground --signal=INT --kill-after=20 "${GPU_SUITE_DEADLINE:-420}" \
    python3 -m pytest -p no:cacheprovider -n "$WORKERS" --dist worksteal "${limit[@]}" --durations 15 \
    --junitxml "$OUT/junit.xml" "$@"
} 2>&1 | tee "$OUT/console.log"
status=${PIPESTATUS[0]}

python3 - "$OUT" "$status" <<'EOF' | tee "$OUT/summary.txt"
import collections, sys
import xml.etree.ElementTree as ET

out, status = sys.argv[1], sys.argv[2]
print(f"exit status {status}" + (" (stopped at the deadline)" if status == "124" else ""))
try:
    cases = list(ET.parse(f"{out}/junit.xml").getroot().iter("testcase"))
except (OSError, ET.ParseError) as error:
    sys.exit(f"no readable junit.xml ({error}): see console.log")
unnamed = [case for case in cases if not case.get("name")]  # what xdist writes for a test cut off by the deadline
cases = [case for case in cases if case.get("name")]
if unnamed:
    print(f"{len(unnamed)} unfinished (entries without a test's name): compare the collected tests with junit.xml")
outcome = {case: next((k for k in ("failure", "error", "skipped") if case.find(k) is not None), "passed") for case in cases}
print(", ".join(f"{n} {kind}" for kind, n in collections.Counter(outcome.values()).most_common()))
for case, kind in outcome.items():
    if kind in ("failure", "error"):
        message = (case.find(kind).get("message") or "").strip().splitlines()[:1]
        print(f"{kind}: {case.get('classname')}::{case.get('name')}: {message[0][:200] if message else ''}")
for reason, n in collections.Counter(c.find("skipped").get("message") for c, k in outcome.items() if k == "skipped").items():
    print(f"skipped {n} x: {reason}")
EOF
exit "$status"
