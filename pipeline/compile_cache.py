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
import platform
import shutil
import subprocess
import warnings

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


def _cpp_compiler() -> str:
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return str(get_cpp_compiler())
    except Exception:  # noqa: BLE001 - an older torch without this helper: CXX, else g++
        return os.environ.get("CXX", "g++")


def compiler_version() -> str:
    """The C++ compiler Inductor builds CPU code with, and the first line of its ``--version``."""
    return _compiler_version(_cpp_compiler())


@functools.cache
def predicted_vec_isa() -> str:
    """The vector ISA Inductor picks for generated C++, from the CPU's flags, ``ATEN_CPU_CAPABILITY``
    and Inductor's ``cpp.simdlen`` alone, without building anything.

    Inductor's own choice (:func:`probed_vec_isa`) also builds and loads a test program per
    candidate ISA in child processes, seconds per process; every process that imports the pipeline
    keys its cache, whatever device it runs on, so the key uses this prediction. It equals the probed
    ISA whenever the compiler builds, and the machine loads, every ISA the CPU's flags allow. Where
    that fails on one machine only (an older assembler, a kernel that does not grant AMX, a load
    probe that timed out), two machines could share a key but not an ISA: CPU runs, which pay for
    the probe anyway, hand its answer to :func:`check_predicted_isa`, which moves the cache aside."""
    try:
        from torch._inductor import config
        from torch._inductor import cpu_vec_isa as vi

        if config.cpp.vec_isa_ok is False:  # TORCHINDUCTOR_VEC_ISA_OK=0: every candidate fails its check
            candidates = []
        elif platform.machine() in ("x86_64", "AMD64"):
            flags = vi.x86_isa_checker()
            candidates = [isa for isa in vi.supported_vec_isa_list if all(f in flags for f in str(isa).split())]
        else:  # elsewhere Inductor lists the ISAs from the CPU's features without building
            candidates = list(vi.valid_vec_isa_list())
        if not candidates:
            return str(vi.invalid_vec_isa) or "none"
        if config.cpp.simdlen is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an unknown ATEN_CPU_CAPABILITY: torch warns when it compiles
                isa = vi.get_isa_from_cpu_capability(os.getenv("ATEN_CPU_CAPABILITY"), candidates, vi.invalid_vec_isa)
        else:
            isa = next((c for c in candidates if c.bit_width() == config.cpp.simdlen), vi.invalid_vec_isa)
        return str(isa) or "none"
    except Exception:  # noqa: BLE001 - a torch without these helpers: the variables and the compiler still key it
        return "unknown"


@functools.cache
def probed_vec_isa() -> str:
    """The vector ISA Inductor picks for generated C++ (``pick_vec_isa``), which builds and loads a
    test program per candidate ISA in child processes: for the provenance of CPU runs and of CPU
    reproducers only, once per process."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        return str(pick_vec_isa()) or "none"
    except Exception:  # noqa: BLE001 - best effort: provenance must never fail a run
        return "unknown"


def cache_key_parts() -> dict[str, str]:
    """What a cached kernel depends on beyond Inductor's own key: torch, the CPU model, ATen's CPU
    capability, Inductor's vector ISA (as :func:`predicted_vec_isa` predicts it: nothing is built),
    the ISA variables as set, and the C++ compiler's version."""
    import torch

    from .devices import cpu_model

    return {
        "torch": torch.__version__,
        "cpu_model": cpu_model(),
        "aten_cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "inductor_vec_isa": predicted_vec_isa(),
        **{v: os.environ.get(v, "") for v in ISA_VARIABLES},
        "compiler": compiler_version(),
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


def check_predicted_isa(probed: str) -> str | None:
    """The guard on :func:`predicted_vec_isa`: ``probed`` is Inductor's own pick on this machine
    (:func:`probed_vec_isa`). When it differs from the prediction and Inductor uses the folder keyed
    by the prediction, another machine with the same key may fill that folder with kernels for the
    predicted ISA: Inductor is pointed at the folder keyed by the probed ISA instead, for the rest of
    this process and its children (the folder a machine whose prediction is that ISA uses too). The
    warning it gives is returned; None when the two agree, the probe failed or the user chose the folder."""
    predicted = predicted_vec_isa()
    if probed in (predicted, "unknown"):
        return None
    parts = cache_key_parts()
    if os.environ.get(CACHE_ENV) != keyed_cache_dir(parts):
        return None
    os.environ[CACHE_ENV] = keyed_cache_dir({**parts, "inductor_vec_isa": probed})
    message = (
        f"Inductor picks the vector ISA {probed!r} here, not {predicted!r} as the CPU's flags predict: "
        f"compiler cache moved to {os.environ[CACHE_ENV]} (kernels compiled before this point in this "
        "process went to the predicted folder)"
    )
    warnings.warn(message, stacklevel=2)
    return message
