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
