# session 13, call A: native tests of the changed paths, then the interop bf16 rows (issue 56)
set -x
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import torch, cupy; print(torch.__version__, cupy.__version__)"
timeout 100 python3 -m pytest -m gpu -q -n 12 -p no:cacheprovider -rfE tests/test_interop.py tests/test_prepared_runs.py tests/test_graphs.py tests/test_group_gemm.py tests/test_bfloat16.py tests/gpu/test_kernel.py tests/gpu/test_values_grad_kernel.py tests/gpu/test_background_compile.py -k "close_call or times_the_ways or direct_kernel_answers or pytorch or graph or bfloat16 or group or prepared" > $OUT/native.txt 2>&1; tail -15 $OUT/native.txt
timeout 240 python3 benchmarks/bench_suite.py --suite interop --interop-rows bf16 --count 40 --out $OUT/interop > $OUT/interop.txt 2>&1; tail -25 $OUT/interop.txt
timeout 60 python3 benchmarks/probe_torch_operands.py 1,96,96,2:bsl 1,48,192,4:bsf > $OUT/probe.txt 2>&1; grep -E 'cupy|K @' $OUT/probe.txt
