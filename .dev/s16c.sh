# Dev runner (device), session 16 call 3: portability (issue 54) and the interop rows (issue 56) at
# HEAD. Results: $OUT/s16c.tgz (one file)
set -x
limit=${LIMIT:-585}; end=$(( $(date +%s) + limit - 10 )); left() { echo $(( end - $(date +%s) )); }
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
R=.cache/s16c; rm -rf $R; mkdir -p $R
timeout $(( $(left) - 200 )) python3 benchmarks/bench_suite.py --suite portability --count 40 --out $R/port > $R/port.txt 2>&1; tail -8 $R/port.txt
python3 .dev/below.py $R/port/portability.json 2>&1 | tail -12
tar czf $OUT/s16c.tgz -C .cache s16c
timeout $(( $(left) - 30 )) python3 benchmarks/bench_suite.py --suite interop --interop-rows bf16 --count 40 --out $R/bf16 > $R/bf16.txt 2>&1; tail -3 $R/bf16.txt
python3 .dev/below.py $R/bf16/interop.json auto_torch 2>&1 | tail -6
tar czf $OUT/s16c.tgz -C .cache s16c
timeout $(( $(left) - 5 )) python3 benchmarks/bench_suite.py --suite interop --interop-rows graph --count 40 --out $R/graph > $R/graph.txt 2>&1; tail -3 $R/graph.txt
tar czf $OUT/s16c.tgz -C .cache s16c
