"""Which fusing compilers work with which torch release: one JSON line per compiler.

Probe mode (the default) runs in the interpreter that runs the script: for each compiler named (default
every built-in adapter: inductor, openvino, iree) it compiles two small programs through the project's
fused path (:func:`precisionkit.paths.fused`, which raises when nothing fused) on a seeded fp32 [64, 768]
input, and prints the compiler's row::

    .venv/bin/python scripts/compiler_torch_matrix.py [inductor openvino iree] [--out FILE]

Release mode builds a throwaway venv for one torch release outside the repository, installs that
torch, then the compilers at the versions of the project's extras (pyproject.toml) with torch held
at the installed release (where pip's resolver would replace it, its reason is recorded and the
compiler is installed with ``--no-deps``), runs each compiler's probe in a process of its own in that
venv, records how each was installed, and deletes the venv::

    .venv/bin/python scripts/compiler_torch_matrix.py --torch 2.7 [--root /tmp/compiler-torch] [--out FILE]

A row's ``status`` is ``works`` (both programs compiled, fused and ran), ``fails`` (``reason``: the
exception's type and first line), ``not installable`` (``reason``: what pip said) or ``not
installed``. Per program it records the units the adapter counted (``units``; ``fused_units``: those
naming two or more source operations, which Inductor's C++ kernels never do), whether the result is
bit-equal to eager, and the worst absolute error of the fused and the eager result against an fp64
run (these depend on the CPU's vector ISA, recorded as ``cpu_capability``). ``--out`` appends the rows.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
COMPILERS = ("inductor", "openvino", "iree")


def layer_norm_gelu(x: Any) -> Any:
    import torch

    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (768,))) * 1.5 + 0.25


def softmax_affine(x: Any) -> Any:
    import torch

    # softmax alone is one operation: nothing to fuse (OpenVINO then shows no unit at all)
    return torch.softmax(x, -1) * 1.5 + 0.25


PROGRAMS: dict[str, Callable[[Any], Any]] = {"layer_norm_gelu": layer_norm_gelu, "softmax_affine": softmax_affine}


def requirements(compiler: str) -> list[str]:
    """The pip requirements of the project's extra for ``compiler`` (none for Inductor: it is torch's)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return list(extras.get(compiler, [])) if compiler != "inductor" else []


def package_versions(compiler: str) -> dict[str, str]:
    names = [re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0] for r in requirements(compiler)] or ["torch"]
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def probe_program(compiler: str, fn: Callable[[Any], Any]) -> dict[str, Any]:
    import torch

    from precisionkit.paths import eager, fused
    from precisionkit.reference import fp64_reference
    from precisionkit.stats import error_stats

    torch.manual_seed(0)
    x = torch.randn(64, 768, dtype=torch.float32)
    path = fused(fn, compiler)
    out = path(x)
    want = eager(fn)(x)
    ref = fp64_reference(fn, x)
    return {
        "units": path.evidence.kernel_count,
        "fused_units": path.evidence.fused_units,
        "bit_equal_to_eager": bool(torch.equal(out, want)),
        "abs_max": error_stats(out, ref)["abs_max"],
        "eager_abs_max": error_stats(want, ref)["abs_max"],
    }


def probe(compiler: str) -> dict[str, Any]:
    """The row of ``compiler`` with the torch of this interpreter."""
    import torch

    from precisionkit.backends import get_adapter

    packages = package_versions(compiler)
    row: dict[str, Any] = {
        "compiler": compiler,
        "torch": torch.__version__,
        "compiler_version": next(iter(packages.values())),
        "packages": packages,
        "status": "works",
        "reason": "",
        "programs": {},
        "install": f"as found in {sys.prefix}",
        "python": platform.python_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "date": datetime.date.today().isoformat(),
    }
    adapter = get_adapter(compiler, require_installed=False)
    missing = adapter.missing()
    if missing:
        return row | {"status": "not installed", "reason": missing}
    for name, fn in PROGRAMS.items():
        try:
            row["programs"][name] = probe_program(compiler, fn)
        except Exception as exc:  # noqa: BLE001 - any failure of the compiler is the row's finding
            return row | {"status": "fails", "reason": f"{name}: {first_line(exc)}"}
    return row


def pip(python: Path, *args: str) -> tuple[bool, str]:
    """Run pip in ``python``'s venv: (succeeded, its ERROR lines and the resolver's explanation)."""
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", *args], capture_output=True, text=True)
    said = [
        line.strip()
        for line in done.stderr.splitlines()
        if line.startswith("ERROR") or "requires" in line or "depends on" in line or "conflict is caused" in line
    ]
    return done.returncode == 0, " | ".join(dict.fromkeys(said))[:600]


def probe_in(python: Path, compiler: str, cache: Path) -> dict[str, Any]:
    """``compiler``'s row from a probe run by ``python`` in a process of its own (one that crashes
    leaves a row saying how it ended)."""
    env = os.environ | {"PYTHONPATH": str(REPO), "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [str(python), str(Path(__file__).resolve()), compiler],
        capture_output=True,
        text=True,
        env=env,
        cwd=cache.parent,  # whatever a compiler writes to its working folder stays out of the repository
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if lines:
        return dict(json.loads(lines[-1]))
    tail = (done.stderr.strip().splitlines() or [""])[-1]
    return {
        "compiler": compiler,
        "status": "fails",
        "reason": f"the probe exited with status {done.returncode}: {tail}",
    }


def release_rows(torch_release: str, compilers: list[str], root: Path) -> list[dict[str, Any]]:
    """Rows of ``compilers`` with torch ``torch_release`` (``2.7``), probed in a venv under ``root``."""
    venv, cache = root / f"venv-{torch_release}", root / f"inductor-{torch_release}"
    for folder in (venv, cache):
        shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    start = time.perf_counter()
    ok, said = pip(python, f"torch=={torch_release}.*", "numpy")
    seconds = {"torch_install_seconds": round(time.perf_counter() - start)}
    if not ok:
        shutil.rmtree(venv)
        return [
            {"compiler": c, "torch": f"{torch_release}.*", "status": "not installable", "reason": f"torch: {said}"}
            for c in compilers
        ]
    version = [str(python), "-c", "import torch; print(torch.__version__.split('+')[0])"]
    installed = subprocess.run(version, capture_output=True, text=True, check=True).stdout.strip()
    pin = root / f"torch-{torch_release}.txt"
    pin.write_text(f"torch=={installed}\n")
    rows = []
    for compiler in compilers:
        start = time.perf_counter()
        how = "pip"
        if requirements(compiler):
            ok, said = pip(python, "-c", str(pin), *requirements(compiler))
            if not ok:  # pip's resolver would replace torch, or cannot install the compiler at all
                how = f"pip --no-deps (with torch held at {installed}, pip said: {said})"
                ok, said_no_deps = pip(python, "--no-deps", *requirements(compiler))
                if not ok:
                    reason = f"{said} | with --no-deps: {said_no_deps}"
                    rows.append(
                        {"compiler": compiler, "torch": installed, "status": "not installable", "reason": reason}
                    )
                    continue
        seconds["compiler_install_seconds"] = round(time.perf_counter() - start)
        start = time.perf_counter()
        row = probe_in(python, compiler, cache)
        seconds["probe_seconds"] = round(time.perf_counter() - start)
        rows.append({"torch": installed} | row | {"install": f"{how} into a fresh venv"} | seconds)
    pin.unlink()
    for folder in (venv, cache):
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("compilers", nargs="*", metavar="COMPILER", help=f"default: {' '.join(COMPILERS)}")
    parser.add_argument("--out", type=Path, help="append the rows (JSON lines) to this file")
    parser.add_argument("--torch", help="a torch release (2.7): build a venv for it and probe there")
    parser.add_argument("--root", type=Path, default=Path("/tmp/compiler-torch"), help="where --torch builds")
    args = parser.parse_args(argv)
    for name in args.compilers:
        if name not in COMPILERS:
            parser.error(f"unknown compiler {name!r}; compilers: {', '.join(COMPILERS)}")
    compilers = args.compilers or list(COMPILERS)
    if args.torch:
        if REPO in args.root.resolve().parents or args.root.resolve() == REPO:
            parser.error(f"--root {args.root} is inside the repository; the venv is built outside it")
        args.root.mkdir(parents=True, exist_ok=True)
        rows = release_rows(args.torch, compilers, args.root)
    else:
        if str(REPO) not in sys.path:  # precisionkit from this checkout where it is not installed
            sys.path.insert(0, str(REPO))
        rows = [probe(name) for name in compilers]
    for row in rows:
        line = json.dumps(row, sort_keys=False)
        print(line, flush=True)
        if args.out:
            with args.out.open("a") as out:
                out.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
