"""D, pure data movement: id, asset group, the activation shapes per profile (odd sizes included) and
the compiles each profile declares.

One fused graph is compiled per planned combination (``assets.compile_plan``): the six pure subgraphs x three
dtypes x each shape x two layouts, plus the three counterexamples x three dtypes on the last shape;
``compiles`` states that count per profile (a test checks it against the plan and against the smoke
run's fused calls; ``benchmarks/gpu_budget.py`` reads it). Localizing a NaN payload op by op costs a
few compiles more, at most ``assets.MAX_LOCALIZATIONS`` rows' worth, and is not counted here.

Inputs are drawn once per (dtype, shape, layout, salted or not) on the run's device: 6 x shapes draws for
the pure graphs and 3 for the counterexamples, 21 at the seed's three shapes.
"""

from dataclasses import dataclass

from ...fusion_checks import ExpectedFusion

ID, GROUP = "D", "D_data_movement"

#: Every row of the check table is one compiled combination (subgraph, dtype, shape, layout); a row the compiler
#: did not fuse (``not_fused`` says why) is measured but not judged as fused.
FUSION = (
    ExpectedFusion("data_movement_check_table", names=("subgraph", "dtype", "shape", "layout"), not_run="not_fused"),
)


@dataclass(frozen=True)
class MovementSizes:
    shapes: tuple[tuple[int, ...], ...]  # activation shapes of the data-movement graphs
    compiles: int  # fused graphs compiled: 6 x 3 x len(shapes) x 2 + 3 x 3
    #: On a CPU, compile the graphs on a worker process per core (``compile_pool.pool_size``'s
    #: ``compile_bound``): D's tensors are small enough that its cost is Dynamo's and Inductor's Python on one
    #: core. Off where D runs beside other work (the tests' and the planted-bug matrix's smoke runs).
    compile_bound: bool = False


SIZES = {
    # One shape, odd in every dim (a vector loop and its tail in each kernel): the test suite and the planted-bug
    # matrix run D at this size many times, and each compile is about a second of Inductor and the C++ compiler on
    # a 2-core CPU; the power-of-two shape beside it doubled that (81 compiles against 45). Kernels at
    # power-of-two sizes are left to the default and larger profiles, which keep both kinds of shape.
    "smoke": MovementSizes(shapes=((1, 7, 24),), compiles=45),
    # Two shapes (a power-of-two one and one odd in every dim): each shape is 36 compiles, about a minute. On two
    # processes: the check table took 138.6 s in one and 81.5 s in two, cold, on the slow 16-bit path of an idle
    # AVX2-only 2-core CPU (benchmark: the table alone, FUSION_COMPILE_WORKERS=1 and 2, 2026-11-28).
    "default": MovementSizes(shapes=((4, 128, 256), (2, 77, 200)), compiles=81, compile_bound=True),
    # The seed's three shapes, as issue 38 asks of the gpu profile: the compile pool spreads the 117 graphs.
    "gpu": MovementSizes(shapes=((8, 2048, 4096), (4, 1023, 768), (1, 4097, 128)), compiles=117),
    "seed": MovementSizes(shapes=((8, 2048, 4096), (4, 1023, 768), (1, 4097, 128)), compiles=117),
}


def repro_id(subgraph: str, dtype: str, shape: str, layout: str) -> str:
    """The reproducer id of one row of D's check table (``shape`` as the table writes it, ``BxSxH``):
    D declares it; the reproducers' instrument and D's page both read it from here."""
    return f"d-{subgraph}-{dtype}-{shape}-{layout}"
