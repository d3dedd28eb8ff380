"""S, the precision toolkit's experiment: its id, asset group and the sizes of every input pool."""

from dataclasses import dataclass

ID, GROUP = "S", "S_toolkit"


@dataclass(frozen=True)
class PoolSizes:
    """Sizes of the seeded input pools S writes for the experiments downstream (B's chains, A's FFN)."""

    chain_sets: int  # input sets per chain and distribution
    rows: int  # rows of the 2-D elementwise / normalization inputs
    width: int  # row length (normalized / reduced dimension)
    attention: tuple[int, int, int]  # heads, sequence, head dim
    ffn_shape: tuple[int, int, int]  # A's FFN input [batch, seq, hidden] (its weight projects hidden -> 4 * hidden)


SIZES = {
    "smoke": PoolSizes(chain_sets=6, rows=4, width=32, attention=(2, 8, 16), ffn_shape=(2, 8, 32)),
    # [4, 128, 256] -> 1024 wide: an eighth of the matmul work of [4, 256, 512] per run (tokens x
    # width^2), which on a CPU with native 16-bit matmul took about 45 ms per fp16 run on 2 cores;
    # without it (AVX2 only) 16-bit matmul is ~60x slower, so A's run counts stay and the FFN shrinks.
    "default": PoolSizes(chain_sets=1000, rows=16, width=128, attention=(2, 32, 32), ffn_shape=(4, 128, 256)),
    "seed": PoolSizes(chain_sets=1000, rows=64, width=1024, attention=(12, 128, 64), ffn_shape=(8, 2048, 4096)),
}
