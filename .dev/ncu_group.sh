# Dev: Nsight Compute on the 16-bit group kernel (issue 53), bsf float16, B = 25088
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy KSCUPY_CACHE_DIR=$PWD/.cache/ks
export PYTHONPATH=$PWD
for p in 1,96,96,16 6,128,128,64 1,512,512,32; do
  python3 .dev/one_product.py $p float16 bsf kernel   # compile outside ncu
  timeout 150 ncu --launch-skip 3 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section LaunchStats --section Occupancy \
    --section SchedulerStats python3 .dev/one_product.py $p float16 bsf kernel > $OUT/ncu_$p.txt 2>&1
  grep -E "ks_mma|Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Compute \(SM\)|Achieved Occupancy|Registers Per|Stall|Block Size|Dynamic Shared" $OUT/ncu_$p.txt | head -30
done
