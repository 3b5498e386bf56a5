#!/usr/bin/env bash
# One tree for bench/ab.sh: .scratch/ab/NAME from COMMIT's files, without what no benchmark reads (dated results,
# the PTX corpus) so that the trees and the working tree fit the device call's 64 MiB carry; FILES from this working
# tree copied over it (a benchmark script or kernel the branch under test added, so every tree runs the same one).
#   bash bench/ab_tree.sh NAME COMMIT [FILES...]
#   bash bench/ab_tree.sh main main bench/batched_attention.py bench/kernels.py
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 commit=$2
shift 2
rm -rf ".scratch/ab/$name"
mkdir -p ".scratch/ab/$name"
git archive "$commit" -- . ':(exclude)bench/results' ':(exclude)tests/codegen_corpus' | tar -x -C ".scratch/ab/$name"
for f in "$@"; do
  mkdir -p ".scratch/ab/$name/$(dirname "$f")"
  cp "$f" ".scratch/ab/$name/$f"
done
du -sh ".scratch/ab/$name"
