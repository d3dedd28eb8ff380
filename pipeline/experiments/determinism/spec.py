"""A, fused-path determinism: id, asset group and sizes per profile (the FFN's shape is S's pool)."""

from dataclasses import dataclass

from ...fusion_checks import ExpectedFusion

ID, GROUP = "A", "A_determinism"

#: Every round of every dtype runs one fused program: its row carries that program's fusion evidence; a row the
#: compiler did not fuse (``not_fused`` says why: it ran the graph in torch) is not judged as fused.
FUSION = (ExpectedFusion("determinism_summary", names=("round", "dtype"), not_run="not_fused"),)


@dataclass(frozen=True)
class DeterminismSizes:
    runs: int  # runs per round
    #: Whether the cold-start rounds run (fresh interpreters with an empty compiler cache): about 15 s
    #: each whatever the size, so the smoke profile leaves them out and its cold-start claim is inconclusive.
    cold_start: bool
    #: Runs per round of the fp32 row where it differs from ``runs`` (None: the same). fp32 is an extra
    #: row beside the seed's fp16 headline, and twice the bytes of a 16-bit run.
    fp32_runs: int | None = None
    #: Runs per dtype of the cold-start round where fewer than round 1's (None: the same). Round 1 measures
    #: run-to-run determinism; the cold round asks whether a fresh process recompiles to the same code and the
    #: same bits, which its first run answers and its further runs only repeat.
    cold_runs: int | None = None

    def runs_for(self, dtype: str) -> int:
        """Runs per round of ``dtype``."""
        return self.fp32_runs if dtype == "float32" and self.fp32_runs is not None else self.runs

    def runs_by_dtype(self, dtypes: tuple[str, ...]) -> dict[str, int]:
        """Runs per round of each of ``dtypes``."""
        return {d: self.runs_for(d) for d in dtypes}

    def cold_runs_for(self, dtype: str) -> int:
        """Runs of ``dtype`` in the cold-start round."""
        runs = self.runs_for(dtype)
        return runs if self.cold_runs is None else min(runs, self.cold_runs)

    def cold_runs_by_dtype(self, dtypes: tuple[str, ...]) -> dict[str, int]:
        """Runs per dtype of the cold-start round."""
        return {d: self.cold_runs_for(d) for d in dtypes}


SIZES = {
    "smoke": DeterminismSizes(runs=5, cold_start=False),
    # 100 runs per dtype: each fp16/bf16 run of the FFN costs about 0.25 s where 16-bit matmul has no native
    # instructions, and a nondeterministic kernel shows within a few runs (the planted one on every call). The
    # cold round runs 25, as many as the thread-count round beside it: A took 124.9 to 131.3 s with 100 there
    # (the cold round 68 to 71 s of it) and 94.1 s with 25 (34.3 s), cold, on the slow 16-bit path of an idle
    # AVX2-only 2-core CPU (benchmark: S's FFN pool and A alone, 2026-11-28).
    "default": DeterminismSizes(runs=100, cold_start=True, cold_runs=25),
    # A GPU run within about ten minutes (estimated by benchmarks/gpu_budget.py, not timed): the 16-bit rows
    # at the seed's 1000 runs (each 2.2 TFLOP, a few ms at the datasheet peak, compared with the first output
    # on the device), the fp32 extra row at 100.
    "gpu": DeterminismSizes(runs=1000, cold_start=True, fp32_runs=100),
    "seed": DeterminismSizes(runs=1000, cold_start=True),
}
