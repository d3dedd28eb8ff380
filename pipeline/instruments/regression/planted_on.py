"""The planted bugs around another compiler: each fault wraps an adapter's own ``torch.compile`` backend
instead of Inductor, so the matrix asks of OpenVINO (or any adapter) what it asks of Inductor.

A planted run on a compiler other than Inductor is spelled ``<bug>@<adapter>`` (``planted_drop_channel@openvino``).
It runs with the adapter's name as its backend, so the fused path compiles, captures its evidence and judges
fusion through that adapter; inside :func:`planted_on` the backend the adapter compiles with
(``adapter.dynamo_backend``, looked up by :meth:`~precisionkit.backends.base.BackendAdapter.compiler`) is the
planted fault around the adapter's original backend (:func:`.planted_faults.compiling_with`), options included,
through precisionkit's :func:`~precisionkit.backends.wrapped_backend`.

Faults that are FX rewrites of the ATen graph Inductor lowers are not applicable elsewhere
(:func:`not_applicable`): they were built against Inductor's lowering.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .planted_bugs import PLANTED_BUGS
from .planted_faults import compiling_with

INDUCTOR = "inductor"
SEPARATOR = "@"

#: Why a graph-rewrite fault does not apply to another compiler.
GRAPH_REWRITE_ELSEWHERE = (
    "an FX rewrite of the ATen graph that Inductor lowers, built against Inductor's lowering (its mantissa "
    "rounding is int32 bit arithmetic because Inductor elides an fp32->fp16->fp32 cast pair); another "
    "compiler is handed a graph it did not trace, so the fault would not be the one planted"
)


def not_applicable(bug: str, compiler: str) -> str | None:
    """Why planted bug ``bug`` does not apply to ``compiler`` ("not applicable to <compiler>: <why>"), or
    None when it does (every bug applies to Inductor)."""
    if bug not in PLANTED_BUGS:
        raise ValueError(f"unknown planted bug {bug!r}; known: {', '.join(PLANTED_BUGS)}")
    if compiler == INDUCTOR or not PLANTED_BUGS[bug].rewrites_graph:
        return None
    return f"not applicable to {compiler}: {GRAPH_REWRITE_ELSEWHERE}"


def planted_name(bug: str, compiler: str) -> str:
    """The backend a matrix run of ``bug`` on ``compiler`` names: the bug itself on Inductor (a registered
    ``torch.compile`` backend), ``<bug>@<compiler>`` elsewhere."""
    return bug if compiler == INDUCTOR else f"{bug}{SEPARATOR}{compiler}"


def split_planted(backend: str) -> tuple[str, str] | None:
    """``(bug, compiler)`` of a planted run's backend name on a compiler other than Inductor, else None."""
    bug, sep, compiler = backend.partition(SEPARATOR)
    if not sep:
        return None
    if bug not in PLANTED_BUGS or not compiler:
        raise ValueError(f"{backend!r} is no planted bug on a compiler: expected <planted bug>{SEPARATOR}<adapter>")
    return bug, compiler


def run_backend(backend: str) -> str:
    """The backend a matrix run's settings name: the adapter of a ``<bug>@<adapter>`` run, else ``backend``."""
    planted = split_planted(backend)
    return planted[1] if planted else backend


@contextlib.contextmanager
def planted_on(compiler: str, bug: str) -> Iterator[str]:
    """Inside the block, ``compiler``'s adapter compiles through planted bug ``bug`` wrapped around its own
    ``torch.compile`` backend (:func:`precisionkit.backends.wrapped_backend`); yields that backend's registered
    name. Dynamo's caches are reset on entry and exit, so no graph compiled one way is served the other."""
    from precisionkit.backends import wrapped_backend

    if (why := not_applicable(bug, compiler)) is not None:
        raise ValueError(f"planted bug {bug!r}: {why}")
    fault = PLANTED_BUGS[bug].compiler

    def planted(original: Callable[..., Any], gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        with compiling_with(original):
            return fault(gm, example_inputs)

    with wrapped_backend(compiler, planted) as name:
        yield name


def planting(backend: str) -> contextlib.AbstractContextManager[Any]:
    """:func:`planted_on` for a ``<bug>@<adapter>`` run's backend, a block that does nothing for any other."""
    planted = split_planted(backend)
    return planted_on(planted[1], planted[0]) if planted else contextlib.nullcontext()
