# Dev runner (device, short budget): native close-call tests, then the probe of the rows
# below 0.95 in portability.json, emulated sm_80 and sm_89 and native.
set -x
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider -rfE tests/gpu/test_kernel.py tests/gpu/test_values_grad_kernel.py -k "close_call or times_the_ways" 2>&1 | tail -4
for cc in 80 89 ""; do KSCUPY_EMULATE_ARCH=$cc KSCUPY_CACHE_DIR=$PWD/.cache/ks$cc timeout 60 python3 .dev/probe_rows.py 2>&1 | grep -v Warn | tail -6; done
