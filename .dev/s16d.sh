set -x
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
for w in .whl/bf16/*.whl; do python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $w 2>/dev/null && break; done
export PYTHONPATH=$PWD:/tmp/site
R=.cache/s16d; rm -rf $R; mkdir -p $R
timeout 60 python3 .dev/f16_dense.py > $R/time.txt 2>&1; cat $R/time.txt
LOG=1 CUBLAS_LOGINFO_DBG=1 CUBLAS_LOGDEST_DBG=stdout CUBLASLT_LOG_LEVEL=2 timeout 60 python3 .dev/f16_dense.py > $R/log.txt 2>&1
grep -E "===|cublasGemmEx|cublasLtMatmul|algo|computeType|transa|Atype" $R/log.txt | cut -c1-400 | head -60
tar czf $OUT/s16d.tgz -C .cache s16d
