#!/usr/bin/env bash
# A/B of codegen on the GPU machine in one device call: this working tree's kiln against other
# commits' kilns, one benchmark command run in each tree in turn (processes one after another,
# the first tree again at the end, so the spread between two runs of the same build shows).
#
# Here, before the call, one tree per commit to compare (the device copies the working tree, not .git):
#   bash bench/ab_tree.sh NAME COMMIT [FILES...]  # .scratch/ab/NAME: COMMIT's files less bench/results and the PTX
#                                                 # corpus (the carry's 64 MiB), FILES copied in from here
# then run with carry [".whl", ".scratch/ab"]:
#   bash bench/ab.sh                                  # bench/attention.py fwd,bwd at N 4096, 16384, kiln only
#   AB_CMD="bench/matmul.py --dtypes fp16,bf16 --sizes 4096,8192 --libs kiln" bash bench/ab.sh
# Logs: $OUT/ab-<tree>-<round>.log (tree "head": this working tree); AB_TREES picks trees (default: all).
# AB_PYTEST="tests/test_x.py ...": first `pytest -m gpu` of those files in each tree, with that tree's kiln
# (logs $OUT/ab-<tree>-tests.log).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
AB_CMD=${AB_CMD:-bench/attention.py --modes fwd,bwd --ctx 4096,16384 --libs kiln}
trees=${AB_TREES:-$(ls .scratch/ab 2>/dev/null)}
for name in $trees; do  # each commit's kiln in a folder of its own, found first on PYTHONPATH
  python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target "/tmp/kiln-ab/$name" \
    ".scratch/ab/$name" 2>&1 | grep -v -i warning
  python3 -m compileall -q -j 8 "/tmp/kiln-ab/$name" > /dev/null 2>&1
done

if [ -n "${AB_PYTEST:-}" ]; then  # each tree's GPU tests, from its own folder with its own kiln first
  for name in $trees; do
    echo "== $name: pytest -m gpu $AB_PYTEST"
    (cd ".scratch/ab/$name" && PYTHONPATH=/tmp/kiln-ab/$name:${PYTHONPATH:-} python3 -m pytest -q -m gpu \
      -p no:cacheprovider $AB_PYTEST) 2>&1 | tee "$OUT/ab-$name-tests.log" | tail -3
  done
fi

run() {  # run TREE ROUND: AB_CMD in TREE's folder with TREE's kiln and a cache of its own, no daemon
  local tree=$1 dir=. path=${PYTHONPATH:-}
  if [ "$tree" != head ]; then dir=.scratch/ab/$tree; path=/tmp/kiln-ab/$tree:$path; fi
  echo "== $tree, round $2: $AB_CMD"
  # each tree its own CUDA compute cache as well: a kiln older than bdd336a links through it, and a link of a
  # PTX another tree linked first reports neither spills nor wgmma serialization (session 60: builds 2.6x slower)
  (cd "$dir" && export PYTHONPATH=$path KILN_DAEMON=off KILN_CACHE_DIR=/tmp/kiln-ab-cache/$tree \
    CUDA_CACHE_PATH=/tmp/kiln-ab-cuda-cache/$tree && \
    python3 -c "import kiln; print('kiln from', kiln.__file__)" && python3 $AB_CMD) 2>&1 \
    | tee "$OUT/ab-$tree-$2.log" | grep -E '^\||^kiln from|mismatch|Error'
}

run head 1
for name in $trees; do run "$name" 1; done
run head 2
