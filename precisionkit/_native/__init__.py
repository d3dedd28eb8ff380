"""Native (C) kernels of precisionkit, compiled on first use and cached.

The C sources live next to this file. Each is compiled once per source, compiler and machine
into ``$PRECISIONKIT_CACHE_DIR`` (default ``~/.cache/precisionkit``) and loaded with ctypes.
Everything that uses a kernel also has a torch implementation that gives the same results: where
no C compiler is available, compilation fails, or ``PRECISIONKIT_NATIVE=0`` is set, :func:`load`
returns None and the caller uses that instead.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

#: No fast-math (which would reorder and contract the arithmetic the kernels must reproduce).
CFLAGS = ("-O3", "-fno-fast-math", "-ffp-contract=off", "-fPIC", "-shared")


def cache_dir() -> Path:
    return Path(os.environ.get("PRECISIONKIT_CACHE_DIR") or Path.home() / ".cache" / "precisionkit")


def enabled() -> bool:
    return os.environ.get("PRECISIONKIT_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def _compiler() -> str | None:
    cc = os.environ.get("CC") or "cc"
    return shutil.which(cc)


@functools.cache
def compile_kernel(name: str) -> ctypes.CDLL | None:
    """Build (or find in the cache) and load ``<name>.c``; None, with a warning, where the build
    fails. Cached per process: ``compile_kernel.cache_clear()`` forgets it."""
    source = Path(__file__).with_name(f"{name}.c")
    if not source.is_file():
        raise ValueError(f"no native kernel {name!r} (no {source.name} in {source.parent})")
    cc = _compiler()
    if cc is None:
        return None
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    key = hashlib.sha256(
        "\0".join([source.read_text(), cc, version, *CFLAGS, platform.machine(), platform.system()]).encode()
    ).hexdigest()[:16]
    target = cache_dir() / f"{name}-{key}.so"
    if not target.exists():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # compile to a temporary name in the same folder, then rename: a reader never sees half a file
            with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                built = Path(tmp) / target.name
                proc = subprocess.run(
                    [cc, *CFLAGS, "-o", str(built), str(source)], capture_output=True, text=True, timeout=120
                )
                if proc.returncode != 0:
                    warnings.warn(
                        f"precisionkit: compiling {source.name} failed; using the torch implementation.\n"
                        f"{proc.stderr.strip()[-2000:]}",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                    return None
                os.replace(built, target)
        except (OSError, subprocess.SubprocessError) as exc:
            warnings.warn(
                f"precisionkit: cannot build {source.name} ({exc}); using the torch implementation.",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
    return ctypes.CDLL(str(target))


def load(name: str) -> ctypes.CDLL | None:
    """The compiled kernel library ``name`` (``<name>.c`` beside this module), or None where it
    is disabled or cannot be built."""
    if not Path(__file__).with_name(f"{name}.c").is_file():
        raise ValueError(f"no native kernel {name!r} (no {name}.c in {Path(__file__).parent})")
    if not enabled():
        return None
    return compile_kernel(name)
