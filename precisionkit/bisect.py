"""The layer at fault, measured: a reproducer re-run in fresh interpreters, one compiler layer or
one change at a time.

Each variant runs the reproducer file (:mod:`precisionkit.repro`) in a new interpreter with an
Inductor cache of its own, so nothing compiled under one variant is loaded by another.

1. **Layers**, in the order ``torch.compile`` applies them: Dynamo capture (backend ``eager``),
   AOTAutograd (``aot_eager``), decompositions and partitioning (``aot_eager_decomp_partition``),
   Inductor (``inductor``), then the case's own backend when it is another one (a custom backend
   wrapping Inductor, or another compiler's: OpenVINO, IREE). The first layer whose run reproduces
   is where the defect appears. When that layer is another compiler's, its adapter's knobs
   (:meth:`~precisionkit.backends.BackendAdapter.knobs`: OpenVINO's precision and execution hints,
   IREE's compile flags) run next, each a variant compiling through that adapter with the knob's
   options; the first that runs clean is the workaround.
2. When that layer is Inductor, ``torch._inductor.compiler_bisector`` runs on the same file and
   its answer is kept beside ours (it bisects Inductor's own subsystems; it cannot rebuild the
   C++, so a toolchain fault shows to it as whichever lowering it can turn off); then **Inductor knobs** (vectorization off with ``cpp.simdlen=0``, the
   AVX2 path, fusion limited to one node, epilogue fusion and the pattern matcher off,
   ``emulate_precision_casts``), and **the native toolchain**: the same generated C++ rebuilt with
   other flags (``-O2``, single ``-fno-...`` flags, ``-mtune=generic``) through a compiler wrapper,
   and by ``clang++`` where one is installed. The generated C++ of every Inductor variant is
   hashed: when a toolchain variant compiled the *same* source and the defect is gone, the
   toolchain is at fault (the generated code is the same; only its translation changed), and
   that flag is the workaround. Otherwise a knob that removes it names Inductor's lowering or
   code generation, and is the workaround.

On CUDA (the case's ``device``) the same path runs with the GPU's knob sets (:func:`knob_sets`):
the Inductor knobs add the Triton code generator's own (``split_reductions``,
``triton.persistent_reductions``, ``triton.cudagraphs``, autotuning), and the toolchain layer is
Triton/PTX: the same generated Triton kernel (its sha256 recorded) launched with other
``num_warps`` / ``num_stages``, or with FMA contraction off (``TRITON_DEFAULT_FP_FUSION=0``).

The ``compiled`` rule (no kernel generated) only makes sense for Inductor and the case's backend,
so only those two layers run for it.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .repro import Case, ScriptRun, run_script

LAYERS: tuple[tuple[str, str], ...] = (
    ("Dynamo capture", "eager"),
    ("AOTAutograd", "aot_eager"),
    ("decompositions and partitioning", "aot_eager_decomp_partition"),
    ("Inductor lowering, fusion and code generation", "inductor"),
)


@dataclass(frozen=True)
class Knob:
    """One change to the Inductor run: config assignments (``prelude``), environment, compiler flags."""

    name: str
    kind: str  # "inductor" | "toolchain"
    prelude: str = ""
    env: dict[str, str] = field(default_factory=dict)
    cxx_flags: tuple[str, ...] = ()
    cxx: str = ""  # another compiler (a name on PATH)


def _config(assign: str) -> str:
    return f"import torch._inductor.config as c\nc.{assign}"


INDUCTOR_KNOBS: tuple[Knob, ...] = (
    Knob("cpp.simdlen=0 (no vectorization)", "inductor", _config("cpp.simdlen = 0")),
    Knob(
        "AVX2 path (ATEN_CPU_CAPABILITY=avx2)",
        "inductor",
        env={"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    ),
    Knob("max_fusion_size=1 (fusion off)", "inductor", _config("max_fusion_size = 1")),
    Knob("epilogue_fusion=False", "inductor", _config("epilogue_fusion = False")),
    Knob("pattern_matcher=False", "inductor", _config("pattern_matcher = False")),
    Knob("emulate_precision_casts=True", "inductor", _config("emulate_precision_casts = True")),
)

TOOLCHAIN_KNOBS: tuple[Knob, ...] = (
    Knob("-O2", "toolchain", cxx_flags=("-O2",)),
    Knob("-fno-tree-slp-vectorize", "toolchain", cxx_flags=("-fno-tree-slp-vectorize",)),
    Knob("-fno-tree-loop-vectorize", "toolchain", cxx_flags=("-fno-tree-loop-vectorize",)),
    Knob("-fno-strict-aliasing", "toolchain", cxx_flags=("-fno-strict-aliasing",)),
    Knob("-ffp-contract=off", "toolchain", cxx_flags=("-ffp-contract=off",)),
    Knob("-mtune=generic", "toolchain", cxx_flags=("-mtune=generic",)),
    Knob("clang++", "toolchain", cxx="clang++"),
)


def _triton_launch(num_warps: int | None = None, num_stages: int | None = None) -> str:
    """A prelude that launches every Triton kernel Inductor generates with these ``num_warps`` /
    ``num_stages`` (the kernel's source is unchanged: only its compilation for the GPU differs).
    Compiles run in this interpreter (``compile_threads = 1``) so the patched heuristics apply."""
    sets = "".join(
        f"    c.{k} = {v}\n" for k, v in (("num_warps", num_warps), ("num_stages", num_stages)) if v is not None
    )
    return (
        "import torch._inductor.config as ic\nic.compile_threads = 1\n"
        "import torch._inductor.runtime.triton_heuristics as h\n"
        "def _fixed(make):\n"
        "    def wrapped(*a, **k):\n"
        "        c = make(*a, **k)\n" + sets.replace("    c.", "        c.") + "        return c\n"
        "    return wrapped\n"
        "for _name in ('triton_config', 'triton_config_reduction', 'triton_config_tiled_reduction'):\n"
        "    if hasattr(h, _name):\n"
        "        setattr(h, _name, _fixed(getattr(h, _name)))\n"
    )


#: The Triton/PTX toolchain on CUDA: the same generated kernel compiled for the GPU another way.
TRITON_KNOBS: tuple[Knob, ...] = (
    Knob("num_warps=2", "toolchain", _triton_launch(num_warps=2)),
    Knob("num_warps=8", "toolchain", _triton_launch(num_warps=8)),
    Knob("num_stages=1", "toolchain", _triton_launch(num_stages=1)),
    Knob("fast math off (TRITON_DEFAULT_FP_FUSION=0)", "toolchain", env={"TRITON_DEFAULT_FP_FUSION": "0"}),
)

#: Inductor knobs on CUDA: the CPU set's lowering knobs plus the Triton code generator's own.
CUDA_INDUCTOR_KNOBS: tuple[Knob, ...] = (
    Knob("max_fusion_size=1 (fusion off)", "inductor", _config("max_fusion_size = 1")),
    Knob("epilogue_fusion=False", "inductor", _config("epilogue_fusion = False")),
    Knob("pattern_matcher=False", "inductor", _config("pattern_matcher = False")),
    Knob("emulate_precision_casts=True", "inductor", _config("emulate_precision_casts = True")),
    Knob("split_reductions=False", "inductor", _config("split_reductions = False")),
    Knob("triton.persistent_reductions=False", "inductor", _config("triton.persistent_reductions = False")),
    Knob("triton.cudagraphs=False", "inductor", _config("triton.cudagraphs = False")),
    Knob("max_autotune=False", "inductor", _config("max_autotune = False")),
    Knob("coordinate_descent_tuning=False", "inductor", _config("coordinate_descent_tuning = False")),
)


def torch_device_type(device: str) -> str:
    """``cuda`` for ``cuda:1``; a bad device string is a ValueError naming it."""
    import torch

    try:
        return torch.device(device).type
    except (RuntimeError, TypeError):
        raise ValueError(f"not a torch device: {device!r}") from None


def knob_sets(device: str) -> tuple[tuple[Knob, ...], tuple[Knob, ...]]:
    """(toolchain knobs, Inductor knobs) the bisection tries on ``device``: on CUDA the Triton/PTX
    layer and the Triton knobs; elsewhere the C++ toolchain and the CPU knobs. One code path
    (:func:`bisect`) chooses among them, so the CPU runs test the path the GPU takes."""
    if torch_device_type(device) == "cuda":
        return TRITON_KNOBS, CUDA_INDUCTOR_KNOBS
    return TOOLCHAIN_KNOBS, INDUCTOR_KNOBS


@dataclass
class Variant:
    """One row of the bisection table."""

    step: str  # "layer" | "inductor" | "toolchain"
    name: str
    backend: str
    status: str  # reproduces | clean | error
    message: str
    seconds: float
    cpp_sha256: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Bisection:
    """The table, the first layer that reproduces, the layer at fault and the workaround."""

    variants: list[Variant]
    first_layer: str
    layer_at_fault: str
    workaround: str
    kernel_excerpt: str = ""
    skipped: list[str] = field(default_factory=list)
    #: what ``torch._inductor.compiler_bisector`` answered for the same file (run beside ours)
    pytorch_bisector: str = ""

    def table_md(self) -> str:
        head = (
            "| step | variant | backend | result | what it printed | kernel source (sha256) | seconds |\n"
            "|---|---|---|---|---|---|---|\n"
        )
        body = "".join(
            f"| {v.step} | {v.name} | `{v.backend}` | **{v.status}** | {v.message.replace('|', '/')} | "
            f"{v.cpp_sha256[:12] or '-'} | {v.seconds:.1f} |\n"
            for v in self.variants
        )
        return head + body

    def summary(self) -> dict[str, Any]:
        return {
            "first_layer": self.first_layer,
            "layer_at_fault": self.layer_at_fault,
            "workaround": self.workaround,
            "variants": [v.row() for v in self.variants],
            "skipped": self.skipped,
            "pytorch_bisector": self.pytorch_bisector,
        }


def _cpp_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*.cpp") if p.is_file())


def _kernel_sources(cache: Path, paths: list[Path], keep: Callable[[str], bool], marker: str) -> tuple[str, str]:
    """(sha256 over the texts of ``paths`` that ``keep`` accepts, with the cache folder's path taken
    out so the same program in two caches hashes alike; the first text's 40 lines from ``marker``)."""
    roots = {str(cache), str(cache.resolve())}
    texts = []
    for path in paths:
        text = path.read_text(errors="replace")
        for root in roots:  # torch before 2.8 includes its header by its path inside the cache
            text = text.replace(root, "<cache>")
        if keep(text):
            texts.append(text)
    texts.sort()
    if not texts:
        return "", ""
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
    first = texts[0]
    return digest, "\n".join(first[first.find(marker) :].splitlines()[:40])


def generated_cpp(cache: Path) -> tuple[str, str]:
    """(sha256 over the generated kernels' C++ under an Inductor cache folder, excerpt of the first).
    Only files that define an ``extern "C"`` kernel count (not the ISA probe)."""
    return _kernel_sources(
        cache,
        _cpp_files(cache),
        lambda t: 'extern "C"' in t and "kernel" in t and "_chk_kernel" not in t,
        'extern "C"',
    )


def generated_triton(cache: Path) -> tuple[str, str]:
    """(sha256 over the generated Triton kernels under an Inductor cache folder, excerpt of the
    first): the Python files that define an ``@triton.jit`` function."""
    files = sorted(p for p in cache.rglob("*.py") if p.is_file())
    return _kernel_sources(cache, files, lambda t: "@triton.jit" in t, "@triton.jit")


def generated_code(cache: Path, device: str) -> tuple[str, str]:
    """The generated kernels' (sha256, excerpt) for ``device``: Triton on CUDA, C++ elsewhere."""
    return generated_triton(cache) if torch_device_type(device) == "cuda" else generated_cpp(cache)


def _wrapper(folder: Path, flags: Sequence[str], compiler: str) -> Path:
    """A compiler named ``g++`` (so Inductor treats it as GCC) that runs ``compiler`` (the one
    Inductor would use) with ``flags`` appended: a later ``-O2`` overrides Inductor's ``-O3``, a
    later ``-fno-x`` its ``-fx``."""
    real = shutil.which(compiler) or compiler
    path = folder / "g++"
    quoted = " ".join(f"'{f}'" for f in flags)
    path.write_text(f'#!/bin/sh\nexec {real} "$@" {quoted}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _status_message(run: ScriptRun) -> str:
    if run.status == "error":
        err = [line for line in run.output.strip().splitlines() if line.strip()]
        return ("did not run: " + (err[-1] if err else f"exit {run.returncode}"))[:240]
    line = run.last_line
    return line.split(": ", 1)[1] if line.startswith(("REPRODUCES: ", "clean: ")) else line[:240]


class _Runner:
    """Runs the variants of one bisection: each a fresh interpreter with an Inductor cache of its own."""

    def __init__(
        self,
        script: str | os.PathLike[str],
        work: Path,
        *,
        python: str | None,
        cwd: str | os.PathLike[str] | None,
        env: dict[str, str],
        timeout: float,
        device: str,
        log: Callable[[str], None] | None,
    ) -> None:
        self.script, self.work, self.python, self.cwd = script, work, python, cwd
        self.env, self.timeout, self.device, self.log = env, timeout, device, log
        self.variants: list[Variant] = []
        self.excerpts: dict[str, str] = {}
        self.lock = threading.Lock()

    def _variant_env(self, knob: Knob | None) -> tuple[dict[str, str], str, Path]:
        cache = Path(tempfile.mkdtemp(prefix="cache-", dir=self.work))
        var_env = {**self.env, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
        if knob is None:
            return var_env, "", cache
        var_env.update(knob.env)
        if knob.cxx_flags:
            compiler = self.env.get("CXX") or os.environ.get("CXX", "g++")
            folder = Path(tempfile.mkdtemp(prefix="cxx-", dir=self.work))
            var_env["CXX"] = str(_wrapper(folder, knob.cxx_flags, compiler))
        if knob.cxx:
            var_env["CXX"] = knob.cxx
        return var_env, knob.prelude, cache

    def run(self, step: str, name: str, backend: str, knob: Knob | None = None, keep: bool = True) -> Variant:
        """Run one variant; ``keep`` False: not yet in the table (a variant started ahead, :meth:`keep` later)."""
        var_env, prelude, cache = self._variant_env(knob)
        result = run_script(
            self.script, [backend], python=self.python, env=var_env, prelude=prelude, cwd=self.cwd, timeout=self.timeout
        )
        sha, excerpt = generated_code(cache, self.device)
        shown = {k: v for k, v in var_env.items() if k != "TORCHINDUCTOR_CACHE_DIR" and k not in self.env}
        v = Variant(step, name, backend, result.status, _status_message(result), result.seconds, sha, shown)
        with self.lock:
            self.excerpts[name] = excerpt
        if keep:
            self.keep(v)
        return v

    def keep(self, v: Variant) -> None:
        """Put ``v`` in the table (and the log)."""
        with self.lock:
            self.variants.append(v)
        if self.log:
            self.log(f"  {v.step:9s} {v.name:45s} {v.status}")


def _layers(case: Case) -> list[tuple[str, str]]:
    layers = list(LAYERS)
    if case.backend not in {b for _, b in LAYERS}:
        if _adapter_knobs(case.backend):  # another compiler's: it does not run through Inductor
            layers = [(n, b) for n, b in layers if b != "inductor"]
            layers.append((f"the compiler behind backend {case.backend!r}", case.backend))
        else:
            layers.append((f"the backend {case.backend!r} (wraps the layers above)", case.backend))
    if case.rule == "compiled":
        layers = [(n, b) for n, b in layers if b not in ("eager", "aot_eager", "aot_eager_decomp_partition")]
    return layers


def _knob_todo(device: str, skipped: list[str]) -> list[tuple[str, Knob]]:
    """The toolchain variants (installed ones) then the Inductor knobs of the device's knob set."""
    toolchain, inductor = knob_sets(device)
    todo: list[tuple[str, Knob]] = []
    for knob in toolchain:
        if knob.cxx and shutil.which(knob.cxx) is None:
            skipped.append(f"{knob.name}: not installed")
            continue
        todo.append(("toolchain", knob))
    if torch_device_type(device) == "cuda":
        skipped.append("another Triton version: only the installed one is tried")
    return todo + [("inductor", knob) for knob in inductor]


def _verdict(
    runner: _Runner, first: str, todo: list[tuple[str, Knob]], done: list[Variant], base: Variant
) -> tuple[str, str]:
    """(layer at fault, workaround) from the knob variants: a toolchain variant that compiled the
    same generated source and runs clean blames the toolchain; else the first clean Inductor knob."""
    toolchain_fix = inductor_fix = None
    for (step, knob), v in zip(todo, done, strict=True):
        if step == "toolchain":
            if v.status == "clean" and v.cpp_sha256 and v.cpp_sha256 == base.cpp_sha256 and toolchain_fix is None:
                toolchain_fix = knob.name
        elif v.status == "clean" and inductor_fix is None:
            inductor_fix = knob.name
    if toolchain_fix:
        if torch_device_type(runner.device) == "cuda":
            return (
                f"Triton/PTX toolchain: the same generated Triton kernel is correct when compiled with {toolchain_fix}",
                f"compile Inductor's Triton kernels with {toolchain_fix}",
            )
        return (
            f"native toolchain (C++ compiler): the same generated C++ is correct when built with {toolchain_fix}",
            f"build Inductor's kernels with {toolchain_fix} (e.g. CXX set to a wrapper adding it)",
        )
    if inductor_fix:
        return f"{first} (removed by {inductor_fix})", f"set {inductor_fix}"
    return f"{first} (no knob tried removes it)", ""


def bisect(
    script: str | os.PathLike[str],
    case: Case,
    *,
    python: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    knobs: bool = True,
    log: Callable[[str], None] | None = None,
    timeout: float = 600.0,
    workers: int = 2,
    parallel_layers: bool | None = None,
) -> Bisection:
    """Run the bisection of one reproducer file (see the module docstring) on the case's device.
    ``workers``: knob and toolchain variants run at once (each a fresh interpreter with its own
    cache); the table keeps their declared order. ``parallel_layers``: the layers run at once too, and
    the knob variants start with them (default: on an accelerator, where the host's cores are idle; on
    the CPU the layers run one at a time and stop at the first that reproduces, and the knobs run after
    them only when Inductor is at fault). Either way the table and the verdict are the same."""
    work = Path(tempfile.mkdtemp(prefix="pk-bisect-"))
    base_env = dict(env or {})
    ahead = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        runner = _Runner(
            script, work, python=python, cwd=cwd, env=base_env, timeout=timeout, device=case.device, log=log
        )
        layers = _layers(case)
        if parallel_layers is None:
            parallel_layers = torch_device_type(case.device) != "cpu"
        skipped: list[str] = []
        todo = _knob_todo(case.device, skipped) if knobs else []
        # Where the layers run at once (an accelerator host, its cores idle), the knob variants start with them:
        # none depends on the layers' outcome, and each costs what a layer does. They join the table only when
        # the layers blame Inductor, so the table and the verdict are those of a bisection run in turn. Torch's
        # bisector (many compiles, unbounded) still waits for that answer: it would delay every other verdict.
        early = [ahead.submit(runner.run, step, k.name, "inductor", k, False) for step, k in todo if parallel_layers]
        first = _first_layer(runner, layers, workers if parallel_layers else 1)
        if not first:
            return Bisection(runner.variants, "", "does not reproduce here", "")
        if dict(layers)[first] != "inductor":
            adapter_knobs = _adapter_knobs(dict(layers)[first]) if knobs else []
            if adapter_knobs:
                return _adapter_verdict(runner, first, adapter_knobs, layers, workers)
            return Bisection(runner.variants, first, first, f"use the layer before it: {_before(layers, first)}")
        base = runner.variants[-1]
        excerpt = runner.excerpts.get(base.name, "")
        if not knobs:
            return Bisection(runner.variants, first, first, "", excerpt)
        theirs = pytorch_bisector(script, python=python, cwd=cwd, env=base_env, timeout=timeout)
        if log:
            log(f"  torch._inductor.compiler_bisector: {theirs}")
        if early:
            done = [f.result() for f in early]
            for v in done:
                runner.keep(v)
        else:
            # Each variant is its own interpreter compiling on one core: run them side by side, judge in order.
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                done = list(pool.map(lambda item: runner.run(item[0], item[1].name, "inductor", item[1]), todo))
            runner.variants[len(runner.variants) - len(done) :] = done  # the declared order, whatever finished first
        fault, workaround = _verdict(runner, first, todo, done, base)
        return Bisection(runner.variants, first, fault, workaround, excerpt, skipped, theirs)
    finally:
        ahead.shutdown(wait=True, cancel_futures=True)  # a variant started ahead writes under ``work``
        shutil.rmtree(work, ignore_errors=True)


#: The torch.compile backend name an adapter knob's variant compiles with (registered by its prelude).
KNOB_BACKEND = "pk_adapter_knob"


def _adapter_knobs(backend: str) -> list[Knob]:
    """The layer-bisection knobs of the adapter that compiles with ``backend`` (OpenVINO's precision
    and execution hints, IREE's compile flags: :meth:`~precisionkit.backends.BackendAdapter.knobs`),
    each a variant whose prelude registers :data:`KNOB_BACKEND` as that adapter's compiler with the
    knob's options; none for Inductor (its own knob sets run) or a backend without an adapter."""
    import json

    from .backends import adapter_for_backend

    try:
        adapter = adapter_for_backend(backend)
    except Exception:  # noqa: BLE001 - no adapter, no knobs: the layers' verdict stands
        return []
    if adapter.name == "inductor":
        return []
    out = []
    for name, options in adapter.knobs().items():
        prelude = (
            "import json\nfrom torch._dynamo import register_backend\n"
            "from precisionkit.backends import get_adapter\n"
            f"register_backend(name={KNOB_BACKEND!r})(get_adapter({adapter.name!r}).compiler("
            f"json.loads({json.dumps(json.dumps(options))})))\n"
        )
        out.append(Knob(name, adapter.name, prelude=prelude))
    return out


def _adapter_verdict(
    runner: _Runner, first: str, knobs: list[Knob], layers: list[tuple[str, str]], workers: int
) -> Bisection:
    """Run a compiler's own knobs on the file (each a fresh interpreter): the first that runs clean
    names the layer it changes as at fault and is the workaround."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        done = list(pool.map(lambda k: runner.run(k.kind, k.name, KNOB_BACKEND, k), knobs))
    runner.variants[len(runner.variants) - len(done) :] = done
    fix = next((k.name for k, v in zip(knobs, done, strict=True) if v.status == "clean"), None)
    if fix:
        return Bisection(runner.variants, first, f"{first} (removed by {fix})", f"compile with {fix}")
    return Bisection(
        runner.variants,
        first,
        f"{first} (no knob of the compiler removes it)",
        f"use the layer before it: {_before(layers, first)}",
    )


def _first_layer(runner: _Runner, layers: list[tuple[str, str]], workers: int) -> str:
    """The first layer, in order, whose variant reproduces ("" when none does): one at a time,
    stopping there; or (``workers`` > 1) all at once, the variants after it dropped from the table,
    so that the table is the one a run one at a time gives."""
    if workers <= 1:
        return next((name for name, backend in layers if runner.run("layer", name, backend).status == "reproduces"), "")
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(lambda layer: runner.run("layer", *layer), layers))
    k = next((i for i, v in enumerate(done) if v.status == "reproduces"), None)
    runner.variants[:] = done if k is None else done[: k + 1]
    return "" if k is None else layers[k][0]


_BISECTOR = """
import json, runpy, sys
import torch
from torch._inductor.compiler_bisector import CompilerBisector
ns = runpy.run_path(sys.argv[1], run_name="pk_bisector")
def passes():
    torch._dynamo.reset()
    return not ns["check"](ns["graph"], ns["make"](), "inductor")[0]
r = CompilerBisector.do_bisect(passes)
print("PK_BISECTOR " + json.dumps(None if r is None else [r.backend, r.subsystem, r.bisect_number, r.debug_info]))
"""


def pytorch_bisector(
    script: str | os.PathLike[str],
    *,
    python: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 600.0,
) -> str:
    """``torch._inductor.compiler_bisector`` on the same file (backend ``inductor``), in a fresh
    interpreter with its own cache: its answer in one line, or why it gave none."""
    import subprocess
    import sys

    cache = tempfile.mkdtemp(prefix="pk-bisector-")
    try:
        proc = subprocess.run(
            [python or sys.executable, "-c", _BISECTOR, str(script)],
            env={**os.environ, **(env or {}), "TORCHINDUCTOR_CACHE_DIR": cache},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"gave no answer within {timeout:.0f} s"
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PK_BISECTOR ")), None)
    if line is None:
        err = [ln for ln in (proc.stdout + proc.stderr).strip().splitlines() if ln.strip()]
        return "did not run: " + (err[-1][:200] if err else f"exit {proc.returncode}")
    import json

    found = json.loads(line.removeprefix("PK_BISECTOR "))
    if found is None:
        return "found no failing configuration"
    backend, subsystem, number, info = found
    where = f"backend {backend}" + (f", subsystem {subsystem}" if subsystem else "")
    return where + (f", application {number}" if number is not None else "") + (f" ({info})" if info else "")


def _before(layers: list[tuple[str, str]], name: str) -> str:
    names = [n for n, _ in layers]
    i = names.index(name)
    return f"backend={layers[i - 1][1]!r}" if i > 0 else "no torch.compile (eager)"
