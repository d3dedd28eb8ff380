"""C2's summation versions: what each version computes, how the versions are built for a device,
and how a fused version's tiling is read back from its generated kernel.

Compiler versions (eager, the fused default, the compiler's reduction knobs), framework-tiled versions
(the settings with which the compiler itself tiles the reduction) and hand-written tilings (per-tile
partial sums in fp32 or fp16, then the sum of the partials). The knobs and tilings are the compiler's
answers to the intents ``reduction_knobs`` and ``reduction_tilings`` (its adapter's, never Inductor's option
names here). See :mod:`.assets` for the experiment.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from precisionkit import FusedFunction, fused
from precisionkit.backends import REDUCTION_KNOBS, REDUCTION_TILINGS

from ...intents import adapter_of, intent_variants, options_text, whole_graph_options
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
#: tiling_source per family: which versions the framework tiles, and which are tiled by hand.
TILING_SOURCE = {
    "compiler": "framework (default or knob)",
    "framework_tiled": "framework (tiling configuration)",
    "tiled_fp32_partials": "hand-written",
    "tiled_fp16_partials": "hand-written",
}
#: What C2 asks of the compiler (:data:`precisionkit.backends.INTENTS`): its knobs that change how a reduction
#: loop is split or vectorized (compiler versions ``fused_<label>``), the settings with which it tiles a
#: reduction itself (framework-tiled versions), and that every graph reaches it (a sum is one operation).
#: Inductor: ``cpp.threads``, ``cpp.simdlen``, ``split_reductions`` on a CPU, Triton's reduction strategies on
#: CUDA; a compiler without one of them has that part stored as not applicable, with its reason.
KNOBS_INTENT, TILINGS_INTENT = REDUCTION_KNOBS, REDUCTION_TILINGS

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


def options_label(options: Mapping[str, Any]) -> str:
    """``k=v`` per option; a nested option (OpenVINO's ``config``, IREE's ``flags``) spelled out."""
    return ", ".join(
        options_text({k: v}) if isinstance(v, Mapping | list | tuple) else f"{k}={v}" for k, v in options.items()
    )


def fused_base(settings: ExperimentSettings, device: torch.device) -> dict[str, Any]:
    """The options every fused version compiles with: the run's, with the compiler told to compile a graph
    of one operation too (intent ``whole_graph``; a sum is one operation); the run's alone where the
    compiler has no such option."""
    return whole_graph_options(settings.backend, settings.options(), device)


def reduction_variants(backend: str, device_type: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The compiler's reduction knobs and tilings on ``device_type`` (label -> the variant's own options),
    each empty where the compiler has none (:func:`parts_not_applicable` says why)."""
    adapter = adapter_of(backend)
    knobs = adapter.intent_variants(KNOBS_INTENT, device_type) or {}
    tilings = adapter.intent_variants(TILINGS_INTENT, device_type) or {}
    return knobs, tilings


def parts_not_applicable(backend: str, device: torch.device) -> dict[str, str]:
    """The parts of C2's version set the compiler has no way to make (``compiler knob versions``,
    ``framework-tiled versions``), each with "not applicable to <compiler>: <why>"."""
    out = {}
    for part, intent in (("compiler knob versions", KNOBS_INTENT), ("framework-tiled versions", TILINGS_INTENT)):
        variants, why = intent_variants(backend, {}, intent, device)
        if variants is None:
            out[part] = why
    return out


def build_versions(settings: ExperimentSettings, device: torch.device) -> list[Version]:
    """Every version: eager, the fused default, the compiler's reduction knobs and framework tilings on the
    device, then the hand-written tilings (fused ones not yet compiled)."""
    base = fused_base(settings, device)
    knobs = intent_variants(settings.backend, base, KNOBS_INTENT, device)[0] or {}
    tilings = intent_variants(settings.backend, base, TILINGS_INTENT, device)[0] or {}
    versions = [
        Version("eager", "compiler", None, "", plain_sum),
        Version("fused_default", "compiler", None, options_label(base), fused(plain_sum, settings.backend, base)),
    ]
    for label, (_own, merged) in knobs.items():
        versions.append(Version(f"fused_{label}", "compiler", None, label, fused(plain_sum, settings.backend, merged)))
    for label, (own, merged) in tilings.items():
        fn = fused(plain_sum, settings.backend, merged)
        versions.append(Version(f"framework_tiled_{label}", "framework_tiled", None, options_label(own), fn))
    for partials in PARTIALS:
        for tile in TILES:
            versions.append(
                Version(
                    f"tile{tile}_{partials}_partials", f"tiled_{partials}_partials", tile, "", tiled_sum(tile, partials)
                )
            )
    return versions


def planned_compiles(device_type: str, backend: str = "inductor") -> int:
    """Fused versions :func:`build_versions` makes for ``device_type`` with ``backend``'s compiler, one compile
    each (every version runs on rows of one shape, [1, length]): the fused default, the compiler's knobs and
    its framework tilings on the device (fewer where the backend rejects a tiling)."""
    knobs, tilings = reduction_variants(backend, device_type)
    return 1 + len(knobs) + len(tilings)


def stored_tensor_bytes(profile: str, device_type: str, backend: str = "inductor") -> int:
    """Bytes of the tensors ``c2_version_outputs`` stores at ``profile``'s sizes: the fp16 rows (the seed's
    input and the pool), and per version (eager, the fused ones, the hand-written tilings) its fp16
    result and fp32 accumulator of each row."""
    rows, length = 1 + SIZES[profile].pool_rows, SIZES[profile].length
    versions = 1 + planned_compiles(device_type, backend) + len(TILES) * len(PARTIALS)
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
