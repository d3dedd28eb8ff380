"""Which program a (generator, seed) is, and which programs a campaign runs."""

from __future__ import annotations

import random

import torch

from ..repro import Case
from .gpu import _gpu
from .program import FLOAT_DTYPES, GENERATORS, STRUCTURED, Program
from .structured import _attention, _gelu, _norm, _reduction
from .typed import _typed

_BUILD = {
    "typed": _typed,
    "attention": _attention,
    "norm": _norm,
    "gelu": _gelu,
    "reduction": _reduction,
    "gpu": _gpu,
}


def generate(seed: int, generator: str = "typed", dtype: str | None = None, device: str = "cpu") -> Case:
    """The program of ``seed`` from ``generator`` on ``device``: the same arguments always give the
    same case, and the device changes only where it runs (and, for the ``gpu`` generator, which
    Inductor options may be drawn: the Triton-only ones on CUDA alone)."""
    if generator == "opinfo":  # its own dtypes (ints and bool too); op_db is imported on first use
        from .opinfo import generate_opinfo

        return generate_opinfo(seed, dtype, device)
    if generator not in _BUILD:
        raise ValueError(f"generator must be one of {', '.join(GENERATORS)}, got {generator!r}")
    rng = random.Random(f"{generator}:{seed}")
    dtype = dtype or rng.choice(FLOAT_DTYPES)
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(FLOAT_DTYPES)}, got {dtype!r}")
    try:
        torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be a torch device string, got {device!r}") from None
    case = _BUILD[generator](Program(seed, rng, dtype, device=device))
    return case.with_(id=f"{generator}-{seed}-{dtype}")


#: Share of a CUDA campaign drawn from the ``gpu`` generator: a third, so the Triton-specific
#: forms (reductions, masks, matmul epilogues, scans, atomics, layouts) are the largest single
#: group while the CPU generators, whose classes Triton can have too, keep two thirds.
GPU_SHARE = 3


def plan(programs: int, start: int = 0, device: str = "cpu") -> list[tuple[str, int]]:
    """(generator, seed) of a campaign of ``programs``: an eighth for each structured generator,
    the rest typed, seeds counting from ``start``. On CUDA a third of the programs (1 / ``GPU_SHARE``)
    come from the ``gpu`` generator first and the rest are split as on the CPU; on any other device
    the plan is the CPU one."""
    if programs < 0:
        raise ValueError(f"programs must be >= 0, got {programs}")
    gpu = programs // GPU_SHARE if torch.device(device).type == "cuda" else 0
    rest = programs - gpu
    structured = rest // 8
    out = [("gpu", s) for s in range(start, start + gpu)]
    out += [("typed", s) for s in range(start, start + rest - len(STRUCTURED) * structured)]
    for gen in STRUCTURED:
        out += [(gen, s) for s in range(start, start + structured)]
    return out


def threads_for(generator: str, seed: int) -> int | None:
    """Long reductions run on one thread for odd seeds and on all of them for even ones (partial
    sums per thread are where accumulation defects differ); other programs use the default."""
    return (1 if seed % 2 else None) if generator == "reduction" else None
