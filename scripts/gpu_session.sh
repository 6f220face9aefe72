#!/usr/bin/env bash
# One call on the GPU machine (device tool): install the carried wheels, run the `gpu`-marked
# tests, the CPU suite against the machine's older torch/accelerate (the tested lower bounds),
# and the benchmarks; print a short summary last.
#
#   scripts/gpu_session.sh [gpu-tests] [cpu-suite] [bench]     (default: all three)
#
# Carried wheels live in .whl/ (ignored by git; see docs/development.md for the download line).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/ddo-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH="/tmp/site:$PWD"
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(gpu-tests cpu-suite bench)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 - <<'PY'
import importlib.metadata as m
for name in ("torch", "diffusers", "accelerate", "transformers", "pydantic", "pydantic-core", "PyYAML", "psutil", "tqdm"):
    try:
        print(f"{name}=={m.version(name)}", end="  ")
    except m.PackageNotFoundError:
        print(f"{name}: missing", end="  ")
print()
PY
declare -A rc
for step in "${steps[@]}"; do
  echo "=== $step ==="
  case "$step" in
    gpu-tests) python3 -m pytest tests/gpu -m gpu -p no:cacheprovider -s -q -rA 2>&1 | tee "$OUT/gpu-tests.log"; rc[$step]=${PIPESTATUS[0]} ;;
    cpu-suite) python3 -m pytest -p no:cacheprovider -q -x 2>&1 | tail -n 40 | tee "$OUT/cpu-suite.log"; rc[$step]=${PIPESTATUS[0]} ;;
    bench) for b in benchmarks/bench_*.py; do
             [ -e "$b" ] || continue
             echo "--- $b"; python3 "$b" --out "$OUT" 2>&1 | tee -a "$OUT/bench.log"; rc["$step:$(basename "$b")"]=${PIPESTATUS[0]}
           done ;;
    *) echo "unknown step $step"; rc[$step]=2 ;;
  esac
done
echo "=== summary ==="
for k in "${!rc[@]}"; do echo "$k: exit ${rc[$k]}"; done
grep -hE "passed|failed|error" "$OUT"/gpu-tests.log "$OUT"/cpu-suite.log 2>/dev/null | tail -n 4
