"""Byte-level training corpus for task E, built offline from CPython's own standard library.

The corpus is the concatenated source of a fixed, sorted list of pure-Python stdlib modules that
ship with every CPython 3.11 install. Nothing is downloaded; the bytes depend only on the Python
patch release, so the corpus is identified by its sha256 and size (recorded in asset metadata).
"""

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

#: Stdlib files (relative to the stdlib folder), concatenated in this order. Pure-Python modules
#: only: C-accelerated or vendor-stripped files (LICENSE.txt on some distributions) are left out.
CORPUS_FILES: tuple[str, ...] = (
    "abc.py",
    "argparse.py",
    "ast.py",
    "bisect.py",
    "calendar.py",
    "collections/__init__.py",
    "contextlib.py",
    "copy.py",
    "csv.py",
    "dataclasses.py",
    "datetime.py",
    "difflib.py",
    "enum.py",
    "fractions.py",
    "functools.py",
    "heapq.py",
    "inspect.py",
    "json/__init__.py",
    "json/decoder.py",
    "json/encoder.py",
    "logging/__init__.py",
    "pathlib.py",
    "pprint.py",
    "random.py",
    "shlex.py",
    "statistics.py",
    "string.py",
    "textwrap.py",
    "threading.py",
    "typing.py",
)

#: Share of the corpus (its tail) held out for evaluation.
EVAL_FRACTION = 0.1


@dataclass(frozen=True)
class Corpus:
    """Train and eval byte streams (uint8 tensors) plus the identity of the whole corpus."""

    train: torch.Tensor
    eval: torch.Tensor
    sha256: str
    n_bytes: int
    files: tuple[str, ...]

    def metadata(self) -> dict[str, object]:
        """Flat description for asset metadata."""
        return {
            "corpus_sha256": self.sha256,
            "corpus_bytes": self.n_bytes,
            "corpus_train_bytes": int(self.train.numel()),
            "corpus_eval_bytes": int(self.eval.numel()),
            "corpus_files": len(self.files),
        }


def corpus_bytes(files: tuple[str, ...] = CORPUS_FILES, stdlib: Path | None = None) -> bytes:
    """The raw corpus: each file's bytes, in the given order, separated by a form feed."""
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    missing = [f for f in files if not (root / f).is_file()]
    if missing:
        raise FileNotFoundError(f"corpus files missing from the stdlib at {root}: {', '.join(missing)}")
    return b"\f".join((root / f).read_bytes() for f in files)


def load_corpus(files: tuple[str, ...] = CORPUS_FILES, stdlib: Path | None = None) -> Corpus:
    """Build the corpus and split it deterministically: the last :data:`EVAL_FRACTION` is eval."""
    raw = corpus_bytes(files, stdlib)
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    cut = int(len(raw) * (1 - EVAL_FRACTION))
    return Corpus(
        train=data[:cut].clone(),
        eval=data[cut:].clone(),
        sha256=hashlib.sha256(raw).hexdigest(),
        n_bytes=len(raw),
        files=tuple(files),
    )
