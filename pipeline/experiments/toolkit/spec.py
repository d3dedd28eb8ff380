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
    long_width: int  # row length of the long-row normalizations (one row per set)
    ffn_shape: tuple[int, int, int]  # A's FFN input [batch, seq, hidden] (its weight projects hidden -> 4 * hidden)


SIZES = {
    # 16 sets per row: B's one-sided sign tests can reject at smoke size (all 16 sets one way: p = 2^-16,
    # 0.0033 after Holm over B's 216 tests, below 1 - 0.99), so the planted-bug matrix, which runs B at
    # smoke size, exercises every B test; with 6 sets the smallest p was 1/64 and only the per-element
    # and gross-set tests could reject. The sets are tiny: compiles, not sets, are B's smoke cost.
    "smoke": PoolSizes(chain_sets=16, rows=4, width=32, attention=(2, 8, 16), long_width=512, ffn_shape=(2, 8, 32)),
    # [4, 128, 256] -> 1024 wide: an eighth of the matmul work of [4, 256, 512] per run (tokens x
    # width^2), which on a CPU with native 16-bit matmul took about 45 ms per fp16 run on 2 cores;
    # without it (AVX2 only) 16-bit matmul is ~60x slower, so A's run counts stay and the FFN shrinks.
    # Long rows: a layer norm or RMSNorm over 16,384 features is where per-lane and per-thread partial
    # sums of the mean and variance differ from eager's; one row per set keeps the fp64 references of
    # 1000 sets at 131 MB per distribution and dtype.
    "default": PoolSizes(
        chain_sets=1000, rows=16, width=128, attention=(2, 32, 32), long_width=16384, ffn_shape=(4, 128, 256)
    ),
    # B at the seed's shapes with its 1000 sets (the rule needs 459 or more to support its claim), A's FFN as in seed.
    "gpu": PoolSizes(
        chain_sets=1000, rows=64, width=1024, attention=(12, 128, 64), long_width=32768, ffn_shape=(8, 2048, 4096)
    ),
    "seed": PoolSizes(
        chain_sets=1000, rows=64, width=1024, attention=(12, 128, 64), long_width=32768, ffn_shape=(8, 2048, 4096)
    ),
}

#: The dtypes S stores each chain's pool in (B's, ``accumulated_error.rules.DTYPES_B``; a test holds them equal).
CHAIN_DTYPES = ("float16", "bfloat16")


def chain_elements(profile: str) -> dict[str, tuple[int, int, int]]:
    """Per chain: (input elements per set, output elements per set, distributions), from the workloads'
    own shapes (the output's through the meta device, as S's references take it)."""
    import math

    import torch

    from ...workloads import CHAINS, WORKLOADS

    pool = SIZES[profile]
    elements = {}
    for chain in CHAINS:
        w = WORKLOADS[chain]
        shapes = w.shapes(pool)
        out = w.fn(*(torch.empty(shapes[a], device="meta") for a in w.arg_names))
        elements[chain] = (sum(math.prod(shape) for shape in shapes.values()), out.numel(), len(w.distributions))
    return elements


def pool_bytes(profile: str) -> tuple[float, dict[str, tuple[float, float]]]:
    """Bytes S writes where it stores its pools: A's FFN pool (fp64, one set) and, per chain, (its inputs:
    every set in each of :data:`CHAIN_DTYPES`, its fp64 references per distribution and dtype)."""
    import math

    from ...costmodel import DTYPE_BYTES
    from ...workloads import WORKLOADS

    n = SIZES[profile].chain_sets
    in_bytes = sum(DTYPE_BYTES[d] for d in CHAIN_DTYPES)
    chains = {
        c: (float(n * dists * i * in_bytes), float(n * dists * o * len(CHAIN_DTYPES) * 8))
        for c, (i, o, dists) in chain_elements(profile).items()
    }
    ffn_shapes = WORKLOADS["ffn"].shapes(SIZES[profile])
    ffn = float(sum(math.prod(shape) for shape in ffn_shapes.values()) * 8)  # 1.07 GB at seed and gpu sizes
    return ffn, chains
