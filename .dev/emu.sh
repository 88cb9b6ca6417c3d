# Dev runner (device), issue 54 at one commit: the GPU suite emulated as sm_89 and sm_80
# (resumed across calls; state in .cache/emu_state on a warm machine, else .dev/state),
# after portability; then memcheck on our kernels in both modes. Each call does what is next.
set -x
limit=${LIMIT:-585}; end=$(( $(date +%s) + limit - 10 ))
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy BENCH_COMMIT=$(cat .dev/commit)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
S=.cache/emu_state; mkdir -p $S
# resume from this machine's state, else from the archive a previous call returned, where
# either was made at this commit (a stale state is dropped)
[ "$(cat $S/commit 2>/dev/null)" = "$(cat .dev/commit)" ] || { rm -rf $S/*; [ -f .dev/emu_state.tgz ] && tar xzf .dev/emu_state.tgz -C .cache; }
[ "$(cat $S/commit 2>/dev/null)" = "$(cat .dev/commit)" ] || rm -rf $S/*
cat .dev/commit > $S/commit
left() { echo $(( end - $(date +%s) )); }
if [ ! -f $S/port/portability.json ] && [ "$(left)" -gt 200 ]; then
  timeout $(left) python3 benchmarks/bench_suite.py --suite portability --count 40 --out $S/port > $S/port.txt 2>&1; tail -20 $S/port.txt; python3 .dev/below.py $S/port/portability.json
fi
if [ ! -f $S/native.done ] && [ "$(left)" -gt 150 ]; then
  KSCUPY_CACHE_DIR=$PWD/.cache/ks timeout 120 python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider -rfE tests/gpu/test_kernel.py tests/gpu/test_values_grad_kernel.py tests/gpu/test_background_compile.py -k "close_call or times_the_ways or direct_kernel_answers" > $S/native.txt 2>&1; tail -3 $S/native.txt; touch $S/native.done
fi
for cc in 89 80; do
  [ "$(left)" -gt 90 ] && python3 .dev/emu_suite.py $cc $end $S
done
complete() { grep -q '"complete": true' $S/sm$1_summary.json 2>/dev/null; }
if complete 89 && complete 80 && [ ! -f $S/memcheck.done ] && [ "$(left)" -gt 150 ]; then
  for cc in 89 80; do KSCUPY_EMULATE_ARCH=$cc python3 -m pytest -m gpu --collect-only -q -p no:cacheprovider tests/gpu/test_kernel.py -k "sanitizer_subset and (float16 or float32 or float64) and not bmm and not dense and not direct" 2>/dev/null | grep '::' | sed "s/^/$cc /"; done > $S/mc_ids.txt
  wc -l $S/mc_ids.txt
  t=$(( $(left) - 20 ))
  cat $S/mc_ids.txt | xargs -P 16 -L 1 sh -c 'KSCUPY_EMULATE_ARCH=$0 KSCUPY_CACHE_DIR=$PWD/.cache/ks$0 timeout '$t' compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider "$1" > ".cache/emu_state/mc_$0_$(echo $1 | tr -c "a-zA-Z0-9_\n" _).log" 2>&1; echo "rc=$? sm_$0 $1"' | tee $S/memcheck.txt
  grep -c "rc=0 " $S/memcheck.txt; grep -h "ERROR SUMMARY" $S/mc_*.log | sort | uniq -c
  [ "$(grep -c 'rc=0 ' $S/memcheck.txt)" = "$(wc -l < $S/mc_ids.txt)" ] && touch $S/memcheck.done
fi
# spare time, each once: issue 56's probes, then the auto gap
extra() {  # name, seconds needed, command...
  n=$1; need=$2; shift 2
  if [ -f $S/memcheck.done ] && [ ! -f $S/$n.tried ] && [ "$(left)" -gt $need ]; then
    touch $S/$n.tried; KSCUPY_CACHE_DIR=$PWD/.cache/ks timeout $(( $(left) - 5 )) "$@" > $S/$n.txt 2>&1; tail -40 $S/$n.txt
  fi
}
extra delegate 60 python3 .dev/delegate_probe.py
extra tiles 100 python3 benchmarks/probe_tile_runs.py
extra gap 80 python3 .dev/auto_gap.py
tar czf $OUT/emu_state.tgz -C .cache emu_state   # the device returns at most 8 files
