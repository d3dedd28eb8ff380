"""A compiler's error in words: one line, with where it was raised, as an experiment stores it when
the fused path's compiler fails (E's training step, a model of M), so the outcome names the compiler's
own error and frame, not ours (its name: :func:`pipeline.intents.compiler_title`). Core: experiments
may import it."""

from __future__ import annotations

import contextlib
import traceback
from pathlib import Path

#: Path parts that mark a frame as a compiler's own code (the innermost such frame is the origin).
COMPILER_PACKAGES = ("/iree/", "/openvino/")


def error_origin(exc: BaseException) -> str:
    """Where ``exc`` was raised: the innermost frame of a compiler package (``iree``, ``openvino``) on
    its traceback, else the innermost frame; ``file:line in function`` with site-packages cut off."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    compiler = [f for f in frames if any(part in f.filename for part in COMPILER_PACKAGES)]
    frame = (compiler or frames)[-1]
    path = frame.filename.split("site-packages/")[-1]
    with contextlib.suppress(ValueError):
        path = str(Path(path).relative_to(Path.cwd()))
    return f"{path}:{frame.lineno} in {frame.name}"


def error_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of ``exc``.

    >>> error_line(IndexError("list index out of range\\nmore"))
    'IndexError: list index out of range'
    """
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
