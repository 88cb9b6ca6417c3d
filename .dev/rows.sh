# Dev runner (device), branch row-cluster (issue 53): the clustered 16-bit group kernel's GPU
# tests, memcheck on its short batches, its timing against one block a tile, and a profile.
# Usage: LIMIT=580 bash .dev/rows.sh > $OUT/log.txt 2>&1   (results: $OUT/rows.tgz, one file)
set -x
limit=${LIMIT:-585}; end=$(( $(date +%s) + limit - 10 )); left() { echo $(( end - $(date +%s) )); }
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
R=.cache/rows; rm -rf $R; mkdir -p $R
# 1. correctness (hangs would be a protocol bug: the timeout says so)
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -x -rfE tests/gpu/test_kernel.py -k "clusters or half_group_kernel_small" > $R/tests.txt 2>&1; echo "tests rc=$?"; tail -15 $R/tests.txt
tar czf $OUT/rows.tgz -C .cache rows
# 2. timing: one block a tile against clusters rows x batches (slots 8, 64 x 64, chunks of 16)
P=8,64,64,16,1,1,3,1,1
C="$P,1,1;$P,2,1;$P,4,1;$P,1,2;$P,2,2;$P,4,2;$P,2,4;$P,8,1"
timeout $(( $(left) / 2 )) python3 benchmarks/probe_mma.py --cases float16:default --layouts bsf --patterns "1,256,256,16;1,512,512,32;6,128,128,64;1,128,128,64;2,96,384,16;4,256,256,8" --configs "$C" --verbose --baseline $PWD/.dev/ks_mma_group_v4.cu --swap ks_mma_group.cu > $R/probe.txt 2>&1; tail -40 $R/probe.txt
# (the baseline column: the same configurations with .dev/ks_mma_group_v4.cu, whose clusters
# st.async 16-byte pieces after a transpose in each quad instead of 4-byte words)
tar czf $OUT/rows.tgz -C .cache rows
# 3. memcheck on the short batches (lead 1 only)
timeout $(( $(left) - 60 )) compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_kernel.py -k "clusters and lead1 and float16" > $R/memcheck.txt 2>&1; echo "memcheck rc=$?"; tail -5 $R/memcheck.txt
# 4. where the time goes with clusters of 4 x 2 on (1,256,256,16)
timeout 60 ncu --kernel-name regex:ks_ --launch-skip 1 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats python3 benchmarks/probe_mma.py --one 1,256,256,16 --dtype float16 --layout bsf --config 8,64,64,16,1,1,3,1,1,4,2 > $R/ncu4.txt 2>&1; grep -E "Duration|Throughput|Eligible|Stall" $R/ncu4.txt | head -20
tar czf $OUT/rows.tgz -C .cache rows
