"""The differential tester's program builder: inputs, source lines, the kind and shape of each
value and the features a program exercises, turned into a :class:`~precisionkit.repro.Case`."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ..repro import Case, Input

GENERATORS = ("typed", "attention", "norm", "gelu", "reduction", "gpu", "opinfo")
#: the structured generators a CPU campaign draws an eighth each of (:func:`~precisionkit.difftest.plan`)
STRUCTURED = ("attention", "norm", "gelu", "reduction")
#: ``crash``: the fused run killed the interpreter or never returned (only with :class:`Isolated`)
CLASSES = ("ok", "mismatch", "compile_error", "invalid", "crash")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
#: row lengths around the 8/16/32-lane vector widths and 16/32/64 tiles
_TAILS = (1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65)
_ROWS = (1, 2, 3, 4, 5, 8, 16)
#: constants across binades (also the values a bug's scalar must hit)
_CONSTS = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 1e-3, 1e3, 2.0**-20, 2.0**20, 0.1, 7.0)
#: divisors not exact in binary, whose quotients round onto integers
_DIVISORS = (0.1, -0.1, 0.2, 0.3, 0.7, 3.0, 7.0)


@dataclass
class Program:
    """A program under construction: inputs, source lines, and the kind and shape of each value."""

    seed: int
    rng: random.Random
    dtype: str
    inputs: list[Input] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    kinds: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    reduction: int = 1
    features: set[str] = field(default_factory=set)
    device: str = "cpu"
    options: dict[str, Any] = field(default_factory=dict)

    def input(self, kind: str, shape: tuple[int, ...], layout: str = "contiguous", values: str | None = None) -> str:
        name = f"{kind[0]}{len(self.inputs)}"
        dtype = {"f": self.dtype, "i": "int64", "b": "bool"}[kind[0]]
        values = values or {"f": "normal", "i": "int", "b": "bool"}[kind[0]]
        scale = {
            "normal": self.rng.choice((1.0, 1.0, 4.0, 1e-3, 300.0)),
            "edge": 1.0,
            "grid": self.rng.choice((1.0, 4.0)),
        }.get(values, 16.0)
        if values == "index":
            scale = float(shape[-1])
        seed = (self.seed * 1_000_003 + len(self.inputs) * 7919) % 2**31
        self.inputs.append(Input(name, tuple(shape), dtype, seed, layout, scale, values))
        self.kinds[name] = (kind[0], tuple(shape))
        if layout != "contiguous":
            self.features.add(f"{layout}_input")
        if values == "edge":
            self.features.add("special_values")
        if values == "grid":
            self.features.add("grid_values")
        return name

    def add(self, kind: str, shape: tuple[int, ...], expr: str, *features: str) -> str:
        name = f"v{len(self.lines)}"
        self.lines.append(f"    {name} = {expr}")
        self.kinds[name] = (kind, tuple(shape))
        self.features.update(features)
        return name

    def values(self, kind: str, shape: tuple[int, ...] | None = None) -> list[str]:
        return [n for n, (k, s) in self.kinds.items() if k == kind and (shape is None or s == shape)]

    def sinks(self, limit: int = 4) -> list[str]:
        """The latest ``limit`` values no later line reads: every result the program computed and
        did not consume, so a wrong dtype or a wrong value cannot be hidden by a later cast."""
        import re

        # a read is a later line defining a new value from it; an in-place write is not a read.
        # An input written in place is a result too (its new contents are what the program made).
        written = {
            i.name for i in self.inputs if re.search(rf"^\s+{i.name}(?:\[|\.\w+_\()", "\n".join(self.lines), re.M)
        }
        out = []
        for name in (n for n in self.kinds if n.startswith("v") or n in written):
            at = int(name[1:]) if name.startswith("v") else -1
            later = [m.group(1) for m in (re.match(r"\s+v\d+ = (.*)", line) for line in self.lines[at + 1 :]) if m]
            if not any(re.search(rf"\b{name}\b", rhs) for rhs in later):
                out.append(name)
        return out[-limit:]

    def case(self, output: list[str], generator: str) -> Case:
        args = ", ".join(i.name for i in self.inputs)
        outs = ", ".join(output)
        body = "\n".join(self.lines) if self.lines else "    pass"
        source = f"def graph({args}):\n{body}\n    return {outs}\n"
        return Case(
            f"{generator}-{self.seed}",
            source,
            tuple(self.inputs),
            rule="diff",
            title=f"difftest {generator} seed {self.seed} ({self.dtype})",
            origin=f"differential tester, generator {generator!r}",
            extra={"reduction": self.reduction, "features": sorted(self.features), "generator": generator},
            device=self.device,
            options=tuple(sorted(self.options.items())),
        )


def _layout(rng: random.Random) -> str:
    return rng.choice(("contiguous", "contiguous", "contiguous", "transposed", "broadcast", "offset", "strided"))
