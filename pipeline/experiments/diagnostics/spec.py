"""Diagnostics (divergence locator, graph fuzzer, measured tolerances): id, asset group and sizes.
The locator runs E's model (``training.spec.SIZES``)."""

from dataclasses import dataclass

ID, GROUP = "Diagnostics", "diagnostics"


@dataclass(frozen=True)
class DiagnosticsSizes:
    fuzz_graphs: int  # random graphs of the differential fuzzer (one compile each)


SIZES = {
    "smoke": DiagnosticsSizes(fuzz_graphs=6),
    "default": DiagnosticsSizes(fuzz_graphs=120),
    "seed": DiagnosticsSizes(fuzz_graphs=1000),
}
