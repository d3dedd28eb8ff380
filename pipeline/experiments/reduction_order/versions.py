"""C2's summation versions: what each version computes, how the versions are built for a device,
and how a fused version's tiling is read back from its generated kernel.

Compiler versions (eager, the fused default, Inductor's reduction knobs), framework-tiled versions
(the settings with which Inductor itself tiles the reduction) and hand-written tilings (per-tile
partial sums in fp32 or fp16, then the sum of the partials). See :mod:`.assets` for the experiment.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from precisionkit import FusedFunction, fused

from ...resources import ExperimentSettings
from .spec import SIZES

TILES = (512, 1024, 2048)
PARTIALS = ("fp32", "fp16")
OUTPUTS = {"out16": torch.float16, "acc32": torch.float32}
#: Families judged by the seed's claim (fp32 accumulation throughout) and the fp16-partials family.
SEED_FAMILIES = ("compiler", "framework_tiled", "tiled_fp32_partials")
FP16_PARTIALS_FAMILY = "tiled_fp16_partials"
#: Families whose order the framework itself produces (eager, the fused default, the Inductor knobs and
#: tiling settings): the claims about the framework judge these, never the harness's hand-written tilings.
COMPILER_FAMILIES = ("compiler", "framework_tiled")
#: The settings with which Inductor tiles a reduction, per device type: each is one framework-tiled
#: version. CPU: threads x vector width (simdlen 0 = scalar loop); CUDA: Triton reduction strategies.
FRAMEWORK_TILINGS: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {f"t{t}_simd{w}": {"cpp.threads": t, "cpp.simdlen": w} for t in (1, 2) for w in (0, 256, 512)},
    "cuda": {
        "split": {"split_reductions": True, "triton.persistent_reductions": True},
        "nosplit_persistent": {"split_reductions": False, "triton.persistent_reductions": True},
        "nosplit_looped": {"split_reductions": False, "triton.persistent_reductions": False},
        "cooperative": {
            "split_reductions": False,
            "triton.cooperative_reductions": True,
            "triton.force_cooperative_reductions": True,
        },
        "min_num_split_64": {"split_reductions": True, "min_num_split": 64},
    },
}
#: tiling_source per family: which versions the framework tiles, and which are tiled by hand.
TILING_SOURCE = {
    "compiler": "framework (default or knob)",
    "framework_tiled": "framework (tiling configuration)",
    "tiled_fp32_partials": "hand-written",
    "tiled_fp16_partials": "hand-written",
}
#: Inductor options per device type that change how the reduction loop is split or vectorized.
KNOBS: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {
        "cpp.threads=1": {"cpp.threads": 1},
        "cpp.simdlen=0": {"cpp.simdlen": 0},
        "split_reductions=False": {"split_reductions": False},
    },
    "cuda": {
        "split_reductions=False": {"split_reductions": False},
        "triton.persistent_reductions=False": {"triton.persistent_reductions": False},
    },
}

Pair = tuple[torch.Tensor, torch.Tensor]


def plain_sum(x: torch.Tensor) -> Pair:
    """The seed's operation: fp16 ``sum(dim=-1)``, and the same sum accumulated into fp32."""
    return x.sum(-1), x.sum(-1, dtype=torch.float32)


def tiled_sum(tile: int, partials: str) -> Callable[[torch.Tensor], Pair]:
    """Explicit tiling: per-tile partial sums, then the sum of the partials (fp32 or fp16 partials)."""
    if partials not in PARTIALS:
        raise ValueError(f"partials must be one of {PARTIALS}, got {partials!r}")

    def fn(x: torch.Tensor) -> Pair:
        if x.shape[-1] % tile:
            raise ValueError(f"row length {x.shape[-1]} is not a multiple of tile {tile}")
        tiles = x.reshape(*x.shape[:-1], -1, tile)
        if partials == "fp32":
            acc = tiles.sum(-1, dtype=torch.float32).sum(-1)
            return acc.to(x.dtype), acc
        part = tiles.sum(-1)  # each partial rounded to fp16 when stored
        return part.sum(-1), part.sum(-1, dtype=torch.float32)

    fn.__name__ = f"tiled_sum_{tile}_{partials}"
    return fn


def make_rows(rows: int, length: int, seed: int) -> torch.Tensor:
    """fp16 rows from U(-1, 1), drawn in fp64 on the CPU (device-independent), rounded once."""
    if rows < 1 or length < 1:
        raise ValueError(f"C2 needs rows >= 1 and length >= 1, got rows={rows}, length={length}")
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(rows, length, generator=g, dtype=torch.float64) * 2 - 1).to(torch.float16)


@dataclass(frozen=True)
class Version:
    """One summation version: its name, family, hand-written tile (``None`` where the framework
    tiles), the Inductor options it sets (as text) and its callable (a fused one compiles at its
    first call)."""

    version: str
    family: str
    tile: int | None
    options: str
    fn: Callable[[torch.Tensor], Pair]

    @property
    def mode(self) -> str:
        """``fused`` for a compiled version, ``eager`` otherwise."""
        return "fused" if isinstance(self.fn, FusedFunction) else "eager"


def _options_text(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items())


def build_versions(settings: ExperimentSettings, device: torch.device) -> list[Version]:
    """Every version: eager, the fused default, the device's Inductor knobs, its framework tilings,
    then the hand-written tilings (fused ones not yet compiled)."""
    base = settings.options()
    versions = [
        Version("eager", "compiler", None, "", plain_sum),
        Version("fused_default", "compiler", None, _options_text(base), fused(plain_sum, settings.backend, base)),
    ]
    for label, opts in KNOBS.get(device.type, {}).items():
        versions.append(
            Version(f"fused_{label}", "compiler", None, label, fused(plain_sum, settings.backend, {**base, **opts}))
        )
    for label, opts in FRAMEWORK_TILINGS.get(device.type, {}).items():
        fn = fused(plain_sum, settings.backend, {**base, **opts})
        versions.append(Version(f"framework_tiled_{label}", "framework_tiled", None, _options_text(opts), fn))
    for partials in PARTIALS:
        for tile in TILES:
            versions.append(
                Version(
                    f"tile{tile}_{partials}_partials", f"tiled_{partials}_partials", tile, "", tiled_sum(tile, partials)
                )
            )
    return versions


def planned_compiles(device_type: str) -> int:
    """Fused versions :func:`build_versions` makes for ``device_type``, one compile each (every version runs
    on rows of one shape, [1, length]): the fused default, the device's knobs and its framework tilings
    (fewer where the backend rejects a tiling)."""
    return 1 + len(KNOBS.get(device_type, {})) + len(FRAMEWORK_TILINGS.get(device_type, {}))


def stored_tensor_bytes(profile: str, device_type: str) -> int:
    """Bytes of the tensors ``c2_version_outputs`` stores at ``profile``'s sizes: the fp16 rows (the seed's
    input and the pool), and per version (eager, the fused ones, the hand-written tilings) its fp16
    result and fp32 accumulator of each row."""
    rows, length = 1 + SIZES[profile].pool_rows, SIZES[profile].length
    versions = 1 + planned_compiles(device_type) + len(TILES) * len(PARTIALS)
    return rows * length * 2 + versions * rows * (2 + 4)


_CASCADE = re.compile(r"CascadeSumHelper<[^>]*?, (\d+)>")
_STEP = re.compile(
    r"for\(int64_t x0=static_cast<int64_t>\(0L\); x0<static_cast<int64_t>\((\d+)L\); x0\+=static_cast<int64_t>\((\d+)L\)\)"
)
_OMP = re.compile(r"#pragma omp parallel(?: num_threads\((\d+)\))?")


def describe_tiling(code: str, artifacts: list[Any] | None = None) -> str:
    """How the generated kernel tiles the reduction, read back from its code (CPU: thread ranges,
    vector step, cascade or running sum per lane) or from the Triton launcher the autotuner chose
    (CUDA: block sizes, warps, stages)."""
    parts = []
    step = _STEP.search(code)
    if step:
        length, stride = int(step.group(1)), int(step.group(2))
        omp = _OMP.search(code)
        threads = (
            "1 thread" if omp is None else (f"{omp.group(1)} thread ranges" if omp.group(1) else "OpenMP thread ranges")
        )
        cascade = _CASCADE.search(code)
        lanes = f"vector steps of {stride} lanes" if stride > 1 else "a scalar loop"
        acc = f"each lane a cascade sum of {cascade.group(1)}-addition chunks" if cascade else "each lane a running sum"
        parts.append(f"{length} elements in {threads}, {lanes}, {acc}")
    choices = [f"{a.kernel}: {a.autotune_choice}" for a in (artifacts or []) if getattr(a, "autotune_choice", "")]
    if choices:
        parts.append("Triton launcher " + "; ".join(choices))
    return "; ".join(parts) or "not read back (no reduction loop or launcher config recognised in the generated kernel)"
