"""The benchmark suites a user runs on their own GPU: ``python -m kscupy bench``.

==========  ==========================================================================
suite       what it times (each against the baselines a user has, in the same run)
==========  ==========================================================================
``grid``    float32 single factors on the paper's pattern grid at B = 25088
            (:mod:`.patterns`)
``sweep``   a few patterns across batch sizes from 1 to 262144 (:mod:`.patterns`)
``engine``  every kscupy method and baseline per dtype and precision on samples of
            the grid (:mod:`.engine`)
``chains``  DFT, Hadamard, butterfly, Monarch and the paper's two-factor chains
            (:mod:`.chains`)
==========  ==========================================================================

:mod:`.cli` parses the command line; :mod:`.timing` times (CUDA events, back-to-back calls
after warm-up) and measures the ceilings; :mod:`.baselines` says what a caller may add (the
repository's ``benchmarks/bench_suite.py`` adds PyTorch's BMM); :mod:`.plots` draws the
results. The repository's ``benchmarks/`` folder keeps the probes and fit scripts that
develop kscupy itself.
"""
