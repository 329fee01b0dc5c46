#!/usr/bin/env bash
# One GPU-machine session of amdahl's GPU checks, run from the repository root there:
#   bash tools/gpu/run.sh [tests] [profile] [base] [pdl] [indexer] [ab] [launches] [prefill] [ncu] [ncufull] [hot] [peers]
# Expects the binaries built here (see GPU.md) in .gpu/: amdahl (release, --features cuda) and
# engine-tests (the amdahl-engine test binary, release, --features cuda), and the kernel cache
# in .gpu/kcache (`amdahl kernels --arch 90 --pdl --cache .gpu/kcache`: all three builds), or
# tools/gpu/pack.sh's tarball of them in .gpup/g.tgz, unpacked here. `base` profiles
# .gpu/amdahl-base (pack.sh BASE=<rev>) and .gpu/amdahl back to back. Logs go
# to $OUT. `pdl` repeats the decode profile with plain launches (AMDAHL_PDL=0; the default is 1),
# then with weight prefetches (2). `indexer` runs the model tests and the decode profile with the
# first indexer kernels (AMDAHL_INDEXER=rows) and times both indexer kernel sets by ncu.
# `ab` repeats the decode profile once per environment assignment in AB (space-separated, e.g.
# AB="AMDAHL_ROUTE_PLAN=separate AMDAHL_INDEXER=rows"; commas join assignments of one run:
# AB="AMDAHL_PDL=0,AMDAHL_INDEXER=rows"). `launches` lists every kernel of the first decode step (the warm-up) with its ncu device time
# at each of LAUNCH_BATCH (tools/gpu/launches.py); LAUNCH_COUNT (default 130, one b1/b16 step of 4 layers;
# a b64 step is 148 launches) bounds the kernels profiled. SKIP_TESTS (a grep -E pattern) leaves tests out, e.g. `every_kernel_module_compiles` (~4 min
# of NVRTC on the GPU machine's CPU; the kernel cache built here already compiled every module).
set -uo pipefail
# The binaries and kernel cache as tools/gpu/pack.sh packs them for the device tool's carry.
if [ ! -x .gpu/amdahl ] && [ -f .gpup/g.tgz ]; then tar xzf .gpup/g.tgz; fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export AMDAHL_KERNEL_CACHE=$PWD/.gpu/kcache AMDAHL_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 RUST_LOG=${RUST_LOG:-warn}
what=${*:-tests profile}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
if [[ " $what " == *" tests "* ]]; then
  : >"$OUT/tests.log"
  pass=0; fail=0; failed=()
  for t in $(.gpu/engine-tests device::cuda --list 2>/dev/null | sed -n 's/: test$//p' | grep -Ev "${SKIP_TESTS:-^$}"); do
    s=$(date +%s%N)
    if timeout 240 .gpu/engine-tests "$t" --exact --nocapture --test-threads 1 >/tmp/t.log 2>&1; then
      pass=$((pass+1)); r=ok
    else
      fail=$((fail+1)); failed+=("$t"); r=FAILED
    fi
    ms=$(( ($(date +%s%N) - s) / 1000000 ))
    echo "=== $r $t (${ms} ms)" >>"$OUT/tests.log"
    grep -v '^$' /tmp/t.log | tail -n 40 >>"$OUT/tests.log"
  done
  echo "GPU tests: $pass passed, $fail failed ${failed[*]:-}" | tee -a "$OUT/tests.log"
  # The first failure again under compute-sanitizer, to name a faulting kernel.
  if [ "$fail" -gt 0 ] && command -v compute-sanitizer >/dev/null; then
    timeout 150 compute-sanitizer --tool memcheck --print-limit 5 .gpu/engine-tests "${failed[0]}" --exact --test-threads 1 \
      >/tmp/sanitizer.log 2>&1 || true
    tail -n 60 /tmp/sanitizer.log >>"$OUT/tests.log"
  fi
fi
if [[ " $what " == *" cli "* ]]; then
  {
    echo "--- generate"
    .gpu/amdahl generate --device cuda:0 --prompt "17*23=" --max-tokens 8
    echo "--- logits cuda vs cpu (fixture csa_hca8_yarn, three paths)"
    fx=tests/fixtures/v4/csa_hca8_yarn
    for mode in full incremental chunked; do
      .gpu/amdahl logits --model $fx --input $fx/golden.safetensors --mode $mode --prefix 5 --chunk 7 --device cuda:0 --output /tmp/g_$mode.st
    done
    .gpu/amdahl logits --model $fx --input $fx/golden.safetensors --output /tmp/c.st
    python3 - <<'PY'
from safetensors.numpy import load_file
import numpy as np
c = load_file("/tmp/c.st")["logits"]
for m in ["full", "incremental", "chunked"]:
    g = load_file(f"/tmp/g_{m}.st")["logits"]
    print(m, "rel l2 %.2e" % (np.linalg.norm(g - c) / np.linalg.norm(c)), "max|d|/max|c| %.2e" % (np.abs(g - c).max() / np.abs(c).max()))
PY
    echo "--- same fixture with index_topk 64 (top-k keeps every visible entry: no selection to flip)"
    rm -rf /tmp/fx64 && cp -r $fx /tmp/fx64
    python3 -c "import json;p='/tmp/fx64/config.json';c=json.load(open(p));c['index_topk']=64;json.dump(c,open(p,'w'))"
    .gpu/amdahl logits --model /tmp/fx64 --input $fx/golden.safetensors --device cuda:0 --output /tmp/g64.st
    .gpu/amdahl logits --model /tmp/fx64 --input $fx/golden.safetensors --output /tmp/c64.st
    python3 -c "
from safetensors.numpy import load_file
import numpy as np
c=load_file('/tmp/c64.st')['logits']; g=load_file('/tmp/g64.st')['logits']
print('topk64 rel l2 %.2e max|d|/max|c| %.2e' % (np.linalg.norm(g-c)/np.linalg.norm(c), np.abs(g-c).max()/np.abs(c).max()))"
    echo "--- serve on cuda:0"
    .gpu/amdahl serve --device cuda:0 --port 0 >/tmp/serve.log 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do url=$(sed -n 's/^listening on //p' /tmp/serve.log); [ -n "$url" ] && break; sleep 0.2; done
    curl -s "$url/v1/completions" -H 'Content-Type: application/json' -d '{"prompt":"17*23=","max_tokens":8,"temperature":0}'; echo
    curl -s "$url/metrics" | grep -E '^amdahl_stage_seconds_total' | head -12
    kill -TERM $pid; wait $pid
    tail -n 5 /tmp/serve.log
  } >"$OUT/cli.log" 2>&1
  cat "$OUT/cli.log" | head -60
fi
if [[ " $what " == *" profile "* ]]; then
  timeout 300 .gpu/amdahl profile --dummy v4-flash --layers ${LAYERS:-4} --batch 1,16,64 --ctx 8192 \
    --expert-format nvfp4 --steps 20 --json "$OUT/profile.json" >"$OUT/profile.txt" 2>&1
  echo "profile rc=$?" >>"$OUT/profile.txt"
  tail -n 80 "$OUT/profile.txt"
  if [ -n "${SLOW:-}" ]; then
    AMDAHL_SLOW_ATTENTION=$SLOW timeout 200 .gpu/amdahl profile --layers ${LAYERS:-4} --batch 16 --ctx 8192 --expert-format nvfp4 --steps 20 \
      --json "$OUT/profile_slow.json" >"$OUT/profile_slow.txt" 2>&1
    head -n 14 "$OUT/profile_slow.txt"
  fi
  if [ -n "${BLOCK:-}" ]; then
    # The block expert kernels at decode sizes, for comparison with the default warp kernels.
    AMDAHL_MOE_KERNEL=block timeout 200 .gpu/amdahl profile --layers ${LAYERS:-4} --batch 16,64 --ctx 8192 --expert-format nvfp4 --steps 10 \
      >"$OUT/profile_block.txt" 2>&1
    head -n 40 "$OUT/profile_block.txt"
  fi
  if [ -n "${MXFP4:-}" ]; then
    timeout 200 .gpu/amdahl profile --layers ${LAYERS:-4} --batch 16 --ctx 8192 --expert-format mxfp4 --steps 10 >"$OUT/profile_mxfp4.txt" 2>&1
    head -n 20 "$OUT/profile_mxfp4.txt"
  fi
fi
if [[ " $what " == *" base "* ]] && [ -x .gpu/amdahl-base ]; then
  # The base revision (pack.sh BASE=<rev>) and this one, back to back on the same machine.
  for bin in amdahl-base amdahl; do
    timeout 300 .gpu/$bin profile --dummy v4-flash --layers ${LAYERS:-4} --batch 1,16,64 --ctx 8192 \
      --expert-format nvfp4 --steps 20 --json "$OUT/profile_$bin.json" >"$OUT/profile_$bin.txt" 2>&1
    echo "profile ($bin) rc=$?" >>"$OUT/profile_$bin.txt"
    grep -E '^batch|^(mhc|attn_proj|indexer|attention|moe) |rc=' "$OUT/profile_$bin.txt" | cut -c1-120
  done
fi
if [[ " $what " == *" pdl "* ]]; then
  # The op tests in the level-2 build with every launch programmatic (the streamed linears there
  # issue weights before they wait; the model tests' tiny models never stream).
  for t in linears_in_every_format_match_the_cpu moe_matches_the_cpu_at_v4_widths tiled_gemm_matches_the_cpu; do
    if AMDAHL_PDL=2 timeout 240 .gpu/engine-tests "$t" --nocapture --test-threads 1 >/tmp/t.log 2>&1; then r=ok; else r=FAILED; fi
    echo "=== $r $t (AMDAHL_PDL=2)" | tee -a "$OUT/pdl_tests.log"
    grep -v '^$' /tmp/t.log | tail -n 30 >>"$OUT/pdl_tests.log"
  done
  for level in 0 2; do
    AMDAHL_PDL=$level timeout 300 .gpu/amdahl profile --dummy v4-flash --layers ${LAYERS:-4} --batch 1,16,64 --ctx 8192 \
      --expert-format nvfp4 --steps 20 --json "$OUT/profile_pdl$level.json" >"$OUT/profile_pdl$level.txt" 2>&1
    echo "profile (AMDAHL_PDL=$level) rc=$?" >>"$OUT/profile_pdl$level.txt"
    grep -E '^batch|copy bandwidth|rc=' "$OUT/profile_pdl$level.txt"
  done
fi
if [[ " $what " == *" indexer "* ]]; then
  : >"$OUT/indexer.log"
  for t in indexer_scores_and_topk tiny_models_match_the_cpu_on_every_path quantized_tiny_models_match_the_cpu \
      graph_replay_equals_eager greedy_tokens_equal_the_cpu programmatic_launches_equal_plain_launches; do
    if AMDAHL_INDEXER=rows timeout 240 .gpu/engine-tests "$t" --nocapture --test-threads 1 >/tmp/t.log 2>&1; then r=ok; else r=FAILED; fi
    echo "=== $r $t (AMDAHL_INDEXER=rows)" | tee -a "$OUT/indexer.log"
    grep -v '^$' /tmp/t.log | tail -n 30 >>"$OUT/indexer.log"
  done
  AMDAHL_INDEXER=rows timeout 300 .gpu/amdahl profile --dummy v4-flash --layers ${LAYERS:-4} --batch 1,16,64 --ctx 8192 \
    --expert-format nvfp4 --steps 20 --json "$OUT/profile_rows.json" >"$OUT/profile_rows.txt" 2>&1
  echo "profile (AMDAHL_INDEXER=rows) rc=$?" >>"$OUT/profile_rows.txt"
  grep -E '^batch|^indexer|rc=' "$OUT/profile_rows.txt"
  if command -v ncu >/dev/null; then
    for v in rows tiles; do
      for b in 1 16 64; do
        AMDAHL_INDEXER=$v timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:^(indexer|topk)" \
          --launch-count 4 --print-summary per-kernel .gpu/amdahl profile --dummy v4-flash --layers 3 --batch "$b" --ctx 8192 \
          --steps 1 >"$OUT/ncu_indexer_${v}_b$b.txt" 2>&1
        echo "--- ncu indexer $v batch $b"
        awk '/^  [a-z_0-9]+.*\(/ {k=$1} /Invocations/ {n=$NF} /gpu__time_duration.sum/ {print k, "launches", n, $(NF-3), $(NF-2), $(NF-1), $NF}' "$OUT/ncu_indexer_${v}_b$b.txt"
      done
    done
  fi
fi
if [[ " $what " == *" ab "* ]]; then
  for kv in ${AB:-AMDAHL_PDL=0}; do
    tag=$(echo "$kv" | tr -c 'A-Za-z0-9\n' '_')
    env ${kv//,/ } timeout 300 .gpu/amdahl profile --dummy v4-flash --layers ${LAYERS:-4} --batch 1,16,64 --ctx 8192 \
      --expert-format nvfp4 --steps 20 --json "$OUT/profile_$tag.json" >"$OUT/profile_$tag.txt" 2>&1
    echo "profile ($kv) rc=$?" >>"$OUT/profile_$tag.txt"
    grep -E '^batch|^(mhc|attn_proj|indexer|attention|moe) |rc=' "$OUT/profile_$tag.txt" | cut -c1-120
  done
fi
if [[ " $what " == *" launches "* ]] && command -v ncu >/dev/null; then
  # Model kernels only (no weight fills, copy or cuBLAS peaks): the first ones are the warm-up step.
  for b in ${LAUNCH_BATCH:-1 16}; do
    rm -f /tmp/launches.ncu-rep
    timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --export /tmp/launches -f \
      -k 'regex:^(compressor|indexer|kv_prep|q_prep|ring_store|rope|sparse_attn|linear_|stream_|gemm_reduce|gemm_swiglu|gemm_[a-z0-9_]+_m|embed|hc_|norm_rows|moe_|plan_identity|sample_rows|topk)' \
      --launch-count ${LAUNCH_COUNT:-130} .gpu/amdahl profile --dummy v4-flash --layers ${LAYERS:-4} --batch "$b" --ctx 8192 \
      --steps 1 >"$OUT/launches_b$b.log" 2>&1
    ncu --import /tmp/launches.ncu-rep --csv --page raw >"$OUT/launches_b$b.csv" 2>>"$OUT/launches_b$b.log"
    # With a profile of this run (run.sh profile first), each launch against its one-shot floor.
    fl=""; [ -f "$OUT/profile.json" ] && fl="--floors $OUT/profile.json"
    python3 tools/gpu/launches.py "$OUT/launches_b$b.csv" $fl >"$OUT/launches_b$b.txt" 2>&1
    echo "--- launches, batch $b"; sed -n '/^---/,$p' "$OUT/launches_b$b.txt" | head -n 25
  done
fi
if [[ " $what " == *" prefill "* ]]; then
  # One 8192-token prompt prefilled in chunks (after one batch-1 decode measurement).
  timeout ${PREFILL_TIMEOUT:-300} .gpu/amdahl profile --dummy v4-flash --layers ${LAYERS:-4} --batch 1 --ctx 8192 \
    --steps 2 --prefill ${PREFILL:-8192} --prefill-chunk ${CHUNK:-2048} --json "$OUT/prefill.json" >"$OUT/prefill.txt" 2>&1
  echo "prefill rc=$?" >>"$OUT/prefill.txt"
  sed -n '/^prefill of/,$p' "$OUT/prefill.txt"; tail -n 3 "$OUT/prefill.txt"
fi
if [[ " $what " == *" ncu "* ]] && command -v ncu >/dev/null; then
  # Per-kernel device time of the kernels named by NCU_KERNELS (a regex) at each batch size.
  for b in ${NCU_BATCH:-1 16}; do
    timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:${NCU_KERNELS:-sparse}" \
      --launch-count ${NCU_COUNT:-8} --print-summary per-kernel .gpu/amdahl profile --dummy v4-flash \
      --layers ${NCU_LAYERS:-${LAYERS:-4}} --batch "$b" --ctx 8192 --steps 1 >"$OUT/ncu_b$b.txt" 2>&1
    echo "--- ncu batch $b"
    awk '/^  [a-z_]+.*\(/ {k=$1} /Invocations/ {n=$NF} /gpu__time_duration.sum/ {print k, "launches", n, $(NF-3), $(NF-2), $(NF-1), $NF}' "$OUT/ncu_b$b.txt"
  done
fi
if [[ " $what " == *" ncufull "* ]] && command -v ncu >/dev/null; then
  # Every section (memory, occupancy, warp stalls) of kernels at a batch: NCUF, a list of
  # regex@batch (e.g. NCUF="moe_up_w@16 stream_linear_fp8@1"), else NCUF_KERNELS at NCUF_BATCH.
  for kb in ${NCUF:-${NCUF_KERNELS:-linear_fp8}@${NCUF_BATCH:-1}}; do
    kr=${kb%@*}; b=${kb##*@}; tag=$(echo "${kr}_b$b" | tr -c 'A-Za-z0-9_\n' '_')
    timeout 240 ncu --set full -k "regex:$kr" --launch-count ${NCUF_COUNT:-6} .gpu/amdahl profile \
      --dummy v4-flash --layers 1 --batch "$b" --ctx 8192 --steps 1 >"$OUT/ncu_full_$tag.txt" 2>&1
    echo "--- ncu full: $kr at batch $b"
    grep -E '^  [a-z_]+.*\(|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|One or More Eligible|Stall' "$OUT/ncu_full_$tag.txt" | head -n 80
  done
fi
if [[ " $what " == *" hot "* ]] && command -v ncu >/dev/null; then
  # One launch of each kernel in HOT (regex@batch, e.g. HOT="sparse_attn_partial@1"): its full
  # ncu sections and the SASS lines holding the most warp-stall samples (tools/gpu/hot.py);
  # HOT_SKIP launches of it are passed over first.
  for kb in ${HOT:-sparse_attn_partial@1}; do
    kr=${kb%@*}; b=${kb##*@}; tag=$(echo "${kr}_b$b" | tr -c 'A-Za-z0-9_\n' '_')
    rm -f /tmp/hot.ncu-rep
    timeout 200 ncu --set full --import-source no -k "regex:$kr" --launch-skip ${HOT_SKIP:-0} --launch-count 1 --export /tmp/hot -f \
      .gpu/amdahl profile --dummy v4-flash --layers ${HOT_LAYERS:-1} --batch "$b" --ctx 8192 --steps 1 >/tmp/hot.log 2>&1
    ncu --import /tmp/hot.ncu-rep >"$OUT/hot_$tag.txt" 2>&1
    ncu --import /tmp/hot.ncu-rep --page source --csv --print-source sass >/tmp/hot_src.csv 2>/dev/null
    python3 tools/gpu/hot.py /tmp/hot_src.csv --top ${HOT_TOP:-25} >>"$OUT/hot_$tag.txt" 2>&1
    echo "--- hot: $kr at batch $b"
    grep -E '^  [a-z_]+.*\(|DRAM Throughput|L2 Cache Throughput|Duration|Elapsed Cycles|SM Frequency|Achieved Occupancy|Registers Per|Dynamic Shared|Warp Cycles Per Issued|Issued Ipc|No Eligible|Stall|instructions, |^ *[0-9.]+%  ' "$OUT/hot_$tag.txt" | head -n ${HOT_LINES:-70}
  done
fi
if [[ " $what " == *" peers "* ]]; then
  # The peers at the same shapes (tools/gpu/peers.py); SGLang's kernel only if brought in .gpu/peers.
  timeout ${PEERS_TIMEOUT:-420} python3 tools/gpu/peers.py --out "$OUT" ${PEERS_ONLY:+--only $PEERS_ONLY} >"$OUT/peers.txt" 2>&1
  echo "peers rc=$?" >>"$OUT/peers.txt"
  grep -v '^\s*$' "$OUT/peers.txt" | tail -n 40
fi
echo "total $(( $(date +%s) - t0 )) s"
