"""Faulty ``torch.compile`` backends for the reproducer tests: no Inductor, so they cost no C++ build.

``register()`` is idempotent and is what a reproducer's setup line calls in a fresh interpreter.
"""

from pathlib import Path
from typing import Any

import torch


def _map(out: Any, fn: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return fn(out) if out.is_floating_point() or getattr(fn, "all_dtypes", False) else out
    if isinstance(out, (tuple, list)):
        return type(out)(_map(o, fn) for o in out)
    return out


def _up(t: torch.Tensor) -> torch.Tensor:
    """One ULP towards +inf (every element)."""
    return torch.nextafter(t, torch.full_like(t, float("inf")))


def _tail(t: torch.Tensor) -> torch.Tensor:
    """One ULP up in the odd tail of rows longer than 8 whose length is not a multiple of 8."""
    n = t.shape[-1] if t.dim() else 0
    if n <= 8 or n % 8 == 0:
        return t
    t = t.clone()
    t[..., n - n % 8 :] = _up(t[..., n - n % 8 :])
    return t


_calls = {"n": 0}


def _jitter(t: torch.Tensor) -> torch.Tensor:
    _calls["n"] += 1
    return _up(t) if _calls["n"] % 2 == 0 else t


def _wrap(fn: Any) -> Any:
    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        def run(*args: Any) -> Any:
            return _map(gm(*args), fn)

        return run

    return backend


def _negative_zero(t: torch.Tensor) -> torch.Tensor:
    """Every +0 becomes -0 (the sign bit of zeros lost, as a wrong min/max tie-break does)."""
    return torch.where(t == 0, torch.full_like(t, -0.0), t)


def _int_off_by_one(t: torch.Tensor) -> torch.Tensor:
    """Integer outputs one too large; float outputs untouched."""
    return t if t.is_floating_point() or t.dtype == torch.bool else t + 1


_int_off_by_one.all_dtypes = True  # type: ignore[attr-defined]


def _garbage_one(t: torch.Tensor) -> torch.Tensor:
    """One element (the last) replaced by 1000 times its value plus 1."""
    t = t.clone()
    t.view(-1)[-1] = t.view(-1)[-1] * 1000 + 1
    return t


def _to_f32(t: torch.Tensor) -> torch.Tensor:
    """16-bit float outputs returned as float32: the values right, the dtype wrong."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _nan_swallowing(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A max that ignores NaN (as C's fmax, or a vectorized max with the operands swapped, does): the
    graph run with every NaN input read as -inf, so max(x, NaN) is x where eager's is NaN."""

    def run(*args: Any) -> Any:
        swallowed = [
            torch.nan_to_num(a, nan=-float("inf"), posinf=float("inf"), neginf=-float("inf"))
            if isinstance(a, torch.Tensor) and a.is_floating_point()
            else a
            for a in args
        ]
        return gm(*swallowed)

    return run


class _NoNarrowing(torch.overrides.TorchFunctionMode):
    """Every conversion of a float32 tensor to float16 or bfloat16 left in float32."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        x = args[0] if args else None
        if getattr(func, "__name__", "") in ("to", "half", "bfloat16", "type_as") and isinstance(x, torch.Tensor):
            out = func(*args, **(kwargs or {}))
            if x.dtype == torch.float32 and out.dtype in _NARROW:
                return x
            return out
        return func(*args, **(kwargs or {}))


def _keep_fp32(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A fused kernel that never rounds to 16 bits inside: 16-bit float inputs read as float32, the
    graph's float32 -> 16-bit casts skipped, each float output cast at the end to the dtype eager
    gives it. An fp16 overflow of 16-bit arithmetic or at a cast inside the graph is lost, one in
    an output is kept."""

    def run(*args: Any) -> Any:
        want = [o.dtype for o in _flat(gm(*args))]
        wide = [a.float() if isinstance(a, torch.Tensor) and a.dtype in _NARROW else a for a in args]
        with _NoNarrowing():
            got = gm(*wide)
        out = [o.to(d) if o.is_floating_point() else o for o, d in zip(_flat(got), want, strict=True)]
        return type(got)(out) if isinstance(got, (tuple, list)) else out[0]

    return run


_NARROW = (torch.float16, torch.bfloat16)


def _flat(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


class _OpFault(torch.fx.Interpreter):
    """Runs a graph as eager does, except that each call ``fault(target, args, kwargs)`` answers (not
    None) replaces that op's result: a fault confined to one kind of op, as a kernel's is."""

    def __init__(self, gm: torch.fx.GraphModule, fault: Any) -> None:
        super().__init__(gm)
        self.fault = fault

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        out = self.fault(target, args, kwargs)
        return super().call_function(target, args, kwargs) if out is None else out

    def call_method(self, target: Any, args: Any, kwargs: Any) -> Any:
        out = self.fault(target, args, kwargs)
        return super().call_method(target, args, kwargs) if out is None else out


def _op_fault(fault: Any) -> Any:
    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return lambda *args: _OpFault(gm, fault).run(*args)

    return backend


def _named(target: Any) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", "")


def _dim_of(args: Any, kwargs: Any) -> Any:
    return kwargs.get("dim", args[1] if len(args) > 1 else None)


def _last_tie_index(target: Any, args: Any, kwargs: Any) -> Any:
    """argmin / argmax over a bool, int8 or uint8 input give the last optimum, not the first."""
    x = args[0] if args else None
    if _named(target) not in ("argmin", "argmax") or not isinstance(x, torch.Tensor):
        return None
    if x.dtype not in (torch.bool, torch.int8, torch.uint8) or x.numel() < 2:
        return None
    dim, keep = _dim_of(args, kwargs), kwargs.get("keepdim", args[2] if len(args) > 2 else False)
    pick = getattr(torch, _named(target))
    v = x.to(torch.int16)  # bool has no argmin of its own on every path
    if dim is None:
        flat = v.reshape(-1).flip(0)
        out = flat.numel() - 1 - pick(flat)
        return out.reshape([1] * x.dim()) if keep else out
    n = x.shape[dim]
    return n - 1 - pick(v.flip(dim), dim=dim, keepdim=keep)


def _min_without_tail(target: Any, args: Any, kwargs: Any) -> Any:
    """min / amin over a dim longer than 8 whose length is no multiple of 8 leave out its last
    n % 8 elements (the vector loop's remainder), as a kernel that forgets its tail loop does."""
    x = args[0] if args else None
    name = _named(target)
    if name not in ("min", "amin") or not isinstance(x, torch.Tensor) or x.dim() == 0:
        return None
    dim = _dim_of(args, kwargs)
    if isinstance(dim, torch.Tensor) or (name == "min" and len(args) > 1 and isinstance(args[1], torch.Tensor)):
        return None  # the elementwise min(a, b) is no reduction
    if isinstance(dim, (list, tuple)):
        if len({d % x.dim() for d in dim}) == x.dim():
            dim = None  # every dim: the whole tensor, as one row
        elif len(dim) == 1:
            dim = dim[0]
        else:
            return None
    keep = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
    if dim is None:
        flat = x.reshape(-1)
        n = flat.numel()
        if n <= 8 or n % 8 == 0:
            return None
        out = getattr(torch, name)(flat[: n - n % 8])
        return out.reshape([1] * x.dim()) if keep and name == "amin" else out
    n = x.shape[dim]
    if n <= 8 or n % 8 == 0:
        return None
    head = x.narrow(dim, 0, n - n % 8)
    if name == "amin":
        return torch.amin(head, dim=dim, keepdim=keep)
    values, _ = torch.min(head, dim=dim, keepdim=keep)
    return torch.return_types.min((values, torch.min(x, dim=dim, keepdim=keep).indices))


def _nan_to_zero(target: Any, args: Any, kwargs: Any) -> Any:
    """Every NaN an op makes from operands without NaN becomes 0 (inf - inf or 0 * inf after an
    overflow, swallowed as a kernel that clamps its intermediates does); a NaN it is given passes."""
    if _named(target) in ("getitem", "isnan", "isinf", "isfinite") or not callable(target):
        return None
    out = target(*args, **kwargs) if not isinstance(target, str) else getattr(args[0], target)(*args[1:], **kwargs)
    operands = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if not isinstance(out, torch.Tensor) or not out.is_floating_point() or any(bool(a.isnan().any()) for a in operands):
        return out
    return torch.where(out.isnan(), torch.zeros_like(out), out)


def _crashing(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """Compiled code that kills its interpreter when it runs (as an out-of-bounds read can)."""

    def run(*args: Any) -> Any:
        import os
        import signal

        os.kill(os.getpid(), signal.SIGSEGV)

    return run


def _hanging(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    def run(*args: Any) -> Any:
        import time

        time.sleep(3600)

    return run


def _raising(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    raise RuntimeError("pk_test_raise: this backend cannot compile anything")


BACKENDS = {
    "pk_test_one_ulp": _up,
    "pk_test_tail": _tail,
    "pk_test_jitter": _jitter,
    "pk_test_negative_zero": _negative_zero,
    "pk_test_int_off_by_one": _int_off_by_one,
    "pk_test_garbage_one": _garbage_one,
    "pk_test_to_f32": _to_f32,
}


#: Fault families the differential tester must reach (a blind campaign of at most 240 programs
#: catches each: tests/precisionkit/test_difftest_blind.py), family -> the backend that commits it.
FAMILIES = {
    "wrong argmin on bool/int8 (the last of tied optima)": "pk_test_argmin_last_tie",
    "a min that ignores the vector tail": "pk_test_min_without_tail",
    "overflow lost to fp32 intermediates": "pk_test_keep_fp32",
    "NaN after a huge scale swallowed": "pk_test_nan_to_zero",
    "the sign of zero flipped": "pk_test_negative_zero",
}


def first_catch(backend: str, start: int, budget: int = 240) -> tuple[int, Any] | None:
    """The first program of the differential tester's campaign from ``start`` that ``backend`` gets
    wrong (a ``mismatch``: a compile error is no catch) and its position, or None within ``budget``."""
    from precisionkit import difftest

    for k, (gen, seed) in enumerate(difftest.plan(budget, start=start), start=1):
        outcome = difftest.run(difftest.generate(seed, gen), backend, difftest.threads_for(gen, seed))
        if outcome.klass == "mismatch":
            return k, outcome
    return None


def register() -> list[str]:
    from torch._dynamo import list_backends, register_backend

    known = set(list_backends(exclude_tags=()))
    for name, fn in BACKENDS.items():
        if name not in known:
            register_backend(compiler_fn=_wrap(fn), name=name)
    graph_level = (
        ("pk_test_raise", _raising),
        ("pk_test_crash", _crashing),
        ("pk_test_hang", _hanging),
        ("pk_test_nan_swallowing_max", _nan_swallowing),
        ("pk_test_keep_fp32", _keep_fp32),
        ("pk_test_argmin_last_tie", _op_fault(_last_tie_index)),
        ("pk_test_min_without_tail", _op_fault(_min_without_tail)),
        ("pk_test_nan_to_zero", _op_fault(_nan_to_zero)),
    )
    for name, fn in graph_level:
        if name not in known:
            register_backend(compiler_fn=fn, name=name)
    return [*BACKENDS, *(name for name, _ in graph_level)]


#: What a reproducer file runs first to have these backends (in a fresh interpreter too).
SETUP = f"import sys\n\nsys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\nfrom repro_backends import register\n\nregister()\n"
