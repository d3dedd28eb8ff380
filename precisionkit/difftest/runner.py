"""Running one program eager, fused and in fp64 and classifying it by the ``diff`` rule (a campaign of
programs, in this process or in worker interpreters: :mod:`.campaign`)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..repro import Case, for_backend, namespace
from .compile_modes import compiled_as

#: What a device-side fault of compiled code says (CUDA and HIP runtime errors, device asserts): it
#: leaves the device's context unusable, so the program is a ``crash`` and its worker is replaced.
DEVICE_FAULTS = (
    "illegal memory access",
    "unspecified launch failure",
    "device-side assert",
    "misaligned address",
    "illegal instruction",
    "CUDA error",
    "HIP error",
    "CUBLAS_STATUS_EXECUTION_FAILED",
    "launch timed out",
)


def device_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is a device-side fault (see :data:`DEVICE_FAULTS`), not a compile error."""
    if type(exc).__name__ == "AcceleratorError":
        return True
    text = str(exc)
    return any(k in text for k in DEVICE_FAULTS)


@dataclass
class Outcome:
    """One program's class and what the rule printed; where it ran, where its fp64 reference ran,
    what the deterministic-algorithms control said (CUDA runs) and whether the device faulted."""

    case: Case
    klass: str
    message: str
    seconds: float
    threads: int = 0
    reference_device: str = ""
    control: str = ""
    fault: bool = False

    def row(self) -> dict[str, Any]:
        return {
            "id": self.case.id,
            "generator": self.case.extra.get("generator", ""),
            "dtype": next((i.dtype for i in self.case.inputs if i.values in ("normal", "edge")), ""),
            "class": self.klass,
            "message": self.message,
            "features": ", ".join(self.case.extra.get("features", [])),
            "n_lines": self.case.source.count("\n") - 1,
            "seconds": self.seconds,
            "threads": self.threads,
            "device": self.case.device,
            "reference_device": self.reference_device,
            "control": self.control,
        }


def on_device(device: str) -> Any:
    """The context a program runs in: factory calls in its graph (``zeros``, ``arange``) make their
    tensors on ``device``; on the CPU none (nothing to redirect, and no mode on Dynamo's stack)."""
    return contextlib.nullcontext() if device == "cpu" else torch.device(device)


def deterministic_control(scope: dict[str, Any], backend: str) -> str:
    """The rule again with ``torch.use_deterministic_algorithms(True)`` (cuBLAS and cuDNN pick
    their deterministic algorithms): ``reproduces`` says the mismatch does not hang on an algorithm
    choice, ``clean`` that it does. Recorded beside the class, never changing it: the ``diff`` rule
    alone judges."""
    before = torch.are_deterministic_algorithms_enabled()
    torch._dynamo.reset()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        hit, _ = scope["check"](scope["graph"], scope["make"](), backend)
        return "reproduces" if hit else "clean"
    except Exception as exc:  # noqa: BLE001 - the control is evidence, not a verdict
        return f"raised {type(exc).__name__}: {_first(exc)}"
    finally:
        torch.use_deterministic_algorithms(before)
        torch._dynamo.reset()


def _eager_and_reference(scope: dict[str, Any], device: str) -> str:
    """Run eager and the fp64 reference once (the generator's fault if either raises); where fp64 ran."""
    graph, make = scope["graph"], scope["make"]
    with torch.no_grad(), on_device(device):
        graph(*make())
        if "reference" in scope:
            scope["reference"](graph, make())
            return str(scope["REFERENCE"]["device"])
        graph(*[a.double() if a.is_floating_point() else a for a in make()])
    return device


def run(
    case: Case,
    backend: str = "inductor",
    threads: int | None = None,
    on_stage: Callable[[str], None] | None = None,
    control: bool | None = None,
) -> Outcome:
    """Run one program on its device (``case.device``): ``invalid`` when eager or the fp64 reference
    raises (the generator's fault), ``crash`` when the fused run faults the device, ``compile_error``
    when only the fused path raises otherwise, else the ``diff`` rule's ok / mismatch.
    ``on_stage("fused")`` is called once eager and fp64 have run, before compiling. ``control``: run
    the deterministic-algorithms control on a mismatch (default: on CUDA devices)."""
    start = time.perf_counter()
    old = torch.get_num_threads()
    cuda = torch.device(case.device).type == "cuda"
    if cuda:  # cuBLAS reads it when its first handle is made: before any matmul of this worker
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if threads:
        torch.set_num_threads(threads)
    torch._dynamo.reset()
    took = lambda: time.perf_counter() - start  # noqa: E731
    try:
        # an adapter's name (openvino, iree) compiles with its torch.compile backend; the case carries
        # the lines that register it, so its reproducer file runs with only torch and that compiler
        case = for_backend(case, backend)
        backend = case.backend
        scope = namespace(case)
        try:
            ref_on = _eager_and_reference(scope, case.device)
        except Exception as exc:  # noqa: BLE001 - a device fault here still ends the worker's context
            said = f"eager: {type(exc).__name__}: {_first(exc)}"
            return Outcome(case, "invalid", said, took(), fault=device_fault(exc))
        if on_stage is not None:
            on_stage("fused")
        try:
            with compiled_as(case):  # static, dynamic=True or one dim marked dynamic (compile_modes)
                hit, message = scope["check"](scope["graph"], scope["make"](), backend)
        except Exception as exc:  # noqa: BLE001
            said = f"{type(exc).__name__}: {_first(exc)}"
            if device_fault(exc):
                return Outcome(case, "crash", f"device fault in the fused run: {said}", took(), fault=True)
            return Outcome(case, "compile_error", said, took())
        ref_on = str(scope.get("REFERENCE", {}).get("device") or ref_on)
        out = Outcome(case, "mismatch" if hit else "ok", message, took(), threads or old, ref_on)
        if hit and (cuda if control is None else control):
            with compiled_as(case):
                out.control = deterministic_control(scope, backend)
        return out
    finally:
        torch.set_num_threads(old)
        torch._dynamo.reset()


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else "")[:240]
