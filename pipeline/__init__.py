"""Dagster code location: the fusion precision experiments as materialized assets.

Importing the package points Inductor at a compiler cache keyed by torch, the CPU, its ISA
variables and the C++ compiler, unless ``TORCHINDUCTOR_CACHE_DIR`` is set (see :mod:`.compile_cache`):
every entry point (the CLI, ``dagster dev``, run and step workers, tests) gets it before compiling.
"""

from .compile_cache import use_keyed_cache

use_keyed_cache()
