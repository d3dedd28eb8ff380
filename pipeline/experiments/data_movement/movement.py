"""Task D catalogue: data-movement subgraphs, plus counterexamples that hide arithmetic.

Every graph takes two activations ``x, y`` of shape ``[batch, seq, hidden]`` and returns one
tensor or a tuple. The pure graphs only move, copy, broadcast or sign-flip values (negation is
exact), so eager and fused must agree bit for bit. The counterexamples look like data movement
but contain a rounding step (type promotion then downcast, a Python-scalar scale), which is
where a fused kernel may legitimately round differently from op-by-op execution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import torch

from precisionkit.specials import salt_specials

from ...workloads import seeded_generator

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


def reshape_concat(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """reshape -> concat: both inputs flattened to [batch, seq * hidden], joined on the last dim. On a
    contiguous input the reshape is a view; on a non-contiguous view (the transposed layout) it must
    copy, and the fused kernel folds that copy into the concat."""
    return torch.cat([x.reshape(x.shape[0], -1), y.reshape(y.shape[0], -1)], dim=-1)


def _flatten(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], -1)


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
    #: the graph's reshape step alone (eager), to measure whether it returned a view or a copy
    reshape_probe: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None


def _wider(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float32 else torch.float32


CATALOGUE: dict[str, MovementGraph] = {
    g.name: g
    for g in (
        MovementGraph("transpose_concat", "transpose -> concat", transpose_concat, explanation="copies only"),
        MovementGraph(
            "slice_broadcast_concat",
            "slice -> broadcast -> concat",
            slice_broadcast_concat,
            explanation="copies only; the broadcast repeats one position without arithmetic",
        ),
        MovementGraph(
            "split_transpose_concat",
            "split -> transpose -> concat",
            split_transpose_concat,
            explanation="copies only; uneven split on odd widths",
        ),
        MovementGraph(
            "reshape_concat",
            "reshape -> concat",
            reshape_concat,
            explanation="copies only; the reshape is a view of a contiguous input and a copy of a non-contiguous one",
            reshape_probe=_flatten,
        ),
        MovementGraph(
            "rope_rotate_half",
            "RoPE rotate-half: slice -> neg -> concat",
            rope_rotate_half,
            explanation="negation flips the sign bit only, so it is exact",
        ),
        MovementGraph(
            "full_two_concats",
            "torch.full consumed by two concats",
            full_two_concats,
            explanation="the fill value -1.5 is exact in every dtype",
        ),
        MovementGraph(
            "promote_broadcast_concat",
            "broadcast + implicit type promotion -> downcast -> concat",
            promote_broadcast_concat,
            has_implicit_computation=True,
            explanation=(
                "x (dtype) + y (wider type) promotes to the wider type, adds, and the .to() rounds "
                "back: one add and one downcast, which both paths can do in the same order"
            ),
            y_dtype=_wider,
        ),
        MovementGraph(
            "promote_downcast_scale_concat",
            "broadcast + promotion -> downcast -> scale -> concat",
            promote_downcast_scale_concat,
            has_implicit_computation=True,
            explanation=(
                "eager rounds the promoted sum to x's dtype at .to() and rounds again after * 3; "
                "a fused kernel may drop the intermediate downcast and round once"
            ),
            y_dtype=_wider,
        ),
        MovementGraph(
            "scaled_add_concat",
            "scale by a Python scalar + add -> concat",
            scaled_add_concat,
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

#: aten ops that only move, copy or create data (no arithmetic on values): a bit difference first
#: seen at one of these is a data-movement defect; at any other op it is arithmetic hidden in the graph.
MOVEMENT_OPS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "permute",
        "transpose",
        "t",
        "slice",
        "select",
        "split",
        "split_with_sizes",
        "unbind",
        "cat",
        "expand",
        "clone",
        "copy",
        "copy_",
        "contiguous",
        "alias",
        "unsqueeze",
        "squeeze",
        "flatten",
        "full",
        "empty",
        "empty_strided",
        "as_strided",
        "narrow",
        "index_select",
        "stack",
        "lift_fresh",
        "detach",
    }
)


def reshape_copied(graph: MovementGraph, x: torch.Tensor, y: torch.Tensor) -> bool | None:
    """Whether the graph's reshape step returned a copy (not a view of x's storage), measured
    eagerly; None for graphs without a reshape step."""
    if graph.reshape_probe is None:
        return None
    out = graph.reshape_probe(x, y)
    return out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(_INT[t.element_size()]).reshape(-1).cpu()


def _hex(v: int, size: int) -> str:
    return f"{v & ((1 << (8 * size)) - 1):#0{2 + 2 * size}x}"


def _op_name(target: object) -> str:
    name = getattr(target, "__name__", str(target))  # e.g. "neg.default"
    return name.split(".")[0]


class Localization(TypedDict):
    """Where :func:`localize_bit_difference` found a bit difference: the op (``None`` when no single
    op differs on its own), whether it only moves data, which output and how many of its elements
    differ, up to three bit-pattern samples, which path departs from the op's bitwise result
    (``eager``, ``fused``, both or ``unknown``), the ops re-run, and ``alone`` = False when the
    difference is an eager op departing from its bitwise result while no op differs alone."""

    op: str | None
    op_moves_data_only: bool | None
    output: int | None
    differing_elements: int
    samples: list[str]
    departs_from_bitwise: str
    ops_checked: list[str]
    alone: NotRequired[bool]


def _op_label(target: object, name: str) -> str:
    return f"aten.{getattr(target, '__name__', name)}"


def _single_op(
    target: Callable[..., Any], flat: list[Any], spec: Any, positions: list[int], label: str
) -> Callable[..., Any]:
    """The op ``target`` as a function of its tensor arguments only (the others fixed as recorded)."""
    from torch.utils._pytree import tree_unflatten

    def one_op(*tensors: torch.Tensor) -> Any:
        full = list(flat)
        for i, t in zip(positions, tensors, strict=False):
            full[i] = t
        a, k = tree_unflatten(full, spec)
        return target(*a, **k)

    one_op.__name__ = label
    return one_op


def _neg_departure(label: str, src: torch.Tensor, eager_out: torch.Tensor) -> Localization | None:
    """Negation's bitwise result is the input with the sign bit flipped: the elements where the eager
    op departs from it, or ``None`` where it does not."""
    size = src.element_size()
    expected = _bits(src) ^ torch.tensor(-(1 << (8 * size - 1)), dtype=_INT[size])  # the sign bit
    if expected.shape != _bits(eager_out).shape:
        return None
    got = _bits(eager_out)
    bad = (got != expected).nonzero().reshape(-1)
    if not bad.numel():
        return None
    return {
        "op": label,
        "op_moves_data_only": False,
        "output": 0,
        "differing_elements": int(bad.numel()),
        "samples": [
            f"input {_hex(int(_bits(src)[i]), size)}, eager {_hex(int(got[i]), size)}, bitwise expectation "
            f"{_hex(int(expected[i]), size)}"
            for i in bad[:3].tolist()
        ],
        "departs_from_bitwise": "eager",
        "ops_checked": [],
    }


def _bit_sample(name: str, inp: int | None, eager: int, fused: int, size: int) -> tuple[str, set[str]]:
    """One differing element in words, and the paths departing from the op's bitwise result there
    (none where the op has no bitwise expectation or the input is unknown)."""
    expected = None
    if inp is not None and name == "neg":
        expected = inp ^ (1 << (8 * size - 1))  # negation flips the sign bit only
    elif inp is not None and name in MOVEMENT_OPS:
        expected = inp
    text = (
        f"input {_hex(inp, size)}, " if inp is not None else ""
    ) + f"eager {_hex(eager, size)}, fused {_hex(fused, size)}"
    if expected is None:
        return text, set()
    mask = (1 << (8 * size)) - 1
    departs = {p for p, v in (("eager", eager), ("fused", fused)) if v & mask != expected & mask}
    return text + f", bitwise expectation {_hex(expected, size)}", departs


def _output_difference(
    label: str, name: str, k: int, e: torch.Tensor, f: torch.Tensor, tensors_in: list[torch.Tensor], checked: list[str]
) -> Localization | None:
    """Output ``k`` of op ``name`` eager (``e``) against fused (``f``): ``None`` when bit-identical."""
    eb, fb = _bits(e), _bits(f)
    if e.shape == f.shape and torch.equal(eb, fb):
        return None
    differ = (eb != fb).nonzero().reshape(-1) if e.shape == f.shape else torch.arange(0)
    size = e.element_size()
    same_shape_input = next((t for t in tensors_in if t.shape == e.shape and t.dtype == e.dtype), None)
    samples, departs = [], set()
    for idx in differ[:3].tolist():
        inp = int(_bits(same_shape_input)[idx]) if same_shape_input is not None else None
        text, who = _bit_sample(name, inp, int(eb[idx]), int(fb[idx]), size)
        samples.append(text)
        departs |= who
    return {
        "op": label,
        "op_moves_data_only": name in MOVEMENT_OPS,
        "output": k,
        "differing_elements": int(differ.numel()),
        "samples": samples,
        "departs_from_bitwise": ", ".join(sorted(departs)) or "unknown",
        "ops_checked": checked,
    }


def localize_bit_difference(
    fn: Callable[..., object],
    args: tuple[torch.Tensor, ...],
    backend: str = "inductor",
    options: dict[str, Any] | None = None,
) -> Localization:
    """Re-run ``fn`` op by op, eagerly and fused, and find the first aten op whose output bits
    differ between the two (each op fed the same eager inputs). Returns the op, whether it only
    moves data, how many output elements differ, up to three (input, eager, fused) bit patterns,
    and, where the op has a bitwise expectation (neg flips the sign bit, a copy keeps the bits),
    which path departs from it. ``op`` is None when no single op differs on its own."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils._pytree import tree_flatten

    from precisionkit import fused

    gm = make_fx(fn)(*args)
    env: dict[str, Any] = {}  # node name -> its eager value
    placeholders = iter(args)
    checked: list[str] = []
    eager_departure: Localization | None = None  # first op whose eager bits depart from its bitwise result
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node.name] = next(placeholders)
            continue
        if node.op != "call_function":
            continue
        call_args = torch.fx.node.map_arg(node.args, lambda n: env[n.name])
        call_kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n.name])
        eager_out = node.target(*call_args, **call_kwargs)
        env[node.name] = eager_out
        name = _op_name(node.target)
        flat, spec = tree_flatten((call_args, call_kwargs))
        positions = [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]
        tensors_in = [flat[i] for i in positions]
        eager_list = list(eager_out) if isinstance(eager_out, (tuple, list)) else [eager_out]
        if not tensors_in or not all(isinstance(t, torch.Tensor) for t in eager_list):
            continue
        label = _op_label(node.target, name)
        if eager_departure is None and name == "neg" and isinstance(eager_out, torch.Tensor):
            eager_departure = _neg_departure(label, tensors_in[0], eager_out)
        one_op = _single_op(node.target, flat, spec, positions, f"op_{node.name}")
        fused_out = fused(one_op, backend, options, require_fusion=False)(*tensors_in)
        fused_list = list(fused_out) if isinstance(fused_out, (tuple, list)) else [fused_out]
        checked.append(name)
        for k, (e, f) in enumerate(zip(eager_list, fused_list, strict=False)):
            found = _output_difference(label, name, k, e, f, tensors_in, checked)
            if found is not None:
                return found
    if eager_departure is not None:
        # No op differs alone between eager and fused, but one eager op departs from its bitwise
        # result: the fused graph keeps the bits there (measured on the whole graph), eager does not.
        eager_departure["ops_checked"] = checked
        eager_departure["alone"] = False
        return eager_departure
    return {
        "op": None,
        "op_moves_data_only": None,
        "output": None,
        "differing_elements": 0,
        "samples": [],
        "departs_from_bitwise": "unknown",
        "ops_checked": checked,
    }


def describe_localization(loc: Localization) -> str:
    """One line for the check table: which op changed the bits on which path, as measured."""
    if loc["op"] is None:
        return (
            f"no single op differs when run alone ({len(loc['ops_checked'])} ops re-run eagerly and fused): the "
            "difference arises only in the fused graph as a whole"
        )
    departs = loc["departs_from_bitwise"]
    who = (
        f"the {departs} path departs from the op's bitwise result"
        if departs != "unknown"
        else "no bitwise expectation for this op"
    )
    if loc.get("alone") is False:
        return (
            f"no op differs alone between eager and fused; re-run op by op, the eager {loc['op']} departs from its "
            f"bitwise result ({loc['differing_elements']} elements; {'; '.join(loc['samples'])}); the eager path departs"
        )
    return (
        f"first op whose output bits differ, re-run op by op: {loc['op']} (output {loc['output']}, "
        f"{loc['differing_elements']} elements; {'; '.join(loc['samples'])}); {who}"
    )


COUNTEREXAMPLES = tuple(name for name, g in CATALOGUE.items() if g.has_implicit_computation)


def get_graph(name: str) -> MovementGraph:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(f"unknown movement subgraph {name!r}; expected one of {', '.join(CATALOGUE)}") from None


def movement_input(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    layout: str,
    seed: int,
    *,
    specials: bool,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """A seeded ``shape`` activation in ``dtype`` with the given memory layout, drawn on ``device``
    from a generator of that device (the same device type and seed give the same bits).

    ``transposed_view`` is a transpose of a contiguous ``[batch, hidden, seq]`` buffer, so the
    graph reads strided memory. ``specials`` sprinkles signed zeros, infinities, subnormals and
    NaN among the normal values: one element per 64 (at least one of each value), each at a
    ``randint`` position inside its own equal stretch of the buffer, so positions never collide
    and no permutation of the whole buffer is needed. The salting is
    :func:`precisionkit.specials.salt_specials`, which D's reproducers paste into their files
    (values ``specials`` of :class:`precisionkit.repro.Input`), so they draw these very bits.
    """
    if len(shape) != 3:
        raise ValueError(f"movement shapes are [batch, seq, hidden], got {shape}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    device = torch.device(device)
    gen = seeded_generator(device, seed)
    batch, seq, hidden = shape
    drawn = (batch, hidden, seq) if layout == "transposed_view" else shape
    base = torch.randn(drawn, generator=gen, dtype=torch.float64, device=device)
    if specials:
        salt_specials(base.view(-1), dtype, gen)
    t = base.to(dtype)
    return t.transpose(1, 2) if layout == "transposed_view" else t
