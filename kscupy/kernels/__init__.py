"""The CUDA kernel families, one module each, beside their sources in ``kernels_cu/``.

=====================  ==============================  =======================================
module                 source                          what it launches
=====================  ==============================  =======================================
:mod:`.ks_matmul`      ``kernels_cu/ks_matmul.cu``     one factor, any pattern, both layouts
:mod:`.ks_mma`         ``kernels_cu/ks_mma.cu``        one factor on the tensor cores; the
                       ``kernels_cu/ks_mma_group.cu``  second: its group order in 64-column
                                                       pieces (long batches; float32, float16,
                                                       bfloat16)
:mod:`.ks_skinny`      ``kernels_cu/ks_skinny.cu``     one factor at a small batch
:mod:`.ks_chain`       ``kernels_cu/ks_chain.cu``      a segment of a chain in shared memory
:mod:`.ks_rows`        ``kernels_cu/ks_rows.cu``       a run of small square factors on whole
                                                       vectors, passes in registers (long
                                                       batch-size-last vectors: a tile a
                                                       thread-block cluster)
:mod:`.ks_pair`        ``kernels_cu/ks_pair.cu``       two factors of a chain on the tensor
                                                       cores, the intermediate on chip
:mod:`.ks_direct`      ``kernels_cu/ks_direct.cu``     one factor, one thread an output (while
                                                       another kernel compiles)
:mod:`.transpose`      ``kernels_cu/transpose.cu``     a tiled transpose
:mod:`.gemm`           (cuBLAS)                        prepared cuBLAS calls: the dense matrix;
                                                       every group in place (strided-batched)
=====================  ==============================  =======================================

Each family module owns everything about its kernel: the tile configuration and how it is
chosen, the Python mirror of the shared-memory layout (checked against the compiled kernel
by ``tests/gpu/test_kernel_layout.py``), the instantiation name and the launch.
:mod:`.nvrtc` compiles and caches instantiations; :mod:`.operands` prepares operands and
results for any family; :mod:`.launcher` packs a launch's arguments once for
``cuLaunchKernel``.
"""
