#!/usr/bin/env bash
# One device call on the GPU machine (carry .whl): install, then run the named phases, logs under $OUT.
#   bash bench/gpu_session.sh tests        # pytest -m gpu, then the conformance suite on the GPU
#   bash bench/gpu_session.sh tests80      # both again on sm_80 code (KILN_TARGET=sm_80; on a Hopper); tests89 likewise
#   bash bench/gpu_session.sh bench service   # bench/run.py, bench/service.py (also: probe)
#   bash bench/gpu_session.sh dropin          # bench/dropin.py: torch.compile with kiln's drop-in vs Triton
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
for phase in "$@"; do
  case "$phase" in
    tests)
      python3 -m pytest -q -m gpu -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tier.log" | tail -25
      KILN_TEST_GPU_CONFORMANCE=1 python3 -m pytest -q -p no:cacheprovider tests/test_lang_*.py 2>&1 \
        | tee "$OUT/gpu-conformance.log" | tail -25 ;;
    tests80|tests86|tests89)  # the same on an older GPU's code (KILN_TARGET: the driver JIT-compiles its PTX)
      sm=sm_${phase#tests}
      KILN_TARGET=$sm python3 -m pytest -q -m gpu -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tier-$sm.log" | tail -5
      KILN_TARGET=$sm KILN_TEST_GPU_CONFORMANCE=1 python3 -m pytest -q -p no:cacheprovider tests/test_lang_*.py 2>&1 \
        | tee "$OUT/gpu-conformance-$sm.log" | tail -5 ;;
    bench)
      python3 bench/run.py --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -60 ;;
    probe)
      (cd bench && python3 occupancy_probe.py) 2>&1 | tee "$OUT/probe.log" | tail -20 ;;
    service)
      python3 bench/service.py --out "$OUT" 2>&1 | tee "$OUT/service.log" | tail -40 ;;
    dropin)
      python3 bench/dropin.py --out "$OUT" 2>&1 | tee "$OUT/dropin.log" | tail -60 ;;
    *) echo "unknown phase $phase"; exit 2 ;;
  esac
done
