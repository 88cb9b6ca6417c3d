# session 14, minimal call: GPU tests of the tensor path and the close call, then the probe
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 70 python3 -m pytest -m gpu -q -n 14 -p no:cacheprovider -rfE tests/test_interop.py tests/test_prepared_runs.py > $OUT/native.txt 2>&1; tail -4 $OUT/native.txt
timeout 75 python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider -rfE tests/gpu/test_kernel.py tests/gpu/test_values_grad_kernel.py tests/gpu/test_background_compile.py -k "close_call or times_the_ways or direct_kernel_answers" > $OUT/close.txt 2>&1; tail -4 $OUT/close.txt
timeout 55 python3 benchmarks/probe_torch_operands.py 1,96,96,2:bsl 1,48,192,4:bsf > $OUT/probe.txt 2>&1; grep -E 'cupy|  ' $OUT/probe.txt | grep -v "^ *[0-9]" | head -40
