"""Regression (baseline drift and the planted-bug matrix): id, asset group and the matrix's sizes."""

from dataclasses import dataclass

ID, GROUP = "Regression", "regression"

#: The planted-bug backends (``planted_bugs.PLANTED_BUGS`` holds each one's fault; a test keeps the
#: two lists equal): offered to the settings by name, registered with torch.compile on demand.
PLANTED_BACKENDS = (
    "planted_drop_channel",
    "planted_wrong_axis",
    "planted_layout_swap",
    "planted_fp16_accumulation",
    "planted_off_by_one_ulp",
    "planted_fallback_to_eager",
    "planted_nondeterministic_reduction",
    "planted_long_reduction_bf16",
    "planted_contiguous_only",
    "planted_bf16_scratch",
    "planted_vector_tail",
    "planted_attention_mask_dropped",
    "planted_thread_partials_bf16",
)


#: Matrix runs at a time by default (the run's process and one worker; the config's
#: ``parallel_runs`` changes it, capped at one per CPU core).
PARALLEL_RUNS = 2


@dataclass(frozen=True)
class MatrixSizes:
    #: The bugs the matrix runs when its config names none (empty: every planted bug). Each bug is a
    #: full re-run of the experiments the matrix judges, so the smoke profile runs one bug per way of
    #: being caught.
    planted_bugs: tuple[str, ...]
    #: Healthy base seeds (its "no false alarm" claim needs 3 to be supported; the smoke profile runs
    #: one, so there that claim can be contradicted but not supported).
    healthy_seeds: int
    #: Each bug re-runs only the experiment that declares it (``Experiment.planted``: its claim is built to
    #: catch it), not all of them: the healthy seeds still run all, so a false alarm anywhere still shows.
    designed_only: bool = False


SIZES = {
    # caught by: the run's validity (no fusion), a determinism claim, a bit-exactness claim, an error claim
    "smoke": MatrixSizes(
        planted_bugs=(
            "planted_fallback_to_eager",
            "planted_nondeterministic_reduction",
            "planted_contiguous_only",
            "planted_layout_swap",
        ),
        healthy_seeds=1,
    ),
    # Every way of being caught and the bugs of the forms real code takes (make test-all runs all of them):
    # each bug is a smoke run of the judged experiments, about 25 s on two cores.
    "default": MatrixSizes(
        planted_bugs=(
            "planted_fallback_to_eager",
            "planted_nondeterministic_reduction",
            "planted_contiguous_only",
            "planted_layout_swap",
            "planted_bf16_scratch",
            "planted_long_reduction_bf16",
            "planted_off_by_one_ulp",
            "planted_attention_mask_dropped",
            "planted_thread_partials_bf16",
        ),
        healthy_seeds=3,
        # A bug's run of all three experiments took 2.5 to 117 s (the graph faults recompile every chain) and
        # the matrix 6 min 01 s of a 30-minute default report on the slow 16-bit path (healthy sweep, seed 3,
        # 2 threads, AVX2, 2026-11-27); the other two experiments only add which further checks a bug trips.
        # make test-all's full matrix (and the seed profile) still runs every bug through every experiment.
        designed_only=True,
    ),
    # The matrix is a self-test of the checks, not a measurement of the device: the gpu profile keeps it at
    # its smoke size (one bug per way of being caught, one healthy seed).
    "gpu": MatrixSizes(
        planted_bugs=(
            "planted_fallback_to_eager",
            "planted_nondeterministic_reduction",
            "planted_contiguous_only",
            "planted_layout_swap",
        ),
        healthy_seeds=1,
    ),
    "seed": MatrixSizes(planted_bugs=(), healthy_seeds=3),
}
