"""Run the corpus: each case eagerly and under ``torch.compile(backend="inductor")``, and compare.

Usage (from the repository root)::

    python -m tests.fuzz_corpus.check            # every case
    python -m tests.fuzz_corpus.check --ids a,b  # only the named cases
    python -m tests.fuzz_corpus.check --cuda     # the CUDA corpus (needs a GPU)

Prints one line per case (id, issue, status, summary) and, last, how many cases reproduce under
the torch version in use. A case "reproduces" when compiled and eager results differ under the
case's rule; an exception in either run is an "error", never a reproduction.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

import torch

from tests.fuzz_corpus.cases import BY_ID, CASES, CorpusCase

REPRODUCES = "reproduces"
CLEAN = "clean"


def _flatten(value: Any, label: str) -> list[tuple[str, Any]]:
    """Leaves of a (possibly nested) output, each with a printable label."""
    if isinstance(value, (tuple, list)):
        leaves: list[tuple[str, Any]] = []
        for i, item in enumerate(value):
            leaves += _flatten(item, f"{label}[{i}]")
        return leaves
    return [(label, value)]


def _as_tensor(value: Any) -> Any:
    if isinstance(value, (bool, int, float)):
        return torch.tensor(value)
    return value


def _widen(t: torch.Tensor) -> torch.Tensor:
    """float16/bfloat16 as float32 (exact), so every comparison op is available."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _differing(eager: torch.Tensor, compiled: torch.Tensor, case: CorpusCase) -> torch.Tensor:
    """Boolean mask of the elements that differ under the case's rule (same shape and dtype)."""
    if eager.is_complex():
        eager, compiled = torch.view_as_real(eager), torch.view_as_real(compiled)
    if not eager.is_floating_point():
        return eager != compiled
    e, c = _widen(eager), _widen(compiled)
    e_nan, c_nan = torch.isnan(e), torch.isnan(c)
    if case.compare == "bitwise":
        numbers = ~e_nan & ~c_nan
        value_differs = (e != c) | (torch.signbit(e) != torch.signbit(c))
        return (e_nan != c_nan) | (numbers & value_differs)
    return ~torch.isclose(e, c, rtol=case.rtol, atol=case.atol, equal_nan=True)


def _max_abs_diff(eager: torch.Tensor, compiled: torch.Tensor, mask: torch.Tensor) -> float | None:
    if eager.is_complex() or not bool(mask.any()):
        return None
    e, c = eager[mask].double(), compiled[mask].double()
    finite = torch.isfinite(e) & torch.isfinite(c)
    if not bool(finite.any()):
        return None
    return float((e[finite] - c[finite]).abs().max())


def _compare_leaf(label: str, eager: Any, compiled: Any, case: CorpusCase) -> str | None:
    """None when the two leaves agree, else a short description of the difference."""
    eager, compiled = _as_tensor(eager), _as_tensor(compiled)
    if not isinstance(eager, torch.Tensor) or not isinstance(compiled, torch.Tensor):
        return None if eager == compiled else f"{label}: {eager!r} vs {compiled!r}"
    if eager.shape != compiled.shape:
        return f"{label}: shape {tuple(eager.shape)} vs {tuple(compiled.shape)}"
    if eager.dtype != compiled.dtype:
        return f"{label}: dtype {eager.dtype} vs {compiled.dtype}"
    mask = _differing(eager.detach().cpu(), compiled.detach().cpu(), case)
    if mask.dim() > eager.dim():  # complex compared as (real, imag) pairs
        mask = mask.any(dim=-1)
    count = int(mask.sum())
    if count == 0:
        return None
    detail = f"{label}: {count}/{eager.numel()} differ"
    diff = _max_abs_diff(eager.detach().cpu(), compiled.detach().cpu(), mask)
    if diff:
        detail += f", max|diff|={diff:.3g}"
    elif eager.is_floating_point():
        detail += " (NaN/inf/sign only)"
    return detail


def _compare(case: CorpusCase, eager: list[tuple[str, Any]], compiled: list[tuple[str, Any]]) -> list[str]:
    if [label for label, _ in eager] != [label for label, _ in compiled]:
        return [f"output structure {len(eager)} vs {len(compiled)} leaves"]
    problems = []
    for (label, e), (_, c) in zip(eager, compiled, strict=True):
        problem = _compare_leaf(label, e, c, case)
        if problem is not None:
            problems.append(problem)
    return problems


def _run(fn: Any, case: CorpusCase) -> list[tuple[str, Any]]:
    """Run fn on freshly built inputs (graphs may mutate them) and flatten its outputs.

    Only outputs are compared, as in the reports: a graph whose mutation matters returns the
    mutated tensor. Inputs updated in place by libm calls (tan_, sin_) may differ by an ulp
    between eager and compiled, which is noise, not the bug a case pins down.
    """
    return _flatten(fn(*case.make_inputs()), "out")


def _error(phase: str, exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    message = lines[0] if lines else ""
    return f"error: {phase} raised {type(exc).__name__}: {message}"[:200]


def run_case(case: CorpusCase) -> tuple[str, str]:
    """Run one case eagerly and compiled; return (status, detail).

    status is "reproduces", "clean" or "error: ..." (detail then repeats the message).
    """
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            eager = _run(case.fn, case)
        except Exception as exc:  # noqa: BLE001 - any eager failure makes the case unusable, not a crash
            status = _error("eager", exc)
            return status, status
        try:
            compiled = _run(torch.compile(case.fn, backend="inductor"), case)
        except Exception as exc:  # noqa: BLE001 - a compile/run failure is reported as "error"
            status = _error("compiled", exc)
            return status, status
        finally:
            torch._dynamo.reset()
    problems = _compare(case, eager, compiled)
    if not problems:
        return CLEAN, "eager and compiled agree"
    detail = "; ".join(problems)
    return REPRODUCES, detail if len(detail) <= 160 else detail[:157] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", help="comma-separated case ids (default: all)")
    parser.add_argument("--cuda", action="store_true", help="the CUDA corpus (cuda_cases.py; needs a GPU)")
    args = parser.parse_args(argv)
    if args.cuda:
        from tests.fuzz_corpus.cuda_cases import CUDA_CASES

        if not torch.cuda.is_available():
            parser.error("the CUDA corpus needs a GPU; torch reports none")
        cases = list(CUDA_CASES)
    elif args.ids:
        wanted = [name.strip() for name in args.ids.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in BY_ID]
        if unknown:
            parser.error(f"unknown case ids: {', '.join(unknown)}")
        cases = [BY_ID[name] for name in wanted]
    else:
        cases = list(CASES)

    reproduced = errors = 0
    width = max(len(case.id) for case in cases)
    for case in cases:
        status, detail = run_case(case)
        if status == REPRODUCES:
            reproduced += 1
        elif status != CLEAN:
            errors += 1
        shown = detail if status in (REPRODUCES, CLEAN) else ""
        print(f"{case.id:<{width}}  #{case.issue:<6}  {status:<10}  {shown}".rstrip(), flush=True)
    print(f"torch {torch.__version__}: {reproduced}/{len(cases)} cases reproduce, {errors} error(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
