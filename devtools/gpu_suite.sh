#!/usr/bin/env bash
# On a GPU machine, with a wheel built elsewhere: what a change must keep passing, in parts that
# each fit a 10-minute call.
#   devtools/gpu_suite.sh WHEEL_DIR upstream   PyTorch's test_convolution.py (scratch/upstream/, see
#                                             scripts/run-upstream-tests --help) stock and under
#                                             legacy algorithm 1, "fastest" and our kernels forced
#   devtools/gpu_suite.sh WHEEL_DIR tests-a    half of the gpu-marked tests (backward, forward, engines,
#                                             PyTorch's samples, plans): three pytest processes at once
#   devtools/gpu_suite.sh WHEEL_DIR tests-b    the other half (tuner, profiling, reliability, networks,
#                                             tuning database, distributed), then the large-tensor
#                                             tests and the energy tests alone (they read the GPU's
#                                             power, which other processes disturb)
# WHEEL_DIR holds the package's wheel (and test dependencies such as expecttest, for a machine
# without network); "-" uses the installed package. Logs, JUnit XML and the summary go to
# $OUT/gpu-suite-<part>.tgz (OUT defaults to /tmp/out). Exit status 0 when everything passed.
set -u -o pipefail
wheels=${1:?usage: devtools/gpu_suite.sh WHEEL_DIR|- upstream|tests-a|tests-b}
part=${2:?usage: devtools/gpu_suite.sh WHEEL_DIR|- upstream|tests-a|tests-b}
OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
if [ "$wheels" != - ]; then
  shopt -s nullglob
  found=("$wheels"/*.whl "$wheels"/deps/*.whl)
  shopt -u nullglob
  [ ${#found[@]} -gt 0 ] || { echo "devtools/gpu_suite.sh: no wheel in $wheels" >&2; exit 2; }
  PIP_NO_INDEX=1 python3 -m pip install -q --no-deps "${found[@]}" 2>&1 | tail -2
fi
results=$(mktemp -d)/gpu-suite-$part
mkdir -p "$results" "$OUT"
trap 'tar -C "$(dirname "$results")" -czf "$OUT/gpu-suite-$part.tgz" "gpu-suite-$part"' EXIT
{ torch-cudnn-algo --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$results/machine.txt" 2>&1
status=0
case $part in
  upstream)
    python3 scripts/run-upstream-tests scratch/upstream/test_convolution.py --settings legacy1,fastest \
      --setting own=fwd:tca.direct,bwd_data:tca.direct,bwd_filter:tca.direct \
      -j 4 --large-tensor-tests skip --test-timeout 120 --out "$results/upstream" > "$results/upstream.log" 2>&1 || status=$?
    cat "$results/upstream/summary.md" 2>/dev/null || tail -20 "$results/upstream.log"
    ;;
  tests-a|tests-b)
    pytest=(python3 -m pytest -q -rfE -p no:cacheprovider)
    # Three pytest processes at once per part: on an H200 five at once took over 7 minutes
    # for three of them, so the gpu tests come in two parts, each within a 10-minute call.
    if [ "$part" = tests-a ]; then
      groups=(
        "tests/test_backward_gpu.py"
        "tests/test_upstream_samples_gpu.py tests/test_plan_blobs_gpu.py tests/test_plan_gpu.py"
        "tests/test_forward_gpu.py tests/test_engines_gpu.py tests/test_aten_arguments_gpu.py tests/test_build_toolchain_gpu.py tests/test_direct_kernels_gpu.py"
      )
    else
      groups=(
        "tests/test_fastest_tuner_gpu.py"
        "tests/test_profile_gpu.py tests/test_reliability_gpu.py tests/test_networks_gpu.py tests/test_plan_distributed_gpu.py"
        "tests/test_tuning_db_gpu.py tests/test_distributed_gpu.py"
      )
    fi
    pids=()
    for i in "${!groups[@]}"; do
      # shellcheck disable=SC2086 # a group is a list of files
      timeout "${GROUP_TIMEOUT:-450}" "${pytest[@]}" --junitxml="$results/group$i.xml" ${groups[$i]} > "$results/group$i.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    if [ "$part" = tests-b ]; then  # alone: the energy tests read the GPU's power, which other processes disturb
      "${pytest[@]}" --junitxml="$results/large.xml" tests/test_large_tensor_gpu.py > "$results/large.log" 2>&1 || status=1
      "${pytest[@]}" --junitxml="$results/energy.xml" tests/test_energy_gpu.py > "$results/energy.log" 2>&1 || status=1
    fi
    # Every gpu test file must be in one of the runs of the two parts.
    for f in tests/*_gpu.py; do
      grep -q "$f" "$0" || { echo "gpu_suite.sh runs no group with $f" | tee -a "$results/missing.txt"; status=1; }
    done
    for log in "$results"/*.log; do echo "$(basename "$log"): $(tail -1 "$log")"; done
    ;;
  *)
    echo "devtools/gpu_suite.sh: the part is upstream, tests-a or tests-b, got '$part'" >&2
    exit 2
    ;;
esac
exit $status
