"""The main document's sections whose claims the experiments give evidence for."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    anchor: str  # anchor on the main document (and on the local main-document page)
    label: str  # e.g. "§3.2"
    claim: str


SECTIONS = {
    "1.2-2": Section(
        "section-1-2-2",
        "§1.2 (2)",
        "The same arithmetic lowered to different instructions (tensor x scalar vs tensor x broadcast tensor) may differ in the last bits.",
    ),
    "1.2-3": Section(
        "section-1-2-3",
        "§1.2 (3)",
        "Floating-point addition is not associative: a different reduction tiling changes the last bits, within the error band of an fp64 reference.",
    ),
    "1.2-4": Section(
        "section-1-2-4",
        "§1.2 (4)",
        "Iterative approximations (rsqrt by Newton steps) differ in the last bits with their iteration count; more iterations, smaller error.",
    ),
    "2": Section(
        "section-2",
        "§2",
        "Pure data movement (transpose, slice, concat, split, broadcast) is bit-identical between fused and eager execution.",
    ),
    "3.2": Section(
        "section-3-2", "§3.2", "Fused execution's accumulated error is no worse than eager's, measured against fp64."
    ),
    "3.3": Section(
        "section-3-3",
        "§3.3",
        "With unchanged inputs and compilation, fused execution is bit-for-bit deterministic and its generated code is hash-stable across a cold start.",
    ),
    "6.1": Section(
        "section-6-1",
        "§6.1",
        "Where fusion is worse, fusion is switched off per operator type; counterexamples from experiments feed that switch list.",
    ),
}
