"""The execution layer: how a product of a KS factor or chain runs, decided and prepared.

The operators hand it their target (a :class:`~kscupy.core.factor.Factor` or a
:class:`~kscupy.core.factor.FactorChain`) and an operand already checked and converted;
:func:`prepare` returns the run. The modules, by job:

=========================  ===================================================================
:mod:`.execute`            the entry: a factor or a chain, GPU or CPU, and the direct kernel
                           that answers while a kernel compiles
:mod:`.runs`               the prepared runs an operator keeps, and when they are stale
:mod:`.single`             one factor: resolve the backend, configure and prepare it
:mod:`.registry`           every way to apply one factor (backends), declared once
:mod:`.decide`             ``auto``'s choice on the GPU (tuning cache, cost model, close calls)
:mod:`.cpu_choice`         ``auto``'s choice on the CPU
:mod:`.tuner`              the autotuner; :mod:`.tuning_cache` its file
:mod:`.gradient_paths`     the ways a values' gradient runs on the GPU, and which one
:mod:`.costs`              the cost models and their fitted constants (data)
:mod:`.planner`            a chain's plan under ``auto``; :mod:`.steps` what plans are made of;
                           :mod:`.algebra` products of factors
=========================  ===================================================================
"""
from .execute import prepare, plan, compile_ahead
from .runs import PreparedRuns, runs_of
from .tuner import tune, clear_cache as clear_tuning_cache
from .tuning_cache import path as tuning_cache_path

__all__ = ["prepare", "plan", "compile_ahead", "PreparedRuns", "runs_of", "tune", "clear_tuning_cache",
           "tuning_cache_path"]
