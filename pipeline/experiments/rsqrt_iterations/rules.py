"""C3's method and statements: what path B is (the plan's fallback), what the search for a framework
switch found, and where the error stops shrinking with the iteration count, in words, from the
stored tables. Shared by the assets and the report page (no Dagster definitions here).
"""

import polars as pl

#: What the plan's path B is here: its fallback, since the framework has no iteration knob.
METHOD = (
    "plan fallback: framework implementation (path A) vs a same-semantics implementation with a controlled "
    "iteration count (path B); the framework exposes no iteration-count switch"
)
#: Switches found but not run in the pipeline's process, and why. GCC links crtfastmath.o into a
#: shared object built with -funsafe-math-optimizations; loading it sets flush-to-zero and
#: denormals-are-zero for the whole process, which would change every later experiment's subnormals.
NOT_RUN_KNOBS = {"cpp.enable_unsafe_math_opt_flag": "loading its kernel would set flush-to-zero for the whole process"}
#: Words an iteration-count or approximate-math option of Inductor would carry in its name.
KNOB_PATTERN = r"rsqrt|newton|iteration|recip|approx|fast_math|unsafe_math|division|contract"


def knob_statement(knobs: pl.DataFrame, table: pl.DataFrame) -> str:
    """What the search found and what the approximate-math switches did, in words, from the tables."""
    iteration = knobs.filter(pl.col("names_an_iteration_count"))["option"].to_list()
    parts = [
        f"Inductor's configuration has {knobs.height} option(s) matching '{KNOB_PATTERN}'"
        + (f" ({', '.join(knobs['option'].to_list())})" if knobs.height else "")
        + (
            f"; {len(iteration)} name an iteration count ({', '.join(iteration)})"
            if iteration
            else "; none names an iteration count or Newton step, so path B uses the plan's fallback"
        )
        + "".join(f"; {k} not run: {why}" for k, why in NOT_RUN_KNOBS.items() if k in knobs["option"].to_list())
    ]
    for r in table.filter(pl.col("path").str.starts_with("A_fused[")).iter_rows(named=True):
        parts.append(
            f"{r['path']}: generated source {'changed' if r['knob_code_changed'] else 'unchanged'}, compiled kernel "
            f"{'changed' if r.get('knob_artifact_changed') else 'unchanged'}, "
            f"output {'differs from' if r['knob_output_changed'] else 'bit-identical to'} A_fused (max {r['ulp_max']:.4g} ULP vs fp64)"
        )
    return "; ".join(parts) + "."


def floor_statement(table: pl.DataFrame, op: str) -> str:
    """Per compute dtype, the iteration count from which the fp16 result stops changing and the
    pre-rounding error at each N, filled from the table (no hand-written conclusion)."""
    parts = []
    for compute in ("float32", "float16"):
        b = table.filter(pl.col("compute_dtype") == compute).sort("iterations")
        if b.height == 0:
            continue
        maxes, means = b["ulp_max"].to_list(), b["ulp_mean"].to_list()
        its = b["iterations"].to_list()
        stop = next(
            (
                its[i]
                for i in range(len(its))
                if all(maxes[j] == maxes[i] and means[j] == means[i] for j in range(i, len(its)))
            ),
            its[-1],
        )
        pre = ", ".join(f"N={n}: {v:.3g}" for n, v in zip(its, b["pre_round_rel_max"].to_list(), strict=False))
        a = table.filter(pl.col("path") == "A_eager").row(0, named=True)
        same_as_a = b.filter(pl.col("iterations") == stop)["vs_A_eager_equal_fraction"][0]
        parts.append(
            f"{op}, {compute} arithmetic: pre-rounding max relative error {pre}; the fp16 result's max/mean ULP error stops "
            f"changing from N={stop} (max {maxes[its.index(stop)]:.4g}, mean {means[its.index(stop)]:.4g} ULP; framework "
            f"path A: max {a['ulp_max']:.4g}, mean {a['ulp_mean']:.4g}), where {100 * same_as_a:.2f}% of elements equal path A's"
        )
    return ". ".join(parts) + "."


# --- the framework's rounding: the tie-flip margin ---------------------------------------------------

#: fp32 ULPs of error a healthy path may carry into its single final rounding to fp16. A correctly rounded
#: fp32 square root or division carries 1/2; 1 / sqrt as two correctly rounded fp32 ops about 1.5; CUDA's
#: approximate rsqrt (relative 2^-22.9) at most 2^(24 - 22.9) = 2.14. Four leaves room above all of them.
FP32_ERROR_ULPS = 4
#: fp32 ULPs in one fp16 ULP within a binade: 2^(24 - 11) (24 and 11 significand bits).
FP32_ULPS_PER_FP16_ULP = 2**13
#: Largest share of numeric results that may miss the correctly rounded fp16 value (tie flips): 2^-10.
TIE_FLIP_MARGIN = 2 * FP32_ERROR_ULPS / FP32_ULPS_PER_FP16_ULP
#: Family-wise level of the test of the share against the margin (Holm over op x path).
ROUNDING_ALPHA = 0.01

TIE_FLIP_DERIVATION = (
    "A path that computes in fp32 with an error of at most e fp32 ULPs and then rounds once to fp16 returns the "
    "correctly rounded fp16 value unless the exact result lies within e fp32 ULPs of an fp16 rounding midpoint: on "
    "the far side of the midpoint its fp32 value rounds the other way (a tie flip). One fp16 ULP spans 2^13 fp32 "
    "ULPs, so the window is 2e of every 2^13 fp32 ULPs, and with the exact results spread smoothly over the fp16 "
    f"grid (rsqrt and quotients of continuous inputs are) at most a share 2e / 2^13 of them flips. e = "
    f"{FP32_ERROR_ULPS} covers every healthy implementation in use (a correctly rounded fp32 division or square "
    "root: 1/2, which makes the result correctly rounded outright since fp32 has 2 * 11 + 2 bits; 1/sqrt in two "
    "fp32 ops: about 1.5; CUDA's approximate rsqrt, relative error 2^-22.9: 2.14), so the margin is "
    f"{TIE_FLIP_MARGIN:.6g} = 2^-10 (about 0.1 %) of the numeric results. By the same count an approximation with "
    "a relative error of 1e-5 (about 170 fp32 ULPs) misses on up to 2 * 170 / 2^13, about 4 %. Measured on a "
    "1024 x 1024 U(0.01, 100) fp16 input on a CPU: torch.rsqrt 0 %; the bit-trick estimate refined by 1, 2 and 3 "
    "fp32 Newton steps 75 %, 0.19 % and 0 %; a bf16-precision seed with one fp32 Newton step 0.74 %"
)
