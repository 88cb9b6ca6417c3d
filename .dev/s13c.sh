# session 13, last short call: the PyTorch fast path's GPU tests only
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 -m pytest -m gpu -q -n 14 -p no:cacheprovider -rfE tests/test_interop.py tests/test_prepared_runs.py 2>&1 | tail -30
