"""B, eager vs fused accumulated error: id, asset group and the compiles it declares. Its input sets are
S's pools (``toolkit.spec.SIZES``: sets per chain and distribution, row and attention shapes); its decision
rule is in ``rules.py``.

B compiles two fused graphs per chain and dtype in every profile: the fused path and the fused path with
emulated precision casts (the fp32 single-rounding prediction runs eagerly). ``COMPILED_PATHS`` names them;
a test checks the smoke run's fusion evidence against :func:`compiles`, and ``benchmarks/gpu_budget.py``
reads it."""

from ...fusion_checks import ExpectedFusion

ID, GROUP = "B", "B_accumulated_error"

#: The paths B compiles, once per chain and dtype each, in every profile.
COMPILED_PATHS = ("fused", "fused_emulate")

#: Each compiled path of each chain and dtype; a path this torch cannot compile is not run (its row says why,
#: in ``unavailable``), and a chain rewritten into one fused attention kernel generates none of its own.
FUSION = (
    ExpectedFusion(
        "accumulated_error_fusion_evidence",
        names=("chain", "dtype", "path"),
        fused_where=(("path", COMPILED_PATHS),),
        not_run="unavailable",
        library_calls_fuse=True,
    ),
)


def compiles(chains: int, dtypes: int) -> int:
    """Fused graphs B compiles for ``chains`` chains in ``dtypes`` dtypes (8 chains x 2 dtypes: 32)."""
    return chains * dtypes * len(COMPILED_PATHS)
