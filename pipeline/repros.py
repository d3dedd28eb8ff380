"""Reproducers for the pipeline's contradictions, fuzzer mismatches and planted bugs.

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

Sources of cases: :func:`planted_case` (a planted bug of the regression matrix, found by probing
small graphs until one shows the fault while healthy Inductor stays clean), :func:`d_case`
(a row of D's check table), :func:`fuzz_case` (a fuzzer seed).
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
from precisionkit.repro import Case, Input, lines_of, render, reproduces, run_script, sanitizer_command, write

from .devices import cpu_model, device_name, device_versions
from .experiments.data_movement.spec import repro_id as d_repro_id

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PLANTED_SETUP = (
    "from pipeline.instruments.regression.planted_bugs import register_planted_backends  # the planted fault\n\n"
    "register_planted_backends()\n"
)

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
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        isa = str(pick_vec_isa()) or "none (scalar code)"
    except Exception as exc:  # noqa: BLE001
        isa = f"unknown ({type(exc).__name__})"
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


# --- cases ---------------------------------------------------------------------------------------


def _probe(name: str, source: str, inputs: tuple[Input, ...], rule: str, slack: int = 0) -> Case:
    return Case(name, source, inputs, rule=rule, slack=slack, setup=PLANTED_SETUP)


def planted_probes() -> list[Case]:
    """Small graphs in the forms the experiments use, each with the rule that judges it; every
    elementwise probe is exact in eager (scaling by 2 commutes with rounding), so any ULP of
    error is the fused path's own. The row length 20 is not a multiple of a vector width."""
    chain = "def graph(x):\n    y = x * 1.5\n    y = torch.relu(y)\n    return y * 2.0\n"
    total = "def graph(x):\n    y = x * 2.0\n    return y.sum(dim=-1)\n"
    x = (Input("x", (4, 20), "float32", 11),)
    return [
        _probe("chain", chain, x, "compiled"),
        _probe("sum", total, x, "repeat"),
        _probe("chain", chain, x, "ulp"),
        _probe("sum", total, x, "ulp", slack=8),
        _probe("long_sum", total, (Input("x", (2, 2048), "float32", 12),), "ulp", slack=16),
        _probe("transposed", chain, (Input("x", (12, 20), "float32", 13, layout="transposed"),), "ulp"),
    ]


def planted_case(bug: str, log: Log | None = None) -> tuple[Case | None, int]:
    """The first probe that shows planted bug ``bug`` while healthy Inductor stays clean, and how
    many probes were run."""
    from .instruments.regression.planted_bugs import PLANTED_BUGS, register_planted_backends

    if bug not in PLANTED_BUGS:
        raise ValueError(f"unknown planted bug {bug!r}; known: {', '.join(PLANTED_BUGS)}")
    register_planted_backends()
    tried = 0
    for probe in planted_probes():
        case = probe.with_(
            id=bug.removeprefix("planted_"),
            backend=bug,
            title=f"planted bug {bug}: {PLANTED_BUGS[bug].fault_class}",
            origin=f"planted-bug matrix, probe {probe.id!r}",
        )
        tried += 1
        hit, msg = reproduces(case)
        if log:
            log(f"  probe {probe.id} ({probe.rule}): {'reproduces' if hit else 'clean'}: {msg}")
        if hit and not reproduces(case, "inductor")[0]:
            return case, tried
    return None, tried


def d_case(
    subgraph: str,
    dtype: str,
    shape: tuple[int, ...],
    layout: str,
    backend: str = "inductor",
    device: str = "cpu",
    derived_seed: Callable[..., int] | None = None,
) -> Case:
    """A row of D's check table as a case on ``device`` (the run's): the subgraph traced to plain
    code, judged bit for bit against eager, on the row's own inputs: ``x`` and ``y`` from the seeds
    D derives for the row (``derived_seed``: the run's, by default that of a run with the default
    base seed), salted with special values where D salts them (pure graphs: ``y`` then in the row's
    dtype) and drawn as D draws them, so the file reproduces what the check table saw."""
    from .experiments.data_movement.assets import input_key, input_seeds
    from .experiments.data_movement.movement import CATALOGUE, LAYOUTS

    if subgraph not in CATALOGUE:
        raise ValueError(f"unknown D subgraph {subgraph!r}; known: {', '.join(CATALOGUE)}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown D layout {layout!r}; known: {', '.join(LAYOUTS)}")
    if len(shape) != 3:
        raise ValueError(f"D's activations are [batch, seq, hidden]; got shape {shape}")
    graph = CATALOGUE[subgraph]
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    key = input_key(subgraph, dtype, tuple(shape), layout)
    x_seed, y_seed = input_seeds(key, derived_seed or _default_derived_seed())
    salted = key[3]
    # D draws a salted y in the row's dtype and an unsalted one in fp64, cast to the type the graph reads
    y_dtype = str(graph.y_dtype(torch_dtype)).removeprefix("torch.")
    if salted and y_dtype != dtype:
        raise ValueError(f"D subgraph {subgraph!r} salts y in {dtype} but reads it as {y_dtype}")
    lay, values = "transposed" if layout == "transposed_view" else "contiguous", "specials" if salted else "normal"
    inputs = (
        Input("x", tuple(shape), dtype, x_seed, lay, values=values),
        Input("y", tuple(shape), y_dtype, y_seed, lay, values=values),
    )
    source = pk_minimize.graph_source(torch.fx.symbolic_trace(graph.fn))
    return Case(
        d_repro_id(subgraph, dtype, "x".join(map(str, shape)), layout),
        source,
        inputs,
        backend=backend,
        rule="bitwise",
        title=f"D: {graph.title} ({dtype}, {'x'.join(map(str, shape))}, {layout}) is not bit-exact",
        origin="D data-movement check table",
        device=device,
    )


def _default_derived_seed() -> Callable[..., int]:
    """The seed derivation of a run with the default base seed (settings' other fields play no part)."""
    from .resources import ExperimentSettings

    return ExperimentSettings(device="cpu", backend="inductor").derived_seed


def fuzz_case(seed: int, backend: str = "inductor", dtype: str | None = None, device: str = "cpu") -> Case:
    """A fuzzer seed's graph as a case, judged by the fuzzer's own tolerance rule against fp64."""
    from precisionkit import fuzz

    graph = fuzz.generate(seed, dtype=dtype)
    tol, _, _ = graph.tolerance()
    inputs = tuple(Input(name, tuple(shape), graph.dtype, s, scale=scale) for name, shape, scale, s in graph.inputs)
    return Case(
        f"fuzz-{seed}-{graph.dtype}",
        graph.source(),
        inputs,
        backend=backend,
        rule="fp64",
        atol=tol.atol,
        rtol=tol.rtol,
        title=f"fuzzer seed {seed} ({graph.dtype}): {graph.op_list()}",
        origin="differential graph fuzzer",
        device=device,
    )


def difftest_case(
    generator: str, seed: int, dtype: str | None = None, backend: str = "inductor", device: str = "cpu"
) -> Case:
    """A program of the differential tester on ``device`` as a case (its own ``diff`` rule)."""
    from precisionkit import difftest

    case = difftest.generate(seed, generator, dtype, device=device)
    return case.with_(backend=backend)


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
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    say(f"{case.id}: minimizing ({case.rule}, backend {case.backend}, control {control or 'none'})")
    mini = pk_minimize.minimize(case, pk_minimize.predicate_for(control), max_checks=max_checks)
    small = mini.case
    staging = Path(tempfile.mkdtemp(prefix=f".{case.id}.", dir=root))
    try:
        script = write(small, staging)
        _write_text(staging / "case.original.json", json.dumps(case.to_json(), indent=2) + "\n")
        fresh = run_script(script, python=python, env=_script_env(), cwd=PROJECT_ROOT)
        say(f"{case.id}: {mini.ops_before} -> {mini.ops_after} ops in {mini.seconds:.0f} s; fresh run: {fresh.status}")
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
            "ops_before": mini.ops_before,
            "ops_after": mini.ops_after,
            "shapes_before": [list(i.shape) for i in case.inputs],
            "shapes_after": [list(i.shape) for i in small.inputs],
            "lines": lines_of(small),
            "minimize_checks": mini.checks,
            "minimize_seconds": round(mini.seconds, 1),
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
    run's other work waits); on an accelerator, one per host core up to 8 (the layers then run at
    once too: the H200 run of 2026-11-27 spent 11 to 55 s per layer, one after another)."""
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
        f"Minimized from {meta['ops_before']} to {meta['ops_after']} ops and from shapes "
        f"{meta['shapes_before']} to {meta['shapes_after']} ({meta['minimize_checks']} candidates, "
        f"{meta['minimize_seconds']} s).\n\n```python\n" + render(case) + "```\n\n"
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
