"""What an experiment asks of a compiler, in the words of its adapter (:mod:`precisionkit.backends`), never
in a compiler's own option names: the options that realize an intent (:data:`precisionkit.backends.INTENTS`:
one thread, faithful casts, a whole graph, a reduction's variants), merged over the run's own
(:func:`intent_options`, :func:`intent_variants`), or the "not applicable to <compiler>: <why>" a part of an
experiment then stores; and why a compiler itself left a fused path unfused (:func:`declined`: it ran part of
it in torch, fused none of it, or its partitioner left it to torch), which an experiment keeps as a labelled
row, never as a fused result.

A module of the core: experiments import it, and it imports nothing of the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: :data:`precisionkit.backends.WHOLE_GRAPH` (named here so reading this module imports no compiler code).
WHOLE_GRAPH_INTENT = "whole_graph"


def adapter_or_none(backend: str) -> Any:
    """The adapter that compiles with ``backend`` (None when none can be had here: an unknown name, or
    a compiler that cannot load)."""
    from precisionkit.backends import AdapterLoadError, MissingCompiler, adapter_for_backend

    try:
        return adapter_for_backend(backend)
    except (AdapterLoadError, MissingCompiler, ValueError):
        return None


def adapter_of(backend: str) -> Any:
    """The adapter that compiles with ``backend`` (a ValueError, a MissingCompiler or an AdapterLoadError
    for one that cannot be had here: a run has already checked its backend)."""
    from precisionkit.backends import adapter_for_backend

    return adapter_for_backend(backend)


def _title(adapter: Any) -> str:
    return str(adapter.title or adapter.name)


def intent_options(
    backend: str, base: Mapping[str, Any], name: str, device: Any = "cpu"
) -> tuple[dict[str, Any] | None, str]:
    """(options, "") where ``backend``'s compiler realizes intent ``name`` on ``device``: the intent's options
    merged over ``base`` (the run's options) the adapter's way; (None, "not applicable to <compiler>: <why>")
    where it has no way to."""
    adapter = adapter_of(backend)
    options = adapter.intent(name, str(device))
    if options is None:
        return None, f"not applicable to {_title(adapter)}: {adapter.why_not(name, str(device))}"
    return adapter.merge_options(dict(base), options), ""


def intent_variants(
    backend: str, base: Mapping[str, Any], name: str, device: Any = "cpu"
) -> tuple[dict[str, tuple[dict[str, Any], dict[str, Any]]] | None, str]:
    """(label -> (the variant's own options, those merged over ``base``), "") for variant intent ``name`` of
    ``backend``'s compiler on ``device``; (None, "not applicable to <compiler>: <why>") where it has none."""
    adapter = adapter_of(backend)
    variants = adapter.intent_variants(name, str(device))
    if variants is None:
        return None, f"not applicable to {_title(adapter)}: {adapter.why_not(name, str(device))}"
    return {label: (opts, adapter.merge_options(dict(base), opts)) for label, opts in variants.items()}, ""


def options_text(options: Mapping[str, Any]) -> str:
    """Compiler options as a label: ``k=v`` pairs (a flag set to True by its name alone), nested ones
    (OpenVINO's ``config``) and flag lists (IREE's ``flags``) spelled out.

    >>> options_text({"cpp.threads": 1, "emulate_precision_casts": True})
    'cpp.threads=1, emulate_precision_casts'
    >>> options_text({"config": {"INFERENCE_NUM_THREADS": "1"}}), options_text({"flags": ["--a=1", "--b"]})
    ('INFERENCE_NUM_THREADS=1', '--a=1 --b')
    """
    parts = []
    for key, value in options.items():
        if isinstance(value, Mapping):
            parts.append(options_text(value))
        elif isinstance(value, list | tuple):
            parts.append(" ".join(map(str, value)))
        else:
            parts.append(key if value is True else f"{key}={value}")
    return ", ".join(p for p in parts if p)


def declined(fn: Any) -> str | None:
    """Why the compiler itself did not fuse the fused function ``fn`` (a ``FusedFunction`` whose first call
    raised ``FusionError``): "not fused by <compiler>: <why>" where it ran part of the graph elsewhere after
    failing it (:meth:`~precisionkit.backends.base.BackendAdapter.fell_back`: OpenVINO runs a partition with a
    bfloat16 input in torch), compiled the graph without fusing any of it, or left every operation of it to
    torch by its partitioner's choice. None where the failure is no
    choice of the compiler's: nothing was compiled or captured at all (an adapter that runs eager), or the
    graph broke before it reached the compiler. Such a path is a finding about the compiler on that workload,
    labelled and never judged as fused; the others leave the run unable to measure fusion, and stay errors."""
    from precisionkit import FusionError

    capture = getattr(fn, "capture", None)
    if capture is None:
        return None
    try:
        evidence = fn.evidence
    except FusionError:  # never called: nothing compiled
        return None
    if not evidence.graph_count or evidence.graph_breaks:
        return None
    adapter = fn.adapter
    why = adapter.fell_back(capture) or (adapter.fusion_problem(capture) if capture.units else None)
    if why is None and not capture.units and capture.fallback_ops:
        # its partitioner left every operation to torch (OpenVINO leaves a graph of one operation there)
        ops = ", ".join(capture.fallback_ops[:4]) + (", ..." if len(capture.fallback_ops) > 4 else "")
        why = f"its partitioner left every operation of the graph to torch ({ops})"
    return f"not fused by {_title(adapter)}: {why}" if why else None


def whole_graph_options(backend: str, base: Mapping[str, Any], device: Any = "cpu") -> dict[str, Any]:
    """``base`` (a run's options) with the compiler told to compile every operation it is handed, a graph of
    one operation too (intent ``whole_graph``: OpenVINO's partitioner otherwise leaves such a graph to torch);
    ``base`` itself where the compiler has no such option (Inductor: it compiles every graph, ``{}``)."""
    options, _ = intent_options(backend, base, WHOLE_GRAPH_INTENT, device)
    return dict(base) if options is None else options


def compiler_title(backend: str) -> str:
    """The compiler's name for people: its adapter's title (``OpenVINO``), else the backend name."""
    adapter = adapter_or_none(backend)
    return str(getattr(adapter, "title", "") or backend)
