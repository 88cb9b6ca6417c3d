# Dev runner (device), session 16 call 2: tensor path host breakdown, D^T-stored dense GPU test,
# then the interop bf16 rows. Results: $OUT/s16b.tgz
set -x
limit=${LIMIT:-585}; end=$(( $(date +%s) + limit - 10 )); left() { echo $(( end - $(date +%s) )); }
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
R=.cache/s16b; rm -rf $R; mkdir -p $R
timeout 150 python3 .dev/tensor_host.py 1,96,96,2:bsl 1,96,96,2:bsf 1,48,192,4:bsf > $R/tensor_host.txt 2>&1; cat $R/tensor_host.txt
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -x -rfE tests/gpu/test_kernel.py -k "dense" > $R/dense_tests.txt 2>&1; echo "dense tests rc=$?"; tail -3 $R/dense_tests.txt
tar czf $OUT/s16b.tgz -C .cache s16b
