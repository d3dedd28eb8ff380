"""What task E needs from a compiler beyond a forward pass: the options that make its ``torch.compile``
backend differentiable, the backward graph's evidence from any adapter, and a compiler's failure on the
training step as one line that names the compiler and its own error.

Inductor compiles the backward through AOTAutograd by itself. OpenVINO's backend does so only with its
``aot_autograd`` option: without it, it traces the graph for inference under ``no_grad`` and returns
outputs that carry no gradient (and, on this torch, its inference tracing leaves Dynamo guards on sizes
that have no source, an ``IndexError`` while Dynamo builds the guards; see ``tests/pipeline/test_training_compilers.py``).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from precisionkit.backends import adapter_for_backend
from precisionkit.backends.inductor import InductorAdapter
from precisionkit.paths import capture_generated_code

from ...compiler_text import error_line, error_origin
from ...intents import compiler_title

#: Per adapter name, the options its backend needs to compile a training step's backward, with why.
#: An adapter's own ``training_options`` attribute, where it declares one, takes precedence.
TRAINING_OPTIONS: dict[str, tuple[dict[str, Any], str]] = {
    "openvino": (
        {"aot_autograd": True},
        "OpenVINO's torch.compile backend is differentiable only through AOTAutograd (its aot_autograd option)",
    ),
}

#: Per adapter name, the Python loggers where its backend reports a failure it then hides by running
#: the graph another way (OpenVINO logs the frontend's error at DEBUG, then runs the partition in torch).
COMPILER_LOGGERS: dict[str, tuple[str, ...]] = {
    "openvino": ("openvino.frontend.pytorch.torchdynamo.execute", "openvino.frontend.pytorch.torchdynamo.backend"),
}


#: Per adapter name, module globals its backend keeps from one compile to the next, with the value each starts
#: with: OpenVINO's backend stores the options of an ``aot_autograd`` compile in ``openvino_options`` and applies
#: them to every later compile of the process, whatever options that compile names.
COMPILER_GLOBALS: dict[str, tuple[tuple[str, str, Any], ...]] = {
    "openvino": (("openvino.frontend.pytorch.torchdynamo.backend", "openvino_options", {}),),
}


@contextlib.contextmanager
def compiler_globals_kept(backend: str) -> Iterator[None]:
    """Inside the block ``backend``'s compiler may change the globals :data:`COMPILER_GLOBALS` names; after it
    they hold what they held before (their starting value where the module was not loaded yet), so E's
    training options do not follow the process into another experiment's compiles."""
    kept = COMPILER_GLOBALS.get(adapter_for_backend(backend).name, ())
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
    """``options`` with what ``backend``'s compiler needs to differentiate a training step added
    (the caller's own values win)."""
    adapter = adapter_for_backend(backend)
    needed = getattr(adapter, "training_options", None)
    if needed is None:
        needed = TRAINING_OPTIONS.get(adapter.name, ({}, ""))[0]
    return {**dict(needed), **dict(options)}


class TrainingCompileError(RuntimeError):
    """The fused path's compiler failed on a training run's step: the message is one line naming the
    compiler, the part of the step (evaluation forward, training forward or backward) and its error."""


@dataclass
class CompilerMessages:
    """Failures a compiler logged while :func:`compiler_messages` was active, first lines only."""

    lines: list[str] = field(default_factory=list)


class _Collect(logging.Handler):
    def __init__(self, into: CompilerMessages) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "fail" in text.lower():
            self.into.lines.append(" ".join(text.split()))


@contextlib.contextmanager
def compiler_messages(backend: str) -> Iterator[CompilerMessages]:
    """Collect the failures ``backend``'s compiler logs inside the block (see :data:`COMPILER_LOGGERS`)."""
    found = CompilerMessages()
    names = COMPILER_LOGGERS.get(adapter_for_backend(backend).name, ())
    loggers = [logging.getLogger(n) for n in names]
    handler, levels = _Collect(found), [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    try:
        yield found
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


def compile_failure(backend: str, part: str, exc: BaseException, logged: CompilerMessages) -> TrainingCompileError:
    """The one-line error of ``backend``'s compiler failing on ``part`` of a training step: its
    exception, what the compiler itself logged (its own error when it hid it), and where it was raised."""
    where = error_origin(exc)
    said = f"; the compiler logged: {logged.lines[0]}" if logged.lines else ""
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
