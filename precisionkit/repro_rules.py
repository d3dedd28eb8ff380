"""The rules that decide whether a reproducer's defect reproduces, as Python source.

Each rule is one ``check(graph, args, backend) -> (reproduces, message)`` function, kept as text: it is
pasted into every standalone reproducer (:func:`precisionkit.repro.render`) and executed in-process by
:func:`precisionkit.repro.reproduces`, so the minimizer and the file judge alike. What each rule means is
written in :mod:`precisionkit.repro`'s docstring.
"""

from __future__ import annotations

import math

from .bounds import UNIT_ROUNDOFF
from .repro_rules_jitter import JITTER

#: The rules by name, in the order the docs list them.
RULES = ("bitwise", "ulp", "fp64", "repeat", "compiled", "diff")


def _power_of_two(value: float) -> str:
    """``value``, a power of two, written as one (``2.0**-11``)."""
    mantissa, exponent = math.frexp(value)
    if mantissa != 0.5:
        raise ValueError(f"{value!r} is not a power of two")
    return f"2.0**{exponent - 1}"


#: The unit roundoff of :mod:`precisionkit.bounds`, written into the text when it is read: a reproducer imports
#: only torch, so it carries the numbers, not the module. A float dtype outside the table counts as fp64.
_ROUNDOFF = (
    "UNIT_ROUNDOFF = {"
    + ", ".join(f"{dtype}: {_power_of_two(u)}" for dtype, u in UNIT_ROUNDOFF.items())
    + "}  # u = 2^-p of each format (p significand bits)\n"
    "def unit_roundoff(ts):  # of the narrowest float dtype below fp64 among ts (fp64's when none)\n"
    "    return max([UNIT_ROUNDOFF.get(t.dtype, 0.0) for t in ts] + [UNIT_ROUNDOFF[torch.float64]])\n"
)

_BITS = (
    "def bits(t):\n"
    "    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])\n"
)
_OUTS = "def outs(o):\n    return list(o) if isinstance(o, (tuple, list)) else [o]\n"

#: Each rule's source, with the helpers it needs.
CHECKS: dict[str, str] = {
    "bitwise": _BITS
    + _OUTS
    + """def check(graph, args, backend):
    with torch.no_grad():
        eager, fused = outs(graph(*args)), outs(torch.compile(graph, backend=backend)(*args))
    bad = [(bits(e) != bits(f)) & ~(e.isnan() & f.isnan()) if e.is_floating_point() else e != f for e, f in zip(eager, fused)]
    n, total = sum(int(b.sum()) for b in bad), sum(b.numel() for b in bad)
    return n > 0, f"{n} of {total} elements differ in their bits between eager and fused ({backend})"
""",
    "ulp": _BITS
    + _OUTS
    + """def ulps(t, ref):  # largest distance from ref rounded to t's dtype, in its units in the last place
    keep = torch.isfinite(ref)
    a, b = (bits(v).to(torch.int64)[keep] for v in (t, ref.to(t.dtype)))
    mag = (1 << (8 * t.element_size() - 1)) - 1
    a, b = (torch.where(v < 0, -(v & mag), v) for v in (a, b))
    return int((a - b).abs().max()) if a.numel() else 0
def check(graph, args, backend):
    with torch.no_grad():
        ref = outs(graph(*[a.double() if a.is_floating_point() else a for a in args]))
        eager, fused = outs(graph(*args)), outs(torch.compile(graph, backend=backend)(*args))
    e, f = max(map(ulps, eager, ref)), max(map(ulps, fused, ref))
    return f > e + SLACK, f"largest error against fp64: eager {e} ULP, fused ({backend}) {f} ULP (allowed: eager + {SLACK})"
""",
    "fp64": _OUTS
    + """def ratio(t, ref):  # largest |t - ref| / (ATOL + RTOL |ref|) over the finite reference
    keep = torch.isfinite(ref)
    t, ref = t.double()[keep], ref[keep]
    if not bool(torch.isfinite(t).all()):
        return float("inf")
    return float(((t - ref).abs() / (ATOL + RTOL * ref.abs())).max()) if t.numel() else 0.0
def check(graph, args, backend):
    with torch.no_grad():
        ref = outs(graph(*[a.double() if a.is_floating_point() else a for a in args]))
        eager, fused = outs(graph(*args)), outs(torch.compile(graph, backend=backend)(*args))
    e, f = max(map(ratio, eager, ref)), max(map(ratio, fused, ref))
    return f > 1 and f > 2 * e, f"error / tolerance against fp64: eager {e:.3g}, fused ({backend}) {f:.3g}"
""",
    "repeat": _BITS
    + _OUTS
    + """def check(graph, args, backend):
    fn = torch.compile(graph, backend=backend)
    with torch.no_grad():
        runs = [outs(fn(*args)) for _ in range(8)]
    n = max(sum(int((bits(a) != bits(b)).sum()) for a, b in zip(runs[0], r)) for r in runs[1:])
    return n > 0, f"up to {n} elements differ between 8 calls of the same fused ({backend}) function"
""",
    "diff": _OUTS
    + """def kind(t):  # 5 NaN, 4 -inf, 3 +inf, 2 -0, 1 +0, 0 finite nonzero
    neg = torch.signbit(t)
    sign = lambda a, b: torch.where(neg, a, b)
    return torch.where(t.isnan(), 5, torch.where(t.isinf(), sign(4, 3), torch.where(t == 0, sign(2, 1), 0)))
TOL = {torch.float16: (1e-2, 1e-4), torch.bfloat16: (4e-2, 1e-3), torch.float32: (1e-4, 1e-6), torch.float64: (1e-9, 1e-12)}
def wrong(e, f, r, c=None, j=None, free=None, tied=None):  # judged on the host, whatever device ran the
    # paths; c: r rounded at the casts; j: fp64 runs with every intermediate moved by a rounding's worth
    # (Jitter); free: where the class follows the sign of a reduction's zero (reduction_zero_signs) or
    # which of tied NaNs an index names, not judged; tied: where the value follows the latter (nan_ties)
    e, f, r, c = e.cpu(), f.cpu(), r.cpu(), (r if c is None else c).cpu()
    free = torch.zeros(f.shape, dtype=torch.bool) if free is None else free.cpu()
    tied = torch.zeros(f.shape, dtype=torch.bool) if tied is None else tied.cpu()
    if f.dtype == torch.bool:  # a class test: against the run rounded at the program's casts (c), where given
        return (f != e) & (f != c.to(f.dtype)) & ~free & ~tied
    if not f.is_floating_point():  # wrong only where fp64 does not side with fused (ties, fp32 math)
        return (f != e) & (f != r.to(f.dtype)) & ~tied
    rk, ck = kind(r.to(f.dtype)), kind(c.to(f.dtype))
    r = r.to(torch.float64)
    fin = torch.isfinite(r) & torch.isfinite(f) & torch.isfinite(e)
    rtol, afac = TOL[f.dtype]
    scale = float(r[fin].abs().max()) if bool(fin.any()) else 0.0
    tol = (rtol * r.abs() + afac * scale) * REDUCTION**0.5
    # eager's rounding noise at the scale of its row: its largest error there (one lucky element of
    # a bf16 dot product can sit far closer to fp64 than its neighbours)
    ed = torch.where(fin, (e.double() - r).abs(), 0.0)
    # and how far roundings anywhere in the program can move the row (a softmax over near-tied
    # logits, a cancellation): where the output is that ill-conditioned, eager's luck is no yardstick
    for t in j or ():
        t = t.cpu().double()
        ed = torch.maximum(ed, torch.where(fin & torch.isfinite(t), (t - r).abs(), 0.0))
    noise = ed.amax(dim=-1, keepdim=True) if ed.dim() > 0 and ed.numel() > 0 else ed
    value = fin & ((f.double() - r).abs() > tol + 4 * noise)
    kf, ke = kind(f), kind(e)
    # a zero against a finite nonzero value is judged by value (a remainder of 0 or of one ULP is
    # rounding); a class difference (NaN, +-inf, the sign of a zero) only where eager has fp64's class
    zero_or_finite = lambda k: k <= 2
    by_value = zero_or_finite(kf) & zero_or_finite(ke) & ((kf == 0) != (ke == 0))
    # eager's inf or NaN is trusted also where the fp64 run rounded at the program's own 16-bit casts
    # has it: the program as written overflows there, whatever the exact value would be
    trusted = (ke == rk) | ((ke == ck) & (ke >= 3))
    return (((kf != ke) & trusted & ~by_value & ~free) | value) & ~tied
class Casts(torch.overrides.TorchFunctionMode):
    # records the program's conversions of a float to float16/bfloat16 (numbered among its float
    # conversions); given them, a float64 run rounds each such result to that dtype, kept in float64
    # (a cast spelled x.dtype or type_as is a no-op there); implicit 16-bit arithmetic is not rounded
    def __init__(self, casts=None):
        super().__init__()
        self.casts, self.record, self.n = dict(casts or {}), casts is None, 0
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out, x = func(*args, **(kwargs or {})), (args[0] if args else None)
        named = getattr(func, "__name__", "") in ("to", "type", "type_as", "half", "bfloat16")
        if named and isinstance(x, torch.Tensor) and isinstance(out, torch.Tensor) and x.is_floating_point():
            if self.record and out.dtype in (torch.float16, torch.bfloat16) and out.dtype != x.dtype:
                self.casts[self.n] = out.dtype
            elif not self.record and self.n in self.casts and out.dtype == torch.float64:
                out = out.to(self.casts[self.n]).double()
            self.n += 1
        return out
    def run(self, graph, xs):
        with self:
            return outs(graph(*xs))
def reference(graph, args, casts=None):  # fp64 where the inputs are, on the host where that device lacks an fp64 kernel
    up = [a.double() if a.is_floating_point() else a for a in args]
    where = str(up[0].device) if up else "cpu"
    run = (lambda xs: outs(graph(*xs))) if casts is None else (lambda xs: Casts(casts).run(graph, xs))
    try:
        out = run(up)
    except (RuntimeError, NotImplementedError, TypeError):
        if where == "cpu":
            raise
        out, where = run([a.cpu() for a in up]), "cpu"
    REFERENCE["device"] = where
    return out
REFERENCE = {"device": ""}
"""
    + JITTER
    + _ROUNDOFF
    + """class Faithful(torch.utils._python_dispatch.TorchDispatchMode):
    # the dtype-faithful reference: every op with a float operand below fp64 is computed in fp64 from
    # its operands and each result rounded to the dtype eager gives it (a float16 product that
    # overflows is inf here, as in eager, while plain fp64 never overflows). Views run as they are;
    # an in-place op writes its fp64 result back rounded. With u = +1 or -1, each float result is
    # scaled by 1 + u eps (eps of its dtype) before the rounding: every step moved by about one ULP
    # up, or down, so that a class one rounding decides (a jump of fmod or floor, a sum at the edge of
    # overflow) differs between the runs
    def __init__(self, u=0):
        super().__init__()
        self.u = u
    def _round(self, o, like):
        if not (isinstance(o, torch.Tensor) and isinstance(like, torch.Tensor)) or o.shape != like.shape:
            return like
        if like.is_floating_point() and o.is_floating_point() and o.numel() and self.u:
            o = o.double() * (1 + self.u * torch.finfo(like.dtype).eps)
        return o.to(like.dtype)
    def _rounded(self, o64, eager):  # the fp64 results, each rounded as eager's (eager's where they do not pair)
        tree = torch.utils._pytree
        fe, se = tree.tree_flatten(eager)
        fo = tree.tree_flatten(o64)[0]
        return eager if len(fe) != len(fo) else tree.tree_unflatten([self._round(o, e) for o, e in zip(fo, fe)], se)
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tree = torch.utils._pytree
        flat, spec = tree.tree_flatten((args, kwargs))
        low = lambda a: isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != torch.float64
        schema = func._schema
        if not any(map(low, flat)) or (any(r.alias_info is not None for r in schema.returns) and not schema.is_mutable):
            return func(*args, **kwargs)
        up = [a.double() if low(a) else a for a in flat]
        a64, k64 = tree.tree_unflatten(up, spec)
        if schema.is_mutable:  # in place or out=: the fp64 copies are written, then copied back rounded
            written = [k for k, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
            if not written:
                return func(*args, **kwargs)
            # an op that writes some arguments and returns new tensors (batch norm in training mode
            # writes its running statistics): its own results, rounded as eager's, not a written argument
            fresh = bool(schema.returns) and any(r.alias_info is None for r in schema.returns)
            eager = func(*args, **kwargs) if fresh else None
            try:
                o64 = func(*a64, **k64)
            except (RuntimeError, NotImplementedError, TypeError):
                return eager if fresh else func(*args, **kwargs)
            for k in written:
                name = schema.arguments[k].name
                a = args[k] if k < len(args) else kwargs.get(name)
                b = a64[k] if k < len(a64) else k64.get(name)
                if low(a):
                    a.copy_(b)
            if fresh:
                return self._rounded(o64, eager)
            first = args[written[0]] if written[0] < len(args) else kwargs.get(schema.arguments[written[0]].name)
            return first
        eager = func(*args, **kwargs)
        try:
            o64 = func(*a64, **k64)
        except (RuntimeError, NotImplementedError, TypeError):
            return eager
        return self._rounded(o64, eager)
def faithful(graph, make):  # per output, the dtype-faithful runs: as is, every step one ULP up, one down
    out = []
    for u in (0, 1, -1):
        with Faithful(u):
            out.append(outs(graph(*make())))
    return [list(t) for t in zip(*out)]
def class_changed(e, f, ds, free=None):  # fused's class (a bool's value) differs from eager's where eager
    # has the dtype-faithful reference's class in every run of it, plain and jittered (a class that a
    # rounding's worth of error flips, a comparison of a near-tie, is not judged here), and where that
    # class does not follow the sign of a reduction's zero (free, from reduction_zero_signs)
    e, f = e.cpu(), f.cpu()
    free = torch.zeros(f.shape, dtype=torch.bool) if free is None else free.cpu()
    if f.dtype == torch.bool:
        return (f != e) & torch.stack([d.cpu() == e for d in ds]).all(0) & ~free
    if not f.is_floating_point():
        return torch.zeros(f.shape, dtype=torch.bool)
    kf, ke = kind(f), kind(e)
    same = torch.stack([kind(d.cpu().to(f.dtype)) == ke for d in ds]).all(0)
    zero_or_finite = lambda k: k <= 2
    by_value = zero_or_finite(kf) & zero_or_finite(ke) & ((kf == 0) != (ke == 0))
    return (kf != ke) & same & ~by_value & ~free
class ReductionZeroSigns(torch.utils._python_dispatch.TorchDispatchMode):
    # an eager run where every zero a reduction returns has the sign given (+0.0 or -0.0). Whether a sum
    # of zeros is +0 or -0 is its accumulator's and its order's (+0 + -0 is +0, a sum from a +0 start is
    # +0, a max or min of +0 and -0 is whichever came first): no program fixes it, so an output whose
    # class changes with it is not judged on that class. Both signs are forced, in two runs, rather than
    # each zero flipped: two chained reductions would flip a zero twice, back to eager's sign. A
    # pointwise op's zero keeps its sign here (atan2(-0, 1) is -0 by definition, and judged)
    def __init__(self, sign=0.0):
        super().__init__()
        self.sign = sign
    REDUCTIONS = {"sum", "nansum", "mean", "nanmean", "prod", "cumsum", "cumprod", "logcumsumexp", "mm", "bmm",
                  "addmm", "addmv", "addbmm", "baddbmm", "mv", "dot", "vdot", "amax", "amin", "max", "min",
                  "cummax", "cummin", "median", "nanmedian", "kthvalue", "mode", "trace", "convolution",
                  "_convolution", "index_add", "index_put", "_index_put_impl", "scatter_add", "scatter_reduce",
                  "index_reduce", "segment_reduce", "_segment_reduce", "embedding_bag", "_embedding_bag",
                  # and the ops that sum or take a maximum inside: pools, interpolation's weighted sums,
                  # the statistics of the norms, the mean or sum of a loss, vector norms
                  "avg_pool2d", "avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d",
                  "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_max_pool2d", "adaptive_max_pool3d",
                  "upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d",
                  "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa", "native_layer_norm", "native_group_norm",
                  "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                  "_fused_rms_norm", "huber_loss", "mse_loss", "smooth_l1_loss", "soft_margin_loss",
                  "binary_cross_entropy", "binary_cross_entropy_with_logits", "nll_loss_forward",
                  "nll_loss2d_forward", "multi_margin_loss", "multilabel_margin_loss_forward", "linalg_vector_norm",
                  "norm", "std", "var", "std_mean", "var_mean", "logsumexp"}
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._schema.name.split("::")[-1]
        if name not in self.REDUCTIONS or func._schema.is_mutable or func._overloadname == "other":
            return out  # max.other and min.other are pointwise
        if name in ("index_put", "_index_put_impl") and not (args[3] if len(args) > 3 else (kwargs or {}).get("accumulate")):
            return out  # a plain index_put writes its values as they are; only accumulate=True sums
        force = lambda t: (torch.where(t == 0, torch.full_like(t, self.sign), t)
                           if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
        return torch.utils._pytree.tree_map(force, out)
def reduction_zero_signs(graph, make, eager):  # per output, where its class (a bool's value) changes
    # when every reduction's zeros are +0, or when they are all -0; None where a run fails
    runs = []
    for sign in (0.0, -0.0):
        try:
            with ReductionZeroSigns(sign):
                runs.append(outs(graph(*make())))
        except Exception:
            return None
    out = []
    for k, e in enumerate(eager):
        e = e.cpu()
        moved = torch.zeros(e.shape, dtype=torch.bool)
        for run in runs:
            d = run[k] if k < len(run) else e
            d = d.cpu() if isinstance(d, torch.Tensor) and d.shape == e.shape and d.dtype == e.dtype else e
            if e.is_floating_point():
                moved |= kind(d) != kind(e)
            elif e.dtype == torch.bool:
                moved |= d != e
        out.append(moved)
    return out
class NaNTies(torch.utils._python_dispatch.TorchDispatchMode):
    # an eager run where an index that names a NaN maximum (minimum) tied with another NaN of its row
    # or window names another of them: which of tied NaNs argmax, max over a dim or a max pool returns
    # is unspecified (eager's CPU pool takes the last, Inductor the first), so an output that changes
    # with it is not judged. The op runs again with the named element knocked out (-inf for a max,
    # +inf for a min): where its result is still NaN the row held another NaN, and that one is named.
    # A max pool's window is tied also where another element equals its maximum (+0 and -0 included):
    # which of them a pool names is documented nowhere, while argmax and max over a dim document the
    # first, so their finite ties are judged. An index of a NaN alone in its window, or of a maximum
    # alone in it, keeps its value (and is judged)
    POOLS = {"max_pool2d_with_indices": 2, "max_pool3d_with_indices": 3, "adaptive_max_pool2d": 2,
             "adaptive_max_pool3d": 3}
    def __init__(self):
        super().__init__()
        self.moved = False
    def _strides(self, name, args, x, values, k):  # per pooled dim, how many windows apart never overlap
        if name.startswith("adaptive"):  # window i: [floor(i L / O), ceil((i + 1) L / O))
            return [min(o, -(-o // n) + 1) for n, o in zip(x.shape[-k:], values.shape[-k:])]
        get = lambda i, d: list(args[i]) if len(args) > i and len(args[i]) else d
        kernel = get(1, None)
        kernel = kernel * k if len(kernel) == 1 else kernel
        stride, dilation = get(2, kernel), get(4, [1])
        stride, dilation = (v * k if len(v) == 1 else v for v in (stride, dilation))
        return [-(-(dl * (kk - 1) + 1) // st) for kk, st, dl in zip(kernel, stride, dilation)]
    def _pool(self, func, args, kwargs, out, k):  # windows that share no element are knocked out together
        x, (values, idx) = args[0], out
        name = func._schema.name.split("::")[-1]
        shape = values.shape[-k:]
        tied, new = torch.zeros(values.shape, dtype=torch.bool, device=values.device), idx.clone()
        ms = self._strides(name, args, x, values, k)
        for c in range(int(torch.tensor(ms).prod())):
            sel = torch.ones(shape, dtype=torch.bool, device=values.device)
            for d, (n, m) in enumerate(zip(shape, ms)):
                c, o = divmod(c, m)
                at = [1] * k
                at[d] = n
                sel = sel & (torch.arange(n, device=values.device) % m == o).reshape(at)
            sel = sel.expand(values.shape)
            named = torch.zeros(x.flatten(-k).shape, dtype=torch.long, device=x.device)
            named = named.scatter_add(-1, idx.flatten(-k), sel.flatten(-k).long())
            hole = torch.where(named > 0, -float("inf"), x.flatten(-k)).reshape(x.shape)
            values2, idx2 = func(hole, *args[1:], **kwargs)
            both = sel & ((values.isnan() & values2.isnan()) | (values2 == values))  # a NaN or equal max besides
            tied, new = tied | both, torch.where(both, idx2, new)
        return tied, (values, new)
    def _dim(self, name, args, kwargs, out):
        x = args[0]
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        idx = out if name in ("argmax", "argmin") else out[1]
        row, d = (x.reshape(-1), 0) if dim is None else (x, dim % x.dim())
        i = idx.reshape(1) if dim is None else idx if keep else idx.unsqueeze(d)
        fill = -float("inf") if name in ("max", "argmax") else float("inf")
        hole = row.scatter(d, i, fill)
        i2 = (torch.argmax if fill < 0 else torch.argmin)(hole, d, keepdim=True)
        tied = row.gather(d, i).isnan() & hole.gather(d, i2).isnan()
        new = torch.where(tied, i2, i).reshape(idx.shape)
        return tied, (new if name in ("argmax", "argmin") else (out[0], new))
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name, x = func._schema.name.split("::")[-1], args[0] if args else None
        if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() > 0 and x.numel() > 1):
            return out
        if name in self.POOLS:
            tied, new = self._pool(func, args, kwargs, out, self.POOLS[name])
        elif name in ("argmax", "argmin") or (name in ("max", "min") and func._overloadname == "dim"):
            tied, new = self._dim(name, args, kwargs, out)
        else:
            return out
        if not bool(tied.any()):
            return out
        self.moved = True
        return new
def nan_ties(graph, make, eager):  # per output, where it changes when each index of tied NaNs names
    # another of them (NaNTies); None where no index named a tied NaN or that run fails
    mode = NaNTies()
    try:
        with mode:
            moved = outs(graph(*make()))
    except Exception:
        return None
    if not mode.moved:
        return None
    out = []
    for e, d in zip(eager, moved):
        e = e.cpu()
        d = d.cpu() if isinstance(d, torch.Tensor) and d.shape == e.shape and d.dtype == e.dtype else e
        same = (d == e) & (torch.signbit(d) == torch.signbit(e)) if e.is_floating_point() else d == e
        out.append(~(same | (d.isnan() & e.isnan())) if e.is_floating_point() else ~same)
    return out
def nudged(t, how, g):  # finite nonzero elements one ULP away (up, down or at random), class kept
    if not t.is_floating_point():
        return t
    up = torch.nextafter(t, torch.full_like(t, float("inf")))
    down = torch.nextafter(t, torch.full_like(t, -float("inf")))
    pick = up if how == "up" else down if how == "down" else torch.where(
        torch.rand(t.shape, generator=g, dtype=torch.float64).to(t.device) < 0.5, up, down)
    keep = ~torch.isfinite(t) | (t == 0) | ~torch.isfinite(pick) | (pick == 0) | (torch.signbit(pick) != torch.signbit(t))
    return torch.where(keep, t, pick)
def inconsistent(graph, make, fused, free=lambda j: None):  # (i, j, mask, recomputed): a float or bool
    # output j the program computes from its output i, recomputed in eager from fused's output i (as
    # returned, and nudged by one ULP up, down and at random, so a tie or a rounding's worth cannot
    # decide it), whose class (a bool's value) differs from fused's output j in every such
    # recomputation; free(j): where output j's class follows the sign of a reduction's zero or which
    # of tied NaNs an index names, not judged
    if len(fused) < 2:
        return None
    try:  # Python-level tracing (fast) where the program is straight-line, else ATen-level
        gm = torch.fx.symbolic_trace(graph)
    except Exception:
        from torch.fx.experimental.proxy_tensor import make_fx
        try:
            gm = make_fx(graph)(*make())
        except Exception:
            return None
    ret = torch.utils._pytree.tree_flatten(next(n for n in gm.graph.nodes if n.op == "output").args[0])[0]
    nodes = [n if isinstance(n, torch.fx.Node) else None for n in ret]
    if len(nodes) != len(fused):
        return None
    def ancestors(n):
        seen, todo = set(), [n]
        while todo:
            for m in todo.pop().all_input_nodes:
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        return seen
    g = torch.Generator().manual_seed(0)
    for j, nj in enumerate(nodes):
        fj = fused[j].cpu()
        if nj is None or nj.op == "placeholder" or not (fj.is_floating_point() or fj.dtype == torch.bool):
            continue
        above = ancestors(nj)
        for i, ni in enumerate(nodes):
            if i == j or ni is None or ni is nj or ni not in above or ni.op == "placeholder":
                continue
            again = []
            for how in ("as", "up", "down", "random", "random"):
                value = fused[i] if how == "as" else nudged(fused[i], how, g)
                sub = torch.fx.Interpreter(gm)
                try:
                    got = torch.utils._pytree.tree_flatten(sub.run(*make(), initial_env={ni: value.clone()}))[0][j]  # a node given is not run
                except Exception:
                    break
                if not isinstance(got, torch.Tensor) or got.shape != fj.shape or got.dtype != fj.dtype:
                    break
                again.append(got.cpu())
                if len(again) == 1 and not bool(
                    (again[0] != fj).any() if fj.dtype == torch.bool else class_changed(again[0], fj, again, free(j)).any()
                ):
                    break  # agrees as returned: nothing to judge, no nudged runs needed
            else:
                if fj.dtype == torch.bool:
                    bad = torch.stack([a != fj for a in again]).all(0)
                    bad = bad if free(j) is None else bad & ~free(j).cpu()
                else:
                    bad = class_changed(again[0], fj, again[1:], free(j))
                if bool(bad.any()):
                    return i, j, bad, again[0]
    return None
def check(graph, args, backend):
    with torch.no_grad():
        ref = reference(graph, args)
        casts = Casts()  # the program's 16-bit casts, from one more eager run
        casts.run(graph, make())
        kept = reference(graph, make(), casts.casts) if casts.casts else ref
        eager = outs(graph(*make()))
        fused = outs(torch.compile(graph, backend=backend)(*make()))
    shapes = lambda ts: [(tuple(t.shape), str(t.dtype)) for t in ts]
    if shapes(fused) != shapes(eager):
        k = next((k for k, (a, b) in enumerate(zip(shapes(eager), shapes(fused))) if a != b), len(eager))
        return True, (f"output {k}: shape or dtype differs: eager {shapes(eager)[k:k + 1]}, "
                      f"fused ({backend}) {shapes(fused)[k:k + 1]}; outputs {len(eager)} vs {len(fused)}")
    jit, signs, ties, decided = None, [], [], []
    def tied(k):  # where output k follows which of tied NaNs an index names: one more eager run, once
        if not ties:
            with torch.no_grad():
                ties.append(nan_ties(graph, make, eager) or [None] * len(eager))
        return ties[0][k]
    def free(k):  # and where its class follows the sign of a reduction's zero: two more eager runs, once
        if not signs:
            with torch.no_grad():
                signs.append(reduction_zero_signs(graph, make, eager) or [None] * len(eager))
        masks = [m.cpu() for m in (signs[0][k], tied(k)) if m is not None]
        return None if not masks else masks[0] if len(masks) == 1 else masks[0] | masks[1]
    def by_rounding(k):  # where output k's value or class a rounding decides: three more fp64 runs, once
        if not decided:
            xs = make()
            with torch.no_grad():
                decided.append(rounding_decided(graph, xs, fused, unit_roundoff(list(xs) + eager)) or [None] * len(eager))
        m = decided[0][k]
        return torch.zeros(eager[k].shape, dtype=torch.bool) if m is None or m.shape != eager[k].shape else m
    for k, (e, f, r, c) in enumerate(zip(eager, fused, ref, kept)):
        bad = wrong(e, f, r, c)
        if bool(bad.any()) and f.is_floating_point():  # only then: three more fp64 runs
            if jit is None:
                xs = make()
                jit = jittered(graph, xs, unit_roundoff(list(xs) + eager))
            bad = wrong(e, f, r, c, jit[k])
        if bool(bad.any()):
            bad = wrong(e, f, r, c, None if jit is None else jit[k], free(k), tied(k))
        if bool(bad.any()):
            bad = bad & ~by_rounding(k)
        if bool(bad.any()):
            i = tuple(int(v) for v in bad.nonzero()[0])
            return True, (f"output {k}: {int(bad.sum())} of {bad.numel()} elements wrong; at {i}: eager "
                          f"{e[i].item()!r}, fused ({backend}) {f[i].item()!r}, fp64 {(c if f.dtype == torch.bool else r)[i].item()!r}")
    changed = [class_changed(e, f, [e]) for e, f in zip(eager, fused)]  # candidates: a class unlike eager's
    if any(bool(m.any()) for m in changed):
        with torch.no_grad():
            ds = faithful(graph, make)
        for k, (e, f, d, r) in enumerate(zip(eager, fused, ds, ref)):
            bad = class_changed(e, f, d)
            if bool(bad.any()):
                bad = class_changed(e, f, d, free(k))
            if bool(bad.any()):
                bad = bad & ~by_rounding(k)
            if bool(bad.any()):
                i = tuple(int(v) for v in bad.nonzero()[0])
                return True, (f"output {k}: {int(bad.sum())} of {bad.numel()} elements change class against the "
                              f"dtype-faithful reference; at {i}: eager {e[i].item()!r}, fused ({backend}) "
                              f"{f[i].item()!r}, dtype-faithful {d[0][i].item()!r}, fp64 {r[i].item()!r}")
    with torch.no_grad():
        found = inconsistent(graph, make, fused, free)
    if found is not None:
        i, j, bad, again = found
        at = tuple(int(v) for v in bad.nonzero()[0])
        return True, (f"output {j}: {int(bad.sum())} of {bad.numel()} elements inconsistent with fused output {i}; "
                      f"at {at}: fused ({backend}) {fused[j][at].item()!r}, eager from fused output {i} "
                      f"{again[at].item()!r}")
    return False, f"every output agrees with eager and fp64 ({backend})"
""",
    "compiled": """def check(graph, args, backend):
    from torch._inductor import config, metrics

    config.fx_graph_cache = False  # a cache hit generates no code either
    before = metrics.generated_kernel_count
    with torch.no_grad():
        torch.compile(graph, backend=backend)(*args)
    n = metrics.generated_kernel_count - before
    return n == 0, f"the fused path ({backend}) generated {n} kernels"
""",
}
