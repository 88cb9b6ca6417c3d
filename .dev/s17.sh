# Dev runner (device), seventeenth session: issue 56 at one commit (interop bf16 + graph rows,
# the native GPU suite, memcheck on a subset), then issue 54's portability. Resumed across
# calls: state .cache/s17 (commit-checked), restored from .dev/s17_state.tgz.
# Usage: LIMIT=<s> bash .dev/s17.sh > $OUT/log.txt 2>&1
set -x
limit=${LIMIT:-585}; end=$(( $(date +%s) + limit - 10 )); left() { echo $(( end - $(date +%s) )); }
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
S=.cache/s17; mkdir -p $S
[ "$(cat $S/commit 2>/dev/null)" = "$(cat .dev/commit)" ] || { rm -rf $S/*; [ -f .dev/s17_state.tgz ] && tar xzf .dev/s17_state.tgz -C .cache; }
[ "$(cat $S/commit 2>/dev/null)" = "$(cat .dev/commit)" ] || rm -rf $S/*
cat .dev/commit > $S/commit
todo() { [ ! -f $S/$1.done ] && [ "$(left)" -gt $2 ]; }
save() { tar czf $OUT/s17_state.tgz -C .cache s17; }
interop() {
  kind=$1
  if todo interop_$kind 150; then
    timeout $(( $(left) - 5 )) python3 benchmarks/bench_suite.py --suite interop --interop-rows $kind --count 40 --out $S/interop_$kind > $S/interop_$kind.txt 2>&1; tail -3 $S/interop_$kind.txt
    grep -q '"summary"' $S/interop_$kind/interop.json 2>/dev/null && touch $S/interop_$kind.done
    python3 .dev/below.py $S/interop_$kind/interop.json auto_torch 2>&1 | tail -8
    save
  fi
}
interop bf16
# the tests of what changed (the tensor path), then memcheck on them and the kernels' subset
if todo tests 150; then
  KSCUPY_CACHE_DIR=$PWD/.cache/ks1 timeout 120 python3 -m pytest -m gpu -q -n 14 -p no:cacheprovider -rfE tests/test_interop.py tests/test_bfloat16.py tests/test_graphs.py tests/test_prepared_runs.py > $S/tests.txt 2>&1; tail -4 $S/tests.txt
  touch $S/tests.done; save
fi
if todo memcheck 150; then
  t=$(( $(left) > 200 ? 150 : $(left) - 30 ))
  ( timeout $t compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_kernel.py -k "sanitizer_subset" > $S/mc_kernel.txt 2>&1; echo "rc=$? kernel" ) &
  ( KSCUPY_CACHE_DIR=$PWD/.cache/ks2 timeout $t compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_interop.py -k "repeated_pytorch_products" > $S/mc_interop.txt 2>&1; echo "rc=$? interop" ) &
  ( KSCUPY_CACHE_DIR=$PWD/.cache/ks3 timeout $t compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_bfloat16.py tests/test_graphs.py > $S/mc_bf16.txt 2>&1; echo "rc=$? bf16+graphs" ) &
  wait
  tail -n 2 $S/mc_*.txt; grep -h "ERROR SUMMARY" $S/mc_*.txt | sort | uniq -c
  touch $S/memcheck.done; save
fi
interop graph
# the whole native suite, resumed across calls
[ "$(left)" -gt 90 ] && python3 .dev/emu_suite.py native $end $S
save
if todo port 270; then
  timeout $(( $(left) - 5 )) python3 benchmarks/bench_suite.py --suite portability --count 40 --out $S/port > $S/port.txt 2>&1; tail -4 $S/port.txt
  grep -q '"summary"' $S/port/portability.json 2>/dev/null && touch $S/port.done
  python3 .dev/below.py $S/port/portability.json 2>&1 | tail -8
fi
save
