"""Task D catalogue: data-movement subgraphs, plus counterexamples that hide arithmetic.

Every graph takes two activations ``x, y`` of shape ``[batch, seq, hidden]`` and returns one
tensor or a tuple. The pure graphs only move, copy, broadcast or sign-flip values (negation is
exact), so eager and fused must agree bit for bit. The counterexamples look like data movement
but contain a rounding step (type promotion then downcast, a Python-scalar scale), which is
where a fused kernel may legitimately round differently from op-by-op execution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

LAYOUTS = ("contiguous", "transposed_view")


# --- pure data movement --------------------------------------------------------------------

def transpose_concat(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """transpose -> concat: both inputs transposed to [batch, hidden, seq], joined on seq."""
    return torch.cat([x.transpose(1, 2), y.transpose(1, 2)], dim=-1)


def slice_broadcast_concat(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """slice -> broadcast -> concat: x's first position broadcast over seq, next to a slice of y."""
    first = x[:, :1, :].expand(-1, y.shape[1], -1)
    return torch.cat([y[..., 1:], first], dim=-1)


def split_transpose_concat(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """split -> transpose -> concat: x split unevenly on hidden, halves swapped, y appended."""
    hidden = x.shape[-1]
    a, b = torch.split(x, [(hidden + 1) // 2, hidden // 2], dim=-1)
    return torch.cat([b.transpose(1, 2), a.transpose(1, 2), y.transpose(1, 2)], dim=1)


def _rotate_half(t: torch.Tensor) -> torch.Tensor:
    half = t.shape[-1] // 2
    return torch.cat([-t[..., half:], t[..., :half]], dim=-1)


def rope_rotate_half(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE rotate-half of q and k (slice -> neg -> concat); negation only flips the sign bit."""
    return _rotate_half(x), _rotate_half(y)


def full_two_concats(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A ``torch.full`` factory tensor consumed by two concats (the pattern of a forwarded factory op).

    The fill value -1.5 is exact in every float format, so creating it involves no rounding.
    """
    fill = torch.full((x.shape[0], x.shape[1], 8), -1.5, dtype=x.dtype, device=x.device)
    return torch.cat([x, fill], dim=-1), torch.cat([fill, y], dim=-1)


# --- counterexamples: arithmetic hidden in a movement-looking graph --------------------------

def promote_broadcast_concat(x: torch.Tensor, y_wide: torch.Tensor) -> torch.Tensor:
    """Broadcast with implicit type promotion: x's first position plus a wider-typed y, cast
    back to x's dtype and concatenated with x. The add rounds (once in the wide type, then again
    in the downcast) in both paths alike."""
    moved = (x[:, :1, :] + y_wide).to(x.dtype)
    return torch.cat([x, moved], dim=-1)


def promote_downcast_scale_concat(x: torch.Tensor, y_wide: torch.Tensor) -> torch.Tensor:
    """Promotion then downcast inside the chain: as above, but the downcast result is scaled by 3
    before the concat. Eager rounds to x's dtype at the ``.to()``; a fused kernel may drop that
    cast and round only once at the end."""
    moved = (x[:, :1, :] + y_wide).to(x.dtype) * 3.0
    return torch.cat([x, moved], dim=-1)


def scaled_add_concat(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A scaled concat: ``x * 0.1 + y`` joined with y. Eager rounds ``x * 0.1`` to the tensor
    dtype before the add; a fused kernel may keep it in fp32 and round once."""
    return torch.cat([x * 0.1 + y, y], dim=-1)


@dataclass(frozen=True)
class MovementGraph:
    """One subgraph of the check table."""

    name: str
    title: str
    fn: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]
    has_implicit_computation: bool = False
    #: what arithmetic hides in the graph (counterexamples) or why it is exact (pure graphs)
    explanation: str = ""
    #: dtype of ``y`` given the activation dtype (counterexamples promote to a wider type)
    y_dtype: Callable[[torch.dtype], torch.dtype] = field(default=lambda dtype: dtype)


def _wider(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float32 else torch.float32


CATALOGUE: dict[str, MovementGraph] = {
    g.name: g
    for g in (
        MovementGraph("transpose_concat", "transpose -> concat", transpose_concat,
                      explanation="copies only"),
        MovementGraph("slice_broadcast_concat", "slice -> broadcast -> concat", slice_broadcast_concat,
                      explanation="copies only; the broadcast repeats one position without arithmetic"),
        MovementGraph("split_transpose_concat", "split -> transpose -> concat", split_transpose_concat,
                      explanation="copies only; uneven split on odd widths"),
        MovementGraph("rope_rotate_half", "RoPE rotate-half: slice -> neg -> concat", rope_rotate_half,
                      explanation="negation flips the sign bit only, so it is exact"),
        MovementGraph("full_two_concats", "torch.full consumed by two concats", full_two_concats,
                      explanation="the fill value -1.5 is exact in every dtype"),
        MovementGraph(
            "promote_broadcast_concat", "broadcast + implicit type promotion -> downcast -> concat",
            promote_broadcast_concat, has_implicit_computation=True,
            explanation=(
                "x (dtype) + y (wider type) promotes to the wider type, adds, and the .to() rounds "
                "back: one add and one downcast, which both paths can do in the same order"
            ),
            y_dtype=_wider,
        ),
        MovementGraph(
            "promote_downcast_scale_concat", "broadcast + promotion -> downcast -> scale -> concat",
            promote_downcast_scale_concat, has_implicit_computation=True,
            explanation=(
                "eager rounds the promoted sum to x's dtype at .to() and rounds again after * 3; "
                "a fused kernel may drop the intermediate downcast and round once"
            ),
            y_dtype=_wider,
        ),
        MovementGraph(
            "scaled_add_concat", "scale by a Python scalar + add -> concat", scaled_add_concat,
            has_implicit_computation=True,
            explanation=(
                "eager rounds x * 0.1 to the tensor dtype before adding y; a fused kernel may compute "
                "x * 0.1 + y in fp32 and round once (double vs single rounding); in fp32 both "
                "paths round after each op unless the compiler contracts to an FMA"
            ),
        ),
    )
}

PURE = tuple(name for name, g in CATALOGUE.items() if not g.has_implicit_computation)
COUNTEREXAMPLES = tuple(name for name, g in CATALOGUE.items() if g.has_implicit_computation)


def get_graph(name: str) -> MovementGraph:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(f"unknown movement subgraph {name!r}; expected one of {', '.join(CATALOGUE)}") from None


def _special_values(dtype: torch.dtype) -> torch.Tensor:
    """Values a copy must keep bit for bit: signed zeros, infinities, the smallest subnormal, NaN."""
    info = torch.finfo(dtype)
    tiny = info.smallest_normal * info.eps  # eps = 2**-mantissa_bits
    return torch.tensor([0.0, -0.0, float("inf"), float("-inf"), tiny, -tiny, float("nan")], dtype=torch.float64)


def make_input(
    shape: tuple[int, ...], dtype: torch.dtype, layout: str, seed: int, *, specials: bool, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """A seeded ``shape`` activation in ``dtype`` with the given memory layout.

    ``transposed_view`` is a transpose of a contiguous ``[batch, hidden, seq]`` buffer, so the
    graph reads strided memory. ``specials`` sprinkles signed zeros, infinities, subnormals and
    NaN among the normal values (at seeded positions).
    """
    if len(shape) != 3:
        raise ValueError(f"movement shapes are [batch, seq, hidden], got {shape}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    gen = torch.Generator().manual_seed(seed)
    batch, seq, hidden = shape
    base = torch.randn((batch, hidden, seq) if layout == "transposed_view" else shape, generator=gen, dtype=torch.float64)
    if specials:
        values = _special_values(dtype)
        flat = base.view(-1)
        count = max(len(values), flat.numel() // 64)
        where = torch.randperm(flat.numel(), generator=gen)[:count]
        flat[where] = values[torch.arange(count) % len(values)]
    t = base.to(dtype).to(device)
    return t.transpose(1, 2) if layout == "transposed_view" else t
