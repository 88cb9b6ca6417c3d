# Dev runner (device): the next session's plan in priority order, resumed across calls on one
# machine (state in .cache/all_state; on a fresh machine from .dev/state_all, a fetched $OUT/all_state).
# Usage: LIMIT=<seconds this call may run> bash .dev/all.sh > $OUT/log.txt 2>&1; grep -v "^+" $OUT/log.txt | tail -60
set -x
limit=${LIMIT:-585}; end=$(( $(date +%s) + limit - 10 )); left() { echo $(( end - $(date +%s) )); }
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
S=.cache/all_state; mkdir -p $S
[ "$(cat $S/commit 2>/dev/null)" = "$(cat .dev/commit)" ] || { rm -rf $S/*; [ -f .dev/all_state.tgz ] && tar xzf .dev/all_state.tgz -C .cache; }
cat .dev/commit > $S/commit
todo() { [ ! -f $S/$1.done ] && [ "$(left)" -gt $2 ]; }
# 1. GPU tests of the tensor path, the prepared runs and the close call (HOST_TIE, ff75973, 5168a33)
if todo tests 180; then
  timeout 75 python3 -m pytest -m gpu -q -n 14 -p no:cacheprovider -rfE tests/test_interop.py tests/test_prepared_runs.py > $S/tests.txt 2>&1; tail -4 $S/tests.txt
  timeout 90 python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider -rfE tests/gpu/test_kernel.py tests/gpu/test_values_grad_kernel.py tests/gpu/test_background_compile.py -k "close_call or times_the_ways or direct_kernel_answers" > $S/close.txt 2>&1; tail -4 $S/close.txt
  touch $S/tests.done
fi
# 2. where a tensor's host time goes (issue 56)
if todo probe 60; then
  timeout 55 python3 benchmarks/probe_torch_operands.py 1,96,96,2:bsl 1,48,192,4:bsf > $S/probe.txt 2>&1; grep -E 'cupy|  ' $S/probe.txt | grep -v "^ *[0-9]" | head -40
  touch $S/probe.done
fi
# 3. the interop bf16 rows (issue 56's target), then the graph rows at the same commit
for kind in bf16 graph; do
  if todo interop_$kind 280; then
    timeout $(( $(left) - 5 )) python3 benchmarks/bench_suite.py --suite interop --interop-rows $kind --count 40 --out $S/interop_$kind > $S/interop_$kind.txt 2>&1; tail -3 $S/interop_$kind.txt
    grep -q '"summary"' $S/interop_$kind/interop.json 2>/dev/null && touch $S/interop_$kind.done
    python3 .dev/below.py $S/interop_$kind/interop.json auto_torch 2>&1 | tail -8
  fi
done
tar czf $OUT/all_state.tgz -C .cache all_state   # at most 8 files come back: one archive
# 4. issue 54: portability, emulated suites, memcheck (its own state)
if [ "$(left)" -gt 150 ]; then LIMIT=$(left) bash .dev/emu.sh 2>&1 | grep -v "^+" | tail -30; fi
tar czf $OUT/all_state.tgz -C .cache all_state   # at most 8 files come back: one archive
