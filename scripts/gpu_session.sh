#!/usr/bin/env bash
# One call on the GPU machine (device tool): install the carried wheels, then run the named steps
# and print a short summary last. Everything lands in $OUT, and $OUT/session.tgz holds it all
# (the device tool brings back only a few files).
#
#   scripts/gpu_session.sh [STEP...]     (default: gpu-tests cpu-suite bench)
#
#   gpu-suite    the whole GPU suite (tests/gpu, structural pipelines included; $GPU_SUITE_PATHS: others) in one call: $GPU_WORKERS (8)
#                processes at once (pytest-xdist, each test a fresh interpreter of its own on the one GPU), each test
#                cut at $GPU_TEST_TIMEOUT_S (300) s, the whole at $GPU_SUITE_TIMEOUT_S (420) s; prints every test's time
#                (pytest-benchmark, on that machine, refuses xdist: it is left out)
#   gpu-tests    the `gpu`-marked tests but the structural ones (tests/gpu)
#   structural   every structural pipeline under group offloading with streams, three shards at
#                once on the last GPU, in the background while the later steps run
#   cpu-suite    the CPU suite against the machine's torch and accelerate
#   probe-drop   what keeps a dropped text encoder alive (benchmarks/probe_drop.py: as built, --lcmu, --loaded,
#                and the latency benchmark's own pipeline, tiny and full, low_cpu_mem_usage=True)
#   latency      benchmarks/bench_latency.py --reps $REPS (1) --arms $ARMS (the three) --extras $EXTRAS (unset: all; empty: none) --budget-s $BUDGET_S (360)
#   repack       the repack's GPU tests and the hooks' (tests/gpu/test_repack_gpu.py, test_hooks_gpu.py;
#                REPACK_ONLY: a -k expression)
#   floor        benchmarks/bench_pinned_floor.py $FLOOR_ARGS (e.g. "--families flux --reps 0")
#   forward      benchmarks/bench_repack_forward.py: the denoiser's forward, repacked against not
#   done         benchmarks/bench_done_components.py $DONE_ARGS: plain calls giving back what they no longer need
#   tests        the gpu-marked tests in $GPU_TESTS (paths or node ids, space-separated)
#   register     benchmarks/probe_register.py on the transformer's weights file (drawn first if missing)
#   box          benchmarks/bench_box.py $BOX_ARGS within $BOX_TIMEOUT_S (540) s: the smallest cgroup box per arm
#   onload       benchmarks/probe_onload.py on the Flux-shaped transformer (drawn first if missing), $ONLOAD_REPS (9)
#                passes each: its groups onloaded from registered file pages against from pinned copies
#   ranks        two GPUs: the two tests that need them (tests/gpu/test_ranks_gpu.py and the two-device test of
#                test_host_cache_gpu.py; RANKS_TESTS=0 leaves them out), then benchmarks/bench_ranks.py at the
#                Flux-shaped size, --budget-s $RANKS_BUDGET_S (300) $RANKS_ARGS, within $RANKS_TIMEOUT_S (450) s:
#                two ranks under torchrun, each on its own GPU, in one cgroup, beside one rank alone
#   ring         the ring runtime, the parts in $RING_PARTS ("tests probe timeline nores"): its GPU tests
#                (tests/gpu/test_ring_gpu.py), then on the Flux-shaped weights (drawn first if missing)
#                benchmarks/probe_overlap.py (the CPU's issue time, the link alone and under the compute) and
#                benchmarks/probe_ring_timeline.py (two steps' copies and computes; nores: again with --nores)
#   bench        every benchmarks/bench_*.py with its defaults
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
structural_pids=()
for step in "${steps[@]}"; do
  echo "=== $step ==="
  case "$step" in
    gpu-suite) timeout "${GPU_SUITE_TIMEOUT_S:-420}" python3 -m pytest ${GPU_SUITE_PATHS:-tests/gpu} -m gpu -p no:cacheprovider -p no:benchmark -q -rA \
                 -n "${GPU_WORKERS:-8}" --dist load --timeout "${GPU_TEST_TIMEOUT_S:-300}" --durations=0 2>&1 | tee "$OUT/gpu-suite.log"
               rc[$step]=${PIPESTATUS[0]} ;;
    gpu-tests) python3 -m pytest tests/gpu -m gpu -p no:cacheprovider -n 0 -s -q -rA --ignore tests/gpu/test_structural_gpu.py \
                 2>&1 | tee "$OUT/gpu-tests.log"; rc[$step]=${PIPESTATUS[0]} ;;
    structural) last=$(( $(nvidia-smi -L | wc -l) - 1 ))
                names=$(python3 -c "from ddo_hooks.testing.structural import STRUCTURAL; print(*STRUCTURAL)")
                count=3; [ -n "${STRUCTURAL_ONLY:-}" ] && count=1  # STRUCTURAL_ONLY: names, space-separated
                test=tests/gpu/test_structural_gpu.py::test_structural_pipelines_under_group_offloading_with_streams
                for shard in $(seq 0 $((count - 1))); do  # node ids, not -k: "kandinsky3" would also pick kandinsky3_img2img
                  ids=$(python3 -c "import sys; s, c, t, *n = sys.argv[1:]; print(*(f'{t}[{x}]' for x in n[int(s)::int(c)]))" \
                        $shard $count $test ${STRUCTURAL_ONLY:-$names})
                  CUDA_VISIBLE_DEVICES=$last python3 -m pytest $ids -m gpu -p no:cacheprovider -n 0 \
                    -q -rA > "$OUT/structural-$shard.log" 2>&1 &
                  structural_pids+=($!)
                done ;;
    tests) python3 -m pytest ${GPU_TESTS:?GPU_TESTS names the tests} -m gpu -p no:cacheprovider -n 0 -s -q -rA \
             2>&1 | tee "$OUT/gpu-tests.log"; rc[$step]=${PIPESTATUS[0]} ;;
    repack) python3 -m pytest tests/gpu/test_repack_gpu.py tests/gpu/test_hooks_gpu.py -m gpu -p no:cacheprovider -n 0 -s -q -rA \
              -k "${REPACK_ONLY:-repack or hooks}" 2>&1 | tee "$OUT/repack-tests.log"; rc[$step]=${PIPESTATUS[0]} ;;
    forward) python3 benchmarks/bench_repack_forward.py --out "$OUT" 2>&1 | tee "$OUT/forward.log"; rc[$step]=${PIPESTATUS[0]} ;;
    done) timeout "${DONE_TIMEOUT_S:-560}" python3 benchmarks/bench_done_components.py --out "$OUT/done" ${DONE_ARGS:-} \
            2>&1 | tee "$OUT/done.log"; rc[$step]=${PIPESTATUS[0]} ;;
    floor) python3 benchmarks/bench_pinned_floor.py --out "$OUT/floor" ${FLOOR_ARGS:-} 2>&1 | tee "$OUT/floor.log"
           rc[$step]=${PIPESTATUS[0]} ;;
    probe-drop) for flags in "" --lcmu --loaded "--bench tiny --lcmu" "--bench full --lcmu"; do echo "--- probe_drop.py $flags"; python3 benchmarks/probe_drop.py $flags; done \
                  2>&1 | tee "$OUT/probe-drop.log"
                rc[$step]=${PIPESTATUS[0]} ;;
    latency) python3 benchmarks/bench_latency.py --out "$OUT/latency" --reps "${REPS:-1}" --arms "${ARMS:-nothing,lowest-peak,lowest-latency}" --extras "${EXTRAS-drop,repin,trim,model-offload}" --budget-s "${BUDGET_S:-360}" \
               2>&1 | tee "$OUT/latency.log"; rc[$step]=${PIPESTATUS[0]} ;;
    cpu-suite) python3 -m pytest -p no:cacheprovider -q -x 2>&1 | tail -n 40 | tee "$OUT/cpu-suite.log"; rc[$step]=${PIPESTATUS[0]} ;;
    bench) for b in benchmarks/bench_*.py; do
             [ -e "$b" ] || continue
             echo "--- $b"; python3 "$b" --out "$OUT" 2>&1 | tee -a "$OUT/bench.log"; rc["$step:$(basename "$b")"]=${PIPESTATUS[0]}
           done ;;
    register) weights=/tmp/ddo-floor-weights/flux-full
              python3 benchmarks/pinned_workload.py setup --dir $weights --size full --result "$OUT/setup.json" > "$OUT/setup.log" 2>&1
              file=$(ls -S $weights/transformer/*.safetensors | head -n 1)
              python3 benchmarks/probe_register.py --file "$file" --mib ${REGISTER_MIB:-512} --timeout-s ${REGISTER_TIMEOUT_S:-40} 2>&1 | tee "$OUT/register.log"; rc[$step]=${PIPESTATUS[0]} ;;
    onload) weights=/tmp/ddo-floor-weights/flux-full
            python3 benchmarks/pinned_workload.py setup --dir $weights --size full --result "$OUT/setup.json" > "$OUT/setup.log" 2>&1
            python3 benchmarks/probe_onload.py --folder $weights/transformer --reps ${ONLOAD_REPS:-9} --out "$OUT/onload" \
              2>&1 | tee "$OUT/onload.log"; rc[$step]=${PIPESTATUS[0]} ;;
    box) timeout "${BOX_TIMEOUT_S:-540}" python3 benchmarks/bench_box.py --out "$OUT/box" ${BOX_ARGS:-} 2>&1 | tee "$OUT/box.log"
         rc[$step]=${PIPESTATUS[0]} ;;
    ranks) if [ "$(nvidia-smi -L | wc -l)" -lt 2 ]; then echo "ranks: needs two GPUs"; rc[$step]=2; continue; fi
           if [ "${RANKS_TESTS:-1}" != 0 ]; then
             python3 -m pytest tests/gpu/test_ranks_gpu.py \
               tests/gpu/test_host_cache_gpu.py::test_release_on_one_device_creates_no_context_on_another \
               -m gpu -p no:cacheprovider -n 0 -s -q -rA 2>&1 | tee "$OUT/ranks-tests.log"; rc[$step:tests]=${PIPESTATUS[0]}
           fi
           timeout "${RANKS_TIMEOUT_S:-450}" python3 benchmarks/bench_ranks.py --out "$OUT/ranks" --budget-s "${RANKS_BUDGET_S:-300}" \
             ${RANKS_ARGS:-} 2>&1 | tee "$OUT/ranks.log"; rc[$step]=${PIPESTATUS[0]} ;;
    ring) parts=" ${RING_PARTS:-tests probe timeline nores} "; weights=/tmp/ddo-floor-weights/flux-full
          if [[ $parts == *" tests "* ]]; then
            python3 -m pytest tests/gpu/test_ring_gpu.py -m gpu -p no:cacheprovider -n 0 -s -q -rA 2>&1 | tee "$OUT/ring-tests.log"
            rc[$step:tests]=${PIPESTATUS[0]}
          fi
          if [[ $parts == *" probe "* ]]; then
            python3 benchmarks/probe_overlap.py --dir $weights --out "$OUT/probe_overlap.json" 2>&1 | tee -a "$OUT/ring.log"
            rc[$step:probe]=${PIPESTATUS[0]}
          fi
          for nores in "" --nores; do
            [[ -z $nores && $parts != *" timeline "* || -n $nores && $parts != *" nores "* ]] && continue
            python3 benchmarks/probe_ring_timeline.py --dir $weights --out "$OUT/timeline$nores.json" \
              --png "$OUT/timeline$nores.png" $nores 2>&1 | tee -a "$OUT/ring.log"; rc[$step:timeline$nores]=${PIPESTATUS[0]}
          done ;;
    *) echo "unknown step $step"; rc[$step]=2 ;;
  esac
done
for i in "${!structural_pids[@]}"; do wait "${structural_pids[$i]}"; rc["structural-$i"]=$?; done
tar czf /tmp/session.tgz -C "$OUT" . && mv /tmp/session.tgz "$OUT/session.tgz"
echo "=== summary ==="
for k in "${!rc[@]}"; do echo "$k: exit ${rc[$k]}"; done
grep -hE "passed|failed|error" "$OUT"/gpu-suite.log "$OUT"/gpu-tests.log "$OUT"/repack-tests.log "$OUT"/ranks-tests.log "$OUT"/ring-tests.log \
  "$OUT"/structural-*.log "$OUT"/cpu-suite.log 2>/dev/null | tail -n 6
