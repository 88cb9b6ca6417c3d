# Next session, call 3: native GPU tests of what the eleventh session changed (bfloat16 on every backend, the
# background-compile and rows tests, bfloat16 arithmetic), then portability (54) and parity --append (53).
# parity starts a new file at the new commit (--append refuses a file of another commit); a later call
# of the same commit copies the fetched file back into .dev/parity/ and appends.
set -x
end=$((SECONDS+585))
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl .whl/bf16/*.whl 2>/dev/null
export PYTHONPATH=$PWD:/tmp/site
timeout 150 python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider -rf tests/test_bfloat16.py tests/gpu/test_background_compile.py tests/gpu/test_chain_rows.py tests/test_algebra.py tests/test_bench_interop.py "tests/gpu/test_kernel.py::test_auto_times_a_close_call" "tests/gpu/test_kernel.py::test_warmup_times_its_close_calls_after_the_pool" > $OUT/pytest.log 2>&1; tail -4 $OUT/pytest.log
timeout 240 python3 benchmarks/bench_suite.py --suite portability --count 40 --out $OUT/port > $OUT/port.txt 2>&1; tail -18 $OUT/port.txt
rm -rf .dev/parity; mkdir -p .dev/parity
timeout $((end-SECONDS)) python3 benchmarks/bench_suite.py --suite parity --dtypes float16,float32,float64,complex64,complex128 --count 60 --out .dev/parity --append > $OUT/parity.txt 2>&1; tail -3 $OUT/parity.txt
cp .dev/parity/parity.json $OUT/
