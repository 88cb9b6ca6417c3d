"""Development probe: how fast a block can move a batch-size-last tile through shared memory,
by the length of a feature's run (the bytes of one feature's contiguous batch rows in a tile).

    PYTHONPATH=$PWD python3 benchmarks/probe_runs.py
    PYTHONPATH=$PWD python3 benchmarks/probe_runs.py --n 8192 --batch 8192

X is ``(n, batch)`` float32 with the batch contiguous, as a bsl operand. Each block of 256
threads (three an SM, 64 KiB each) copies a tile of RUN bytes of each of 65536 / RUN
features into shared memory, waits, and writes it to Y from there: the loads and stores of a
``ks_rows`` tile without its passes. Two ways in: ``regs``, every 16-byte load of the thread
issued before its shared-memory stores; ``bulk``, one ``cp.async.bulk`` a run, counted on an
mbarrier. Each is checked (Y == X) and timed against a plain copy of X measured here. Used
to find what a tile's run length allows (docs/performance.md, twenty-second session).
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import numpy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kscupy.bench.timing import cupy, time_fn  # noqa: E402

SMEM = 65536        # bytes of a block's tile: three blocks an SM
THREADS = 256

SOURCE = r'''
__device__ __forceinline__ unsigned shared_window(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// Block (x, y) copies rows (features) y·ROWS ... and columns (batch) x·RUN/4 ... of X, a run
// of RUN bytes each, into shared memory (row r at r·RUN), then stores them to Y.
// BULK: one cp.async.bulk a run, counted on an mbarrier; else 16-byte loads, all of a
// thread's issued before its shared stores.
template <int RUN, int ROWS, bool BULK>
__global__ void __launch_bounds__(256, 3) copy_tile(const float* __restrict__ X,
                                                     float* __restrict__ Y, long long ld) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long bar;
  constexpr int V = RUN / 16, COUNT = ROWS * V;     // float4 vectors: a run's, the tile's
  const long long col0 = (long long)blockIdx.x * (RUN / 4), row0 = (long long)blockIdx.y * ROWS;
  float4* tile = reinterpret_cast<float4*>(smem);
  if constexpr (!BULK) {
    float4 r[COUNT / 256];
#pragma unroll
    for (int k = 0; k < COUNT / 256; ++k) {
      const int v = threadIdx.x + k * 256;
      r[k] = *reinterpret_cast<const float4*>(X + (row0 + v / V) * ld + col0 + 4 * (v % V));
    }
#pragma unroll
    for (int k = 0; k < COUNT / 256; ++k) tile[threadIdx.x + k * 256] = r[k];
    __syncthreads();
  } else {
    const unsigned b = shared_window(&bar);
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                   :: "r"(b), "r"(ROWS * RUN) : "memory");
    for (int row = threadIdx.x; row < ROWS; row += 256)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                   "[%0], [%1], %2, [%3];"
                   :: "r"(shared_window(smem + row * RUN)), "l"(X + (row0 + row) * ld + col0),
                      "r"(RUN), "r"(b) : "memory");
    asm volatile("{\n\t.reg .pred done;\nWAIT:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n\t"
                 "@!done bra WAIT;\n}" :: "r"(b) : "memory");
  }
  for (int v = threadIdx.x; v < COUNT; v += 256)
    *reinterpret_cast<float4*>(Y + (row0 + v / V) * ld + col0 + 4 * (v % V)) = tile[v];
}
'''


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="features (rows of X)")
    parser.add_argument("--batch", type=int, default=16384, help="batch columns of X")
    parser.add_argument("--runs", default="32,64,128,256", help="run lengths in bytes")
    args = parser.parse_args(argv)
    if cupy is None:
        sys.exit(f"{pathlib.Path(__file__).name} times GPU kernels and needs CuPy and a CUDA device")
    cases = [(run, SMEM // run, bulk) for run in map(int, args.runs.split(","))
             for bulk in (False, True)]
    for run, rows, _ in cases:
        if args.n % rows or args.batch * 4 % run:
            sys.exit(f"runs of {run} bytes need n a multiple of {rows} and batch·4 of {run}")
    names = [f"copy_tile<{run}, {rows}, {'true' if bulk else 'false'}>"
             for run, rows, bulk in cases]
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names)
    X = cupy.random.default_rng(0).standard_normal((args.n, args.batch), dtype=numpy.float32)
    Y = cupy.empty_like(X)
    copy = time_fn(lambda x: cupy.copyto(Y, x), [X])
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: copy of X "
          f"{copy * 1e3:.3f} ms, {2 * X.nbytes / copy / 1e12:.2f} TB/s", flush=True)
    for name, (run, rows, bulk) in zip(names, cases):
        kernel = module.get_function(name)
        kernel.max_dynamic_shared_size_bytes = SMEM
        grid = (args.batch * 4 // run, args.n // rows)
        launch = lambda x: kernel(grid, (THREADS,), (x, Y, numpy.int64(args.batch)),  # noqa: E731
                                  shared_mem=SMEM)
        Y.fill(numpy.nan)
        launch(X)
        ok = bool((Y == X).all())
        t = time_fn(launch, [X])
        print(f"runs of {run:3d} bytes, {rows:5d} features a block, "
              f"{'bulk' if bulk else 'regs'}: {t * 1e3:.3f} ms, {copy / t:.2f} of the copy"
              f"{'' if ok else '  WRONG'}", flush=True)


if __name__ == "__main__":
    main()
