"""Inductor's compiler cache, keyed by what changes the generated code.

Inductor caches compiled graphs in ``TORCHINDUCTOR_CACHE_DIR`` under a key that does not include
the vector ISA it generated code for, the variables that choose it (``ATEN_CPU_CAPABILITY``,
``ONEDNN_MAX_CPU_ISA``) or the C++ compiler. A run under other settings that shares the folder
loads the first run's graph: on this project's AVX2 machine a sum compiled with
``ATEN_CPU_CAPABILITY=avx2`` and then run with ``default`` either fails to rebuild the vectorized
C++ without vector headers or returns the vectorized result, not the scalar one the run asked for.

So, unless the user set ``TORCHINDUCTOR_CACHE_DIR``, the pipeline uses
``<Inductor's default cache folder>/fusion-<key>``, the key a hash of :func:`cache_key_parts`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess

#: Environment variables that change which instructions ATen, oneDNN or Inductor use on a CPU.
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "CXX", "TORCHINDUCTOR_CPP_COMPILER")
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@functools.cache
def _compiler_version(compiler: str) -> str:
    path = shutil.which(compiler)
    if path is None:
        return f"{compiler} (not found)"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10, check=False)
        return f"{path}: {(out.stdout.strip().splitlines() or ['?'])[0]}"
    except (OSError, subprocess.SubprocessError):
        return f"{path}: version unknown"


def cache_key_parts() -> dict[str, str]:
    """What a cached kernel depends on beyond Inductor's own key: torch, the CPU model, ATen's CPU
    capability, Inductor's vector ISA, the ISA variables as set, and the C++ compiler's version."""
    import torch

    from .devices import cpu_model

    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        isa, compiler = str(pick_vec_isa()) or "none", get_cpp_compiler()
    except Exception:  # noqa: BLE001 - an older torch without these helpers: the variables still key it
        isa, compiler = "unknown", os.environ.get("CXX", "g++")
    return {
        "torch": torch.__version__,
        "cpu_model": cpu_model(),
        "aten_cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "inductor_vec_isa": isa,
        **{v: os.environ.get(v, "") for v in ISA_VARIABLES},
        "compiler": _compiler_version(compiler),
    }


def cache_key(parts: dict[str, str] | None = None) -> str:
    parts = cache_key_parts() if parts is None else parts
    text = "\n".join(f"{k}={v}" for k, v in sorted(parts.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def keyed_cache_dir(parts: dict[str, str] | None = None) -> str:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return os.path.join(default_cache_dir(), f"fusion-{cache_key(parts)}")


def use_keyed_cache() -> str:
    """Point Inductor at :func:`keyed_cache_dir` unless ``TORCHINDUCTOR_CACHE_DIR`` is set (by the
    user, or by a parent process that already chose); returns the folder in use."""
    if not os.environ.get(CACHE_ENV):
        os.environ[CACHE_ENV] = keyed_cache_dir()
    return os.environ[CACHE_ENV]
