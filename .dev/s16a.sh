# Dev runner (device), session 16 call 1: cuBLASLt vs cublasGemmEx host/GPU time (lt_probe.py),
# then Nsight Compute on the kernel of the short bf16 rows. Results: $OUT/s16a.tgz
set -x
limit=${LIMIT:-585}; end=$(( $(date +%s) + limit - 10 )); left() { echo $(( end - $(date +%s) )); }
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
R=.cache/s16a; rm -rf $R; mkdir -p $R
timeout 240 python3 .dev/lt_probe.py > $R/lt.txt 2>&1; cat $R/lt.txt
tar czf $OUT/s16a.tgz -C .cache s16a
for L in bsl bsf; do
python3 benchmarks/profile_product.py 1,96,96,2 bfloat16 $L kernel > /dev/null 2>&1
timeout 90 ncu --kernel-name regex:ks_ --launch-skip 2 --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats python3 benchmarks/profile_product.py 1,96,96,2 bfloat16 $L kernel > $R/ncu_$L.txt 2>&1
grep -E "ks_|Duration|Throughput|Grid Size|Block Size|Registers|Shared Memory|Achieved Occ|Waves" $R/ncu_$L.txt | head -24
done
tar czf $OUT/s16a.tgz -C .cache s16a
