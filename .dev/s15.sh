# Dev runner (device), first call of the next session: where the dense GEMM's host time goes
# (issue 56), then the interop bf16 rows with PyTorch's dense product among the baselines.
# Usage: LIMIT=580 bash .dev/s15.sh > $OUT/log.txt 2>&1  (results: $OUT/s15.tgz, one file)
set -x
limit=${LIMIT:-585}; end=$(( $(date +%s) + limit - 10 )); left() { echo $(( end - $(date +%s) )); }
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
R=.cache/s15; rm -rf $R; mkdir -p $R
timeout 60 python3 .dev/gemm_host.py 1,96,96,2 bsl > $R/gemm_host.txt 2>&1; cat $R/gemm_host.txt
timeout 40 python3 .dev/gemm_host.py 1,48,192,4 bsf > $R/gemm_host_bsf.txt 2>&1; cat $R/gemm_host_bsf.txt
# the kernel's tiles on the shortest products (17.1 us against a ~6.4 us floor on (1,96,96,2)
# bsl at 260e73e): does another candidate reach the floor? (float16: the same kernels)
timeout 90 python3 benchmarks/probe_mma.py --cases float16:default --layouts bsl,bsf --patterns "1,96,96,2;1,48,192,4;1,96,384,4" --verbose > $R/short_tiles.txt 2>&1; tail -12 $R/short_tiles.txt
timeout 60 python3 .dev/dense_forms.py > $R/dense_forms.txt 2>&1; cat $R/dense_forms.txt | tail -6
tar czf $OUT/s15.tgz -C .cache s15
timeout $(( $(left) - 15 )) python3 benchmarks/bench_suite.py --suite interop --interop-rows bf16 --count 40 --out $R/bf16 > $R/bf16.txt 2>&1; tail -3 $R/bf16.txt
python3 .dev/below.py $R/bf16/interop.json auto_torch 2>&1 | tail -12
tar czf $OUT/s15.tgz -C .cache s15
