"""Building a reproducer folder from a case, and re-running the folders.

Each one is a folder ``<data>/<profile>/repros/<id>/``:

* ``repro.py``: the minimized standalone reproducer (torch only; a planted bug's also imports the
  project to register its backend), exits 1 while the defect reproduces;
* ``report.md``: what an engineer files upstream: environment, code, observed and expected,
  the bisection table, the layer at fault and the workaround, an excerpt of the generated kernel;
* ``case.json`` (the case before and after minimization) and ``meta.json`` (the numbers).

A case runs on its own device (``Case.device``: the device the finding was made on). On CUDA the
report's environment adds the GPU, its compute capability, the driver, CUDA and Triton versions,
the kernel excerpt is the generated Triton code, the bisection's toolchain layer is Triton/PTX
(:func:`precisionkit.bisect.knob_sets`), and a reproducer that crashed is offered a
``compute-sanitizer`` command line where the tool is installed.

Where cases come from: an experiment's contradicting rows, through the reproducer cases its record
declares (``Experiment.reproducers``); the fuzzers' seeds (:mod:`.cases`); the planted bugs of the
regression matrix (:mod:`pipeline.instruments.regression.probes`).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from precisionkit import bisect as pk_bisect
from precisionkit import minimize as pk_minimize
from precisionkit.repro import (
    Case,
    for_backend,
    lines_of,
    minimization_text,
    render,
    run_script,
    sanitizer_command,
    write,
)

from ...compile_cache import probed_vec_isa
from ...devices import cpu_model, device_name, device_versions
from ...source import PROJECT_ROOT

Log = Callable[[str], None]


# --- environment ---------------------------------------------------------------------------------


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "not found"
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else "not found"


def native_march(cxx: str = "") -> str:
    """What ``-march=native`` resolves to for the C++ compiler (GCC: ``-Q --help=target``)."""
    cxx = cxx or os.environ.get("CXX", "g++")
    try:
        out = subprocess.run([cxx, "-march=native", "-Q", "--help=target"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "-march=":
            return parts[1]
    return "unknown"


def triton_version() -> str:
    """The installed Triton's version ("not installed" where there is none)."""
    from importlib import metadata

    for dist in ("triton", "pytorch-triton", "pytorch-triton-rocm"):  # how wheels and nightlies name it
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def gpu_environment(device: torch.device) -> dict[str, str]:
    """What a GPU report adds: the GPU's name, compute capability, driver, CUDA and Triton versions."""
    versions = device_versions(device)
    return {
        "gpu": device_name(device),
        "compute_capability": versions["compute_capability"] or "unknown",
        "driver": versions["driver"] or "unknown",
        "cuda": versions["cuda_runtime"] or "unknown",
        "triton": triton_version(),
    }


def environment(device: str | torch.device = "cpu") -> dict[str, str]:
    """What a compiler bug report needs to name: torch, CPU, ATen capability, Inductor's vector ISA,
    the C++ compiler and what ``-march=native`` means to it, the device (the case's: on CUDA also
    the GPU, its compute capability, the driver, CUDA and Triton)."""
    dev = torch.device(device)
    # Inductor's ISA probe builds a test program per candidate ISA (10 s per build on an AVX2-only CPU,
    # more candidates on a server CPU); a case on an accelerator compiles no C++, so it is not probed there.
    isa = probed_vec_isa() if dev.type == "cpu" else f"not probed ({dev.type} case)"
    cxx = os.environ.get("CXX", "g++")
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "aten_cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "inductor_vec_isa": isa,
        "cxx": f"{cxx}: {_first_line([cxx, '--version'])}",
        "march_native": native_march(cxx),
        "device": str(dev),
        "isa_variables": ", ".join(
            f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if k in os.environ
        )
        or "none set",
        **(gpu_environment(dev) if dev.type == "cuda" else {}),
    }


# --- building a reproducer -----------------------------------------------------------------------


def _write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _script_env() -> dict[str, str]:
    old = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(PROJECT_ROOT) + (os.pathsep + old if old else "")}


def build(
    case: Case,
    root: str | os.PathLike[str],
    *,
    control: str | None = None,
    knobs: bool = True,
    max_checks: int = 40,
    python: str | None = None,
    log: Log | None = None,
) -> dict[str, Any]:
    """Minimize ``case`` (keeping ``control`` clean), write its folder under ``root``, run it in a
    fresh interpreter and bisect it; returns ``meta.json``'s content. The folder is built aside
    and renamed into place, so a failure leaves no half-written reproducer."""
    say = log or (lambda _line: None)
    # a compiler's adapter name (the run's settings.backend: openvino, iree) becomes its torch.compile
    # backend and the import that registers it, so the file runs with torch and that compiler only
    case = for_backend(case, case.backend)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    say(f"{case.id}: minimizing ({case.rule}, backend {case.backend}, control {control or 'none'})")
    mini = pk_minimize.minimize(case, pk_minimize.predicate_for(control), max_checks=max_checks)
    small = mini.case
    # One record of what minimizing did; the file's docstring, meta.json, report.md and the site say it from this.
    outcome = mini.outcome()
    minimized = minimization_text(outcome)
    staging = Path(tempfile.mkdtemp(prefix=f".{case.id}.", dir=root))
    try:
        script = write(small, staging, note=minimized)
        _write_text(staging / "case.original.json", json.dumps(case.to_json(), indent=2) + "\n")
        fresh = run_script(script, python=python, env=_script_env(), cwd=PROJECT_ROOT)
        say(f"{case.id}: {minimized} Fresh run: {fresh.status}")
        start = time.perf_counter()
        bis = pk_bisect.bisect(
            script,
            small,
            python=python,
            cwd=PROJECT_ROOT,
            env=_script_env(),
            knobs=knobs,
            log=say,
            workers=bisect_workers(small.device),
        )
        bisect_seconds = time.perf_counter() - start
        env = environment(small.device)
        meta: dict[str, Any] = {
            "id": case.id,
            "title": case.title,
            "origin": case.origin,
            "backend": case.backend,
            "control": control or "",
            "rule": case.rule,
            **outcome,
            "lines": lines_of(small, minimized),
            "status": fresh.status,
            "observed": fresh.last_line,
            "first_layer": bis.first_layer,
            "layer_at_fault": bis.layer_at_fault,
            "workaround": bis.workaround,
            "bisect_seconds": round(bisect_seconds, 1),
            "bisection": bis.summary(),
            "environment": env,
            "versions": {env["torch"]: fresh.status},
            "device": small.device,
            "sanitizer": sanitizer_for(script, fresh.status, small.device, python),
        }
        _write_text(staging / "meta.json", json.dumps(meta, indent=2) + "\n")
        _write_text(staging / "report.md", report_md(meta, small, bis))
        final = root / case.id
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
        return meta
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def bisect_workers(device: str) -> int:
    """Bisection variants run at once: two on the CPU (each compiles on a core of its own while the
    run's other work waits); on an accelerator, one per host core up to 8, in each of two pools: the
    layers', which then run at once too (the H200 run of 2026-11-27 spent 11 to 55 s per layer, one
    after another), and that of the knob variants started beside them."""
    if torch.device(device).type == "cpu":
        return 2
    return max(2, min(8, os.cpu_count() or 2))


def sanitizer_for(script: Path, status: str, device: str, python: str | None = None, which: Any = None) -> str:
    """The ``compute-sanitizer`` command offered for a reproducer that crashed (status ``error``)
    on a CUDA device, where the tool is installed; "" otherwise."""
    if status != "error" or torch.device(device).type != "cuda":
        return ""
    cmd = sanitizer_command(script.name, python, which)
    return " ".join(cmd) if cmd else ""


def _expected(rule: str, slack: int) -> str:
    return {
        "bitwise": "every element bit-identical to eager (the graph only moves data)",
        "ulp": f"the fused result no further from the fp64 reference than eager (+{slack} ULP)",
        "fp64": "the fused result within the tolerance against fp64, or at most twice as far outside it as eager",
        "repeat": "every call of the same compiled function gives the same bits",
        "compiled": "the fused path generates at least one kernel",
        "diff": "integer and bool outputs equal to eager's; float outputs of the same class (NaN, +-inf, +-0) as "
        "eager's or fp64's, and no further from fp64 than a tolerance plus four times the row's rounding noise "
        "(eager's error there, or how far fp64 runs with every step jittered by a rounding move it)",
    }[rule]


def report_md(meta: dict[str, Any], case: Case, bis: pk_bisect.Bisection) -> str:
    """The issue-ready report of one reproducer."""
    env = meta["environment"]
    env_rows = "\n".join(f"| {k} | `{v}` |" for k, v in env.items())
    excerpt = (
        f"## Generated kernel (excerpt)\n\n```{'python' if '@triton.jit' in bis.kernel_excerpt else 'cpp'}\n"
        + bis.kernel_excerpt.strip()
        + "\n```\n"
        if bis.kernel_excerpt
        else ""
    )
    skipped = "".join(f"- not tried: {s}\n" for s in bis.skipped)
    sanitizer = (
        f"## Sanitizer\n\nThe reproducer crashed; run it under compute-sanitizer: `{meta['sanitizer']}`\n\n"
        if meta.get("sanitizer")
        else ""
    )
    return (
        f"# {meta['title'] or meta['id']}\n\n"
        f"Found by: {meta['origin']}. Backend `{meta['backend']}`; rule `{meta['rule']}`.\n\n"
        f"**Layer at fault:** {meta['layer_at_fault']}  \n"
        f"**Workaround:** {meta['workaround'] or 'none found'}  \n"
        f"**Status here:** {meta['status']} (fresh interpreter, torch {env['torch']})\n\n"
        "## Environment\n\n| | |\n|---|---|\n" + env_rows + "\n\n"
        "## Reproducer\n\n`python repro.py` exits 1 while the defect reproduces, 0 once it does not; "
        "`python repro.py BACKEND` runs it with another backend.\n\n"
        f"{minimization_text(meta)}\n\n```python\n" + render(case) + "```\n\n"
        f"## Observed\n\n```\n{meta['observed']}\n```\n\n"
        + sanitizer
        + f"## Expected\n\n{_expected(case.rule, case.slack)}.\n\n"
        "## Bisection\n\nEach row is a fresh interpreter with an Inductor cache of its own. A toolchain row "
        "rebuilds Inductor's generated C++ with one more flag (or another compiler); the same sha256 means the "
        "same generated source.\n\n"
        + bis.table_md()
        + "\n"
        + skipped
        + (
            f"\n`torch._inductor.compiler_bisector` on the same file: {bis.pytorch_bisector}.\n"
            if bis.pytorch_bisector
            else ""
        )
        + "\n"
        + excerpt
    )


# --- listing and re-running ----------------------------------------------------------------------


def folders(root: str | os.PathLike[str]) -> list[Path]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / "repro.py").exists())


def torch_version_of(python: str) -> str:
    """The torch version another interpreter imports."""
    out = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if out.returncode != 0:
        raise ValueError(f"{python} cannot import torch: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
    return out.stdout.strip()


def rerun(root: str | os.PathLike[str], python: str | None = None, log: Log | None = None) -> list[dict[str, Any]]:
    """Re-run every reproducer under ``root`` in a fresh interpreter (``python``, default this
    one), record the status per torch version in its ``meta.json``, and return one row each."""
    python = python or sys.executable
    version = torch_version_of(python)
    rows = []
    for folder in folders(root):
        run = run_script(folder / "repro.py", python=python, env=_script_env(), cwd=PROJECT_ROOT)
        meta_path = folder / "meta.json"
        meta: dict[str, Any] = json.loads(meta_path.read_text()) if meta_path.exists() else {"id": folder.name}
        versions: dict[str, str] = {**meta.get("versions", {}), version: run.status}
        meta["versions"] = versions
        _write_text(meta_path, json.dumps(meta, indent=2) + "\n")
        row = {
            "id": folder.name,
            "torch": version,
            "status": run.status,
            "printed": run.last_line,
            "layer_at_fault": meta.get("layer_at_fault", ""),
            "versions": ", ".join(f"{v}: {s}" for v, s in sorted(versions.items())),
        }
        if log:
            log(f"{row['id']:50s} {row['status']:10s} {row['versions']}")
        rows.append(row)
    return rows
