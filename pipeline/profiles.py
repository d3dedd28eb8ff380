"""Run profiles: one code path, three sizes. Only shapes and counts differ between them.

* ``smoke``: the whole graph in well under a minute (tests);
* ``default``: the seed document's methods at reduced sizes for a 2-core CPU (minutes);
* ``seed``: the seed document's exact shapes, dtypes and counts (meant for a GPU).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    # Task A: the FFN first half's input [batch, seq, hidden] (its weight projects hidden -> 4 * hidden)
    # and the runs per round.
    ffn_shape: tuple[int, int, int]
    determinism_runs: int
    # Task B: input sets per chain and distribution, and the per-set sizes of the chains.
    chain_sets: int
    rows: int  # rows of the 2-D elementwise / normalization inputs
    width: int  # row length (normalized / reduced dimension)
    attention: tuple[int, int, int]  # heads, sequence, head dim
    # Task D: activation shapes for the data-movement graphs (odd sizes included).
    movement_shapes: tuple[tuple[int, ...], ...]
    # Tasks C1 / C3: [rows, cols]; C2: row length, pool rows, runs per version.
    c1_shape: tuple[int, int] = (1024, 1024)
    c2_length: int = 16384
    c2_pool_rows: int = 256
    c2_runs: int = 1000
    c3_shape: tuple[int, int] = (1024, 1024)
    # Diagnostics: random graphs of the differential fuzzer (one Inductor compile each).
    fuzz_graphs: int = 200
    # Task E: GPT-2 style model and schedule.
    train: dict[str, int] = field(default_factory=dict)

    def sizes(self) -> dict[str, Any]:
        """Every size of the profile, flat, for asset metadata."""
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if isinstance(value, dict):
                out.update({f"{key}.{k}": v for k, v in value.items()})
            elif key != "description":
                out[key] = str(value) if isinstance(value, tuple) else value
        return out


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        name="smoke",
        description="tiny sizes for the test suite: every asset in seconds",
        ffn_shape=(2, 8, 32),
        determinism_runs=5,
        chain_sets=6,
        rows=4,
        width=32,
        attention=(2, 8, 16),
        movement_shapes=((2, 8, 16), (1, 7, 24)),
        c1_shape=(64, 64),
        c2_length=4096,
        c2_pool_rows=8,
        c2_runs=5,
        c3_shape=(64, 64),
        fuzz_graphs=6,
        train=dict(layers=1, heads=2, width=32, context=32, batch=4, steps=20, eval_every=5, eval_batches=2, fp32_control=0),
    ),
    "default": Profile(
        name="default",
        description="the seed's methods at sizes a 2-core CPU finishes in minutes",
        # [4, 256, 512] -> 2048 wide: about 45 ms per fp16 run on 2 CPU cores, so 3 dtypes x (300 + 300
        # + 25) runs stay near 1.5 minutes; the seed's [8, 2048, 4096] -> 16384 is ~1000x the work.
        ffn_shape=(4, 256, 512),
        determinism_runs=300,
        chain_sets=1000,
        rows=16,
        width=128,
        attention=(2, 32, 32),
        movement_shapes=((4, 128, 256), (2, 77, 200), (1, 333, 96)),
        c1_shape=(1024, 1024),
        c2_length=16384,
        c2_pool_rows=256,
        c2_runs=200,
        c3_shape=(1024, 1024),
        fuzz_graphs=200,
        train=dict(layers=2, heads=4, width=128, context=128, batch=8, steps=1000, eval_every=50, eval_batches=4, fp32_control=0),
    ),
    "seed": Profile(
        name="seed",
        description="the seed document's exact shapes and counts; meant for a GPU",
        ffn_shape=(8, 2048, 4096),
        determinism_runs=1000,
        chain_sets=1000,
        rows=64,
        width=1024,
        attention=(12, 128, 64),
        movement_shapes=((8, 2048, 4096), (4, 1023, 768), (1, 4097, 128)),
        c1_shape=(1024, 1024),
        c2_length=16384,
        c2_pool_rows=1024,
        c2_runs=1000,
        c3_shape=(1024, 1024),
        fuzz_graphs=1000,
        train=dict(layers=12, heads=12, width=768, context=1024, batch=8, steps=1000, eval_every=50, eval_batches=8, fp32_control=1),
    ),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; expected one of {', '.join(PROFILES)}") from None
