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
    )
    for name, fn in graph_level:
        if name not in known:
            register_backend(compiler_fn=fn, name=name)
    return [*BACKENDS, *(name for name, _ in graph_level)]


#: What a reproducer file runs first to have these backends (in a fresh interpreter too).
SETUP = f"import sys\n\nsys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\nfrom repro_backends import register\n\nregister()\n"
