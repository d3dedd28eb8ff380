"""S's cost: its pools, one row per asset group (the cost model: :mod:`pipeline.costmodel`)."""

from __future__ import annotations

from ...costmodel import Cost
from ...profiles import PROFILES
from .spec import CHAIN_DTYPES, SIZES, chain_elements, pool_bytes

#: Storing a pool drawn on the device: A's FFN pool, drawn on the host then, took 5.8 s for 1.07 GB
#: (call1, gpu sizes); since f85aeaa every pool is drawn on the device, so what is left is its copy to
#: the host and its serialization, taken at that measured rate (an upper bound: it included the draw).
POOL_BYTES_S = 1.07e9 / 5.8
#: fp64 reference calls, one per set, distribution and dtype: each an eager chain of about 10 kernels.
REFERENCE_KERNELS = 10


def costs(profile: str, device_type: str = "cuda", stored: bool | None = None) -> list[Cost]:
    """S's pools, one row per asset group: A's FFN pool, and per chain its inputs and fp64 references;
    drawn and referenced on the device (one reference call per set, distribution and dtype), copied
    to the host and stored at :data:`POOL_BYTES_S` (fixed), everything written (the disk term).
    ``stored``: whether the pools are stored (default: as the profile says)."""
    ffn, chains = pool_bytes(profile)
    calls = {
        c: SIZES[profile].chain_sets * dists * len(CHAIN_DTYPES) for c, (_, _, dists) in chain_elements(profile).items()
    }
    parts = {"ffn": (ffn, 0, frozenset({"input_pool_ffn"}))} | {
        c: (i + r, calls[c] * REFERENCE_KERNELS, frozenset({f"input_pool_{c}", f"fp64_reference_{c}"}))
        for c, (i, r) in chains.items()
    }
    if not (PROFILES[profile].store_sets if stored is None else stored):
        # A recipe is stored in place of each pool and reference: the sets are drawn and referenced again
        # where they are read (B and the references' check pay it: B's cost; A reads one set).
        return [
            Cost("S", f"S pool {name}", assets=assets, note="a recipe stored; drawn and referenced where read")
            for name, (_, _, assets) in parts.items()
        ]
    return [
        Cost(
            "S",
            f"S pool {name}",
            device_bytes=nbytes,
            calls=kernels,
            host_bytes=nbytes,
            disk_bytes=nbytes,
            fixed_s=nbytes / POOL_BYTES_S,
            assets=assets,
            note="drawn on the device; stored at the rate measured for the FFN pool on the H200",
        )
        for name, (nbytes, kernels, assets) in parts.items()
    ]
