# session 13, short call: the PyTorch fast path's GPU tests, then the interop bf16 rows (issue 56)
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 75 python3 -m pytest -m gpu -q -n 12 -p no:cacheprovider -rfE tests/test_interop.py tests/test_prepared_runs.py > $OUT/native.txt 2>&1; tail -8 $OUT/native.txt
python3 benchmarks/bench_suite.py --suite interop --interop-rows bf16 --count 40 --out $OUT/interop > $OUT/interop.txt 2>&1; tail -25 $OUT/interop.txt
