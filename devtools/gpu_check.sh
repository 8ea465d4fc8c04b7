#!/usr/bin/env bash
# On the GPU machine: build and install the package against its torch, run the
# main job (torch-cudnn-algo tune), the demo and the whole test suite, and leave logs under $OUT.
set -u -o pipefail
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
# Built with the image's default compiler (CXX=/opt/gcc/bin/g++): setup.py links the
# shared libstdc++ the process loads, whatever that compiler's library directory holds.
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pip install --no-build-isolation --no-deps -v . >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
grep -A6 "build configuration" "$OUT/build.log" | head -7
(cd /tmp && torch-cudnn-algo tune --no-progress -o "$OUT/plan.json" 2>&1) | tee "$OUT/tune.log"
(cd /tmp && python3 -m torch_cudnn_algo.demo "$@" 2>&1) | tee "$OUT/demo.log"
python3 -m pytest -v -rfEs --durations=10 -p no:cacheprovider --junitxml="$OUT/junit.xml" \
  ${PYTEST_ARGS:-tests} >"$OUT/pytest.log" 2>&1
status=$?
grep -v " PASSED\| SKIPPED" "$OUT/pytest.log" | tail -60
python3 devtools/test_counts.py "$OUT/junit.xml" | tee "$OUT/counts.txt"
exit $status
