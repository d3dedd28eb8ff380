"""What task E needs from a compiler beyond a forward pass: the options that make its ``torch.compile``
backend differentiable, the backward graph's evidence from any adapter, and a compiler's failure on the
training step as one line that names the compiler and its own error.

Everything compiler-specific is read from the compiler's adapter (``training_options``, ``failure_loggers``,
``process_globals``: :class:`~precisionkit.backends.base.BackendAdapter`), so a user's compiler comes into E
by declaring them on its adapter, with no table here. Inductor compiles the backward through AOTAutograd by itself. OpenVINO's backend does so only with its
``aot_autograd`` option: without it, it traces the graph for inference under ``no_grad`` and returns
outputs that carry no gradient (and, on this torch, its inference tracing leaves Dynamo guards on sizes
that have no source, an ``IndexError`` while Dynamo builds the guards; see ``tests/pipeline/test_training_compilers.py``),
and with ``detach`` left to torch (its frontend cannot convert a partition that returns a tensor beside its
``detach``). E itself does not apply to OpenVINO: its backend passes no bfloat16 tensor to or from torch, and E
trains under bf16 autocast on a CPU (the adapter's ``not_applicable``). IREE's adapter compiles the backward by
itself (:mod:`precisionkit.backends.iree_training`).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from precisionkit.backends import adapter_for_backend, failures_logged
from precisionkit.backends.inductor import InductorAdapter
from precisionkit.paths import capture_generated_code

from ...compiler_text import error_line, error_origin
from ...intents import compiler_title


@contextlib.contextmanager
def compiler_globals_kept(backend: str) -> Iterator[None]:
    """Inside the block ``backend``'s compiler may change the globals its adapter declares it carries from one
    compile to the next (``process_globals``); after it they hold what they held before (their starting value
    where the module was not loaded yet), so E's training options do not follow the process into another
    experiment's compiles."""
    kept = adapter_for_backend(backend).process_globals
    before = {
        (name, attr): copy.copy(getattr(sys.modules[name], attr, start)) if name in sys.modules else copy.copy(start)
        for name, attr, start in kept
    }
    try:
        yield
    finally:
        for (name, attr), value in before.items():
            if name in sys.modules:
                setattr(sys.modules[name], attr, value)


def training_options(backend: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with what ``backend``'s compiler needs to differentiate a training step added (its
    adapter's ``training_options``; the caller's own values win)."""
    return {**dict(adapter_for_backend(backend).training_options), **dict(options)}


class TrainingCompileError(RuntimeError):
    """The fused path's compiler failed on a training run's step: the message is one line naming the
    compiler, the part of the step (evaluation forward, training forward or backward) and its error."""


@dataclass
class CompilerMessages:
    """Failures a compiler logged while :func:`compiler_messages` was active, one line each."""

    lines: list[str] = field(default_factory=list)


@contextlib.contextmanager
def compiler_messages(backend: str) -> Iterator[CompilerMessages]:
    """Collect the failures ``backend``'s compiler logs inside the block (its adapter's ``failure_loggers``)."""
    found = CompilerMessages()
    with failures_logged(adapter_for_backend(backend), found.lines):
        yield found


def compile_failure(backend: str, part: str, exc: BaseException, logged: CompilerMessages) -> TrainingCompileError:
    """The one-line error of ``backend``'s compiler failing on ``part`` of a training step: its
    exception, what the compiler itself logged (its own error when it hid it), and where it was raised."""
    where = error_origin(exc)
    # The fused path's refusal may name the logged failure already (its adapter's capture collects it too).
    said = f"; the compiler logged: {logged.lines[0]}" if logged.lines and logged.lines[0] not in str(exc) else ""
    return TrainingCompileError(
        f"{compiler_title(backend)} failed on {part}: {error_line(exc)}"
        + (f" (raised at {where})" if where else "")
        + said
    )


def is_inductor(backend: str) -> bool:
    """Whether ``backend`` compiles through Inductor's adapter (Inductor, and the backends that wrap it)."""
    return isinstance(adapter_for_backend(backend), InductorAdapter)


@contextlib.contextmanager
def failing_as(backend: str, part: str, active: bool = True) -> Iterator[None]:
    """Inside the block, any error but a :class:`TrainingCompileError` is re-raised as
    :func:`compile_failure` of ``part`` (when ``active``: the calls that compile)."""
    if not active:
        yield
        return
    with compiler_messages(backend) as logged:
        try:
            yield
        except TrainingCompileError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the compiler raised, it is named in one line
            # Not chained: a run summary reports the innermost cause, and this line is the one to read.
            raise compile_failure(backend, part, exc, logged) from None


@contextlib.contextmanager
def backward_evidence(backend: str, evidence: dict[str, Any]) -> Iterator[None]:
    """Record in ``evidence`` what the compiler produced for the backward graph compiled inside the
    block: ``bwd_graphs``, ``bwd_kernel_count`` (Inductor's kernels, another compiler's compiled
    units) and ``bwd_code_sha256`` (Inductor's generated code; "" for a compiler that exposes none).

    Inductor's backward code arrives at the first ``backward()`` when compiled, or with the forward
    when AOTAutograd serves both from its cache, so for Inductor the block spans both and the code is
    selected by AOTAutograd's label; another adapter's capture has no label, so its block holds the
    ``backward()`` call alone."""
    adapter = adapter_for_backend(backend)
    if isinstance(adapter, InductorAdapter):
        with capture_generated_code() as captured:
            yield
        backward = captured.of_kind("backward")
        evidence.update(
            {
                "bwd_graphs": backward.graphs,
                "bwd_kernel_count": len(backward.kernel_names),
                "bwd_code_sha256": backward.sha256,
            }
        )
        return
    with adapter.capture() as capture:
        yield
    code = capture.code
    evidence.update(
        {
            "bwd_graphs": capture.partitions,
            "bwd_kernel_count": len(capture.units),
            "bwd_code_sha256": hashlib.sha256(code.encode()).hexdigest() if code else "",
        }
    )
