"""M's decision rule and the reference it is compared with, declared before any data.

The rule is B's, applied to a model's outputs: each *unit* is one row of an output (a token's
logits or hidden state, an image's pooled features; an output with fewer than
:data:`MIN_ROWS_AS_UNITS` rows is judged element by element), its error is the largest absolute
error against the fp64 re-execution in ULPs of the row's largest |reference| (scale-aware ULP,
sULP), and fused and eager are paired unit by unit on the same inputs. What a ULP distance cannot
see is judged element by element against the same fp64 re-execution with the differential
tester's rule (:mod:`.exact`): integer and bool outputs, and the class of a float element (NaN,
+-inf, the sign of a zero).

Read by M's assets, checks and report page; imports no asset code.
"""

from __future__ import annotations

from ...verdicts import Rule

MATERIALITY_SULP = 1.0
TAIL_QUANTILE = 0.99
CONFIDENCE = 0.99
BOOTSTRAP_RESAMPLES = 1999
#: Below this many paired units a P99 is an extrapolation: contradicted possible, supported not.
MIN_UNITS_FOR_SUPPORTED = 100
#: Fewest independent inputs (images or sequences) the tail test resamples: with one, every resample is the
#: sample itself and says nothing of another input; below this the test cannot judge the row.
MIN_INDEPENDENT_UNITS = 2
#: Outputs with fewer rows than this (an image batch's pooled features) are judged per element.
MIN_ROWS_AS_UNITS = 64
#: Per input batch, at most this many units are kept for the paired test (a deterministic stride
#: sample of the rows; every unit counts toward the non-finite and maximum figures).
MAX_UNITS_PER_OUTPUT = 4096

#: What ``torch._dynamo.utils.same`` is called with, as PyTorch's accuracy runner calls it: eager as
#: the reference, fused as the result, the fp64 run as ``fp64_ref``. ``tol`` is same()'s own default;
#: past ``allclose(atol=rtol=tol)`` it passes when RMSE(fused, fp64) <= multiplier x RMSE(eager, fp64)
#: (+ tol / 10), the multiplier 2 in fp32 and 3 in fp16 / bf16.
SAME_TOL = 1e-4

RULE = Rule(
    claim="M: on real architectures, fused inference error against an fp64 re-execution is no worse than eager's, "
    "per model x dtype",
    metric="per unit (an output row: a token's logits or hidden state; per element for outputs of fewer than "
    f"{MIN_ROWS_AS_UNITS} rows): max scale-aware ULP error against fp64, paired fused vs eager on the same inputs; "
    "statistic: P99 across units of fused minus P99 of eager; plus, element by element against fp64 (the "
    "differential tester's rule): integer or bool elements where fused differs from eager and fp64 does not side "
    "with fused, and float elements whose class (NaN, +-inf, +-0) differs from eager's where eager has fp64's class",
    decision=(
        "contradicted when any integer or bool element differs from eager's where fp64 does not side with fused (a "
        "tie fp64 breaks as fused did is right), when any float element's class (NaN, +-inf, the sign of a zero) "
        "differs from eager's where eager has fp64's (fused agreeing with fp64 against eager is right), or when the "
        f"bootstrap test rejects 'P99(fused) - P99(eager) <= {MATERIALITY_SULP:g}' "
        f"after Holm's adjustment over every model x dtype row (family-wise confidence {CONFIDENCE:g}); supported "
        f"when the row has at least {MIN_UNITS_FOR_SUPPORTED} units and the one-sided {CONFIDENCE:g} upper bound of "
        f"the difference is at most {MATERIALITY_SULP:g}, or, with no float unit, at least "
        f"{MIN_UNITS_FOR_SUPPORTED} integer or bool elements are judged and none is wrong; inconclusive otherwise"
    ),
    threshold=MATERIALITY_SULP,
    unit="scale-aware ULP (ULPs of the row's largest |fp64 reference|)",
    confidence=CONFIDENCE,
    sample_size=f"every batch of the profile, up to {MAX_UNITS_PER_OUTPUT} units per output and batch; "
    f"{BOOTSTRAP_RESAMPLES} paired bootstrap resamples of the independent inputs (an image or sequence brings all "
    "its units), raised where no resample comes within the margin until the p-value floor passes Holm over the "
    f"table's rows; supported needs >= {MIN_UNITS_FOR_SUPPORTED} units; the tail test cannot judge a row of fewer "
    f"than {MIN_INDEPENDENT_UNITS} independent inputs",
    derivation="As B's: one ULP at the data's scale is the smallest change one extra rounding makes, so a P99 shift "
    "below it is not material; pairing on the same inputs removes input-to-input variation. The rows of one image "
    "or sequence share its input and are correlated, so the bootstrap resamples inputs, not units: resampling "
    "units would make the interval as narrow as if every unit were a new input. Holm keeps the "
    "healthy backend's chance of any false 'contradicted' over the whole table at most 1 - confidence. The fp64 "
    "reference is the same module with its weights upcast exactly, so weight rounding is not counted.",
)


def same_statement() -> str:
    return (
        "`torch._dynamo.utils.same(eager, fused, fp64_ref=fp64, tol=1e-4)`, as PyTorch's dynamo benchmarks judge "
        "accuracy: allclose at tol, else RMSE(fused, fp64) at most 2x (fp32) or 3x (fp16, bf16) RMSE(eager, fp64). "
        "It looks at the whole output at once, so a fault confined to a few rows or to small elements can hide in "
        "the RMSE; M's rule looks at the tail of per-row errors instead."
    )
