"""difftest opinfo seed 580130 (float16, tiny): rule 'diff'. Exits 1 while it reproduces. Usage: python repro.py [BACKEND]"""
import sys
import torch
if __name__ == "__main__":  # the tester marked dim 0 of input 0 dynamic
    _compile = torch.compile
    def _marked(fn, **kwargs):
        compiled = _compile(fn, **kwargs)
        def call(*args):
            torch._dynamo.maybe_mark_dynamic(args[0], 0)
            return compiled(*args)
        return call
    torch.compile = _marked
REDUCTION = 780  # longest reduction in the graph

def graph(f0, f1, f2, f3, f4, f5, f6, f7):
    v0 = torch.unbind(f0, 0)
    v1 = v0[0]
    v2 = v0[1]
    v3 = v0[2]
    v4 = torch.tensordot(v1.flatten().repeat(4)[:4].reshape((2, 2, 1)), f1, dims=([0, 1], [2, 0]))
    v5 = torch._native_batch_norm_legit(v4.flatten().repeat(125)[:125].reshape((5, 5, 5)), f2, f3, f4, f5, True, 0.5, 0.6)
    v6 = v5[0]
    v7 = v5[1]
    v8 = v5[2]
    v9 = torch.grid_sampler_2d(v6.flatten().repeat(5)[:600].reshape((2, 3, 5, 20)), f6, 2, 0, False)
    v10 = torch.remainder(v9, 1e-30) + 0.0
    v11 = torch.sub(v10, 0.0)
    v12 = torch.erf(v11.flatten()[:256].reshape((256,)))
    v13 = torch.where(torch.isnan(v12.to(torch.float64)), v12.to(torch.float64), torch.special.shifted_chebyshev_polynomial_t(v12.to(torch.float64), f7))
    return v3, v7, v8, v13

SPECS = [  # (shape, dtype, seed, layout, scale, values)
    ((5,), torch.float16, 311155430, 'contiguous', 0.00390625, 'normal'),
    ((2, 1, 2), torch.float16, 311163349, 'contiguous', 1.0, 'normal'),
    ((5,), torch.float16, 311171268, 'contiguous', 6.103515625e-05, 'normal'),
    ((5,), torch.float16, 311179187, 'contiguous', 6.103515625e-05, 'normal'),
    ((5,), torch.float16, 311187106, 'contiguous', 4.0, 'normal'),
    ((5,), torch.float16, 311195025, 'contiguous', 6.103515625e-05, 'normal'),
    ((2, 13, 10, 2), torch.float16, 311202944, 'contiguous', 6.103515625e-05, 'normal'),
    ((256,), torch.float64, 311210863, 'contiguous', 1.0, 'normal'),
]
def make():
    out = []
    for shape, dtype, seed, layout, scale, values in SPECS:
        g = torch.Generator().manual_seed(seed)
        base = {"transposed": shape[:-2] + shape[:-3:-1], "broadcast": shape[:-2] + (1,) + shape[-1:],
                "strided": shape[:-1] + (2 * shape[-1],)}.get(layout, tuple(shape))
        n = 1
        for d in base:
            n *= d
        n += 7 if layout == "offset" else 0
        if values == "bool":
            t = torch.rand(n, generator=g, dtype=torch.float64) < 0.5
        elif values in ("int", "index"):
            low = -int(scale) if values == "int" else 0
            t = torch.randint(low, int(scale) + (values == "int"), (n,), generator=g)
        else:
            t = torch.randn(n, generator=g, dtype=torch.float64) * scale
            if values == "grid":
                t = torch.round(t * 10.0) / 10.0
            elif values == "edge":
                fi = torch.finfo(dtype)
                edge = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, -1.0, 0.5,
                                     fi.smallest_normal / 4, fi.max / 2], dtype=torch.float64)
                pick = torch.randint(0, 4 * len(edge), (n,), generator=g)
                t = torch.where(pick < len(edge), edge[pick.clamp(max=len(edge) - 1)], t)
            elif values == "specials":
                salt_specials(t, dtype, g)
        t = t.to(dtype)[7:] if layout == "offset" else t.to(dtype)
        t = t.reshape(base)
        if values == "tail" and t.dim() > 0 and t.shape[-1] > 0:
            sign = 1 - 2 * (torch.arange(t[..., -1].numel()) % 2)
            t[..., -1] = (8 * scale * sign).reshape(t[..., -1].shape).to(dtype)
        if layout == "transposed":
            t = t.transpose(-1, -2)
        elif layout == "broadcast":
            t = t.expand(shape)
        elif layout == "strided":
            t = t[..., ::2]
        elif layout == "channels_last":
            t = t.contiguous(memory_format=torch.channels_last)
        out.append(t)
    return out

def outs(o):
    return list(o) if isinstance(o, (tuple, list)) else [o]
def kind(t):  # 5 NaN, 4 -inf, 3 +inf, 2 -0, 1 +0, 0 finite nonzero
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
class Jitter(torch.overrides.TorchFunctionMode):
    # an fp64 run whose every new floating result is scaled by 1 + d, d uniform within +-u (u: the unit
    # roundoff of the program's narrowest float dtype): a rounding's worth of error at every step, to
    # see how far legitimate roundings move the outputs. Views and in-place results keep their values
    # (the program's aliasing holds). A step that turns a moved value into a jump (floor, round, a
    # remainder, a comparison, an index, a cast to integers) marks the run: such a jump is no measure
    # of rounding noise, and the rule does not widen by a marked run. A remainder whose every quotient
    # exceeds 1 / u is no jump: its divisor's last bits decide it whole, so a rounding's worth anywhere
    # upstream moves it across its range, and the moved runs measure just that. With narrow, results the
    # program keeps below fp64 (its own casts hold in the reference) move too, rounded back to their dtype,
    # each by at least a rounding of that dtype (a float16 part cast from a bool or an integer input is
    # float16 in the reference too, whatever u the program's float inputs and outputs give)
    JUMPS = {"floor", "ceil", "round", "trunc", "frac", "sign", "sgn", "floor_divide", "remainder", "fmod",
             "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__"}
    REMAINDERS = {"remainder": 1, "fmod": 1, "__mod__": 1, "__rmod__": -1}  # -1: the divisor comes first
    def _all_rounding(self, name, args):
        order = self.REMAINDERS.get(name, self.REMAINDERS.get(name.rstrip("_")))
        if order is None or len(args) < 2:
            return False
        a, b = args[:2][::order]
        q = (torch.as_tensor(a, dtype=torch.float64) / torch.as_tensor(b, dtype=torch.float64)).abs()
        return q.numel() > 0 and bool((q > 1 / self.u).all())
    EXACT = {"isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit"}  # a factor 1 + d keeps them
    INTEGRAL = {"floor", "ceil", "trunc", "fix", "sign", "sgn", "round"}  # results no rounding made (round:
    # without decimals): an integer, which a moved run gives as it is, as every compiler does
    def __init__(self, u, seed, narrow=False, exact=False):
        super().__init__()
        self.u, self.seed, self.gens, self.moved, self.jumped, self.narrow = u, seed, {}, set(), False, narrow
        # exact ("up", "down", "random"): each step's result moves by one rounding, to a neighbour (up, down,
        # or either at random per element), and results that are their operands' values as they are (a
        # repeat, a cat, a neg) stay: what a compiler's other roundings can give, and no more
        self.exact = exact
    def _copied(self, out, operands):  # every element is one of the operands' values up to its sign, or a
        # value no factor 1 + d moves (0, an inf, a NaN): the op moved values and rounded none
        vals = [a.detach().reshape(-1).double().cpu() for a in operands if isinstance(a, torch.Tensor) and a.is_floating_point()]
        vals += [torch.tensor([float(a)], dtype=torch.float64) for a in operands if isinstance(a, (int, float)) and not isinstance(a, bool)]
        if not vals:
            return False
        o = out.detach().double().cpu().abs()
        return bool((~torch.isfinite(o) | (o == 0) | torch.isin(o, torch.cat(vals).abs())).all())
    def _moved(self, a):
        return isinstance(a, torch.Tensor) and a.is_floating_point() and a.untyped_storage().data_ptr() in self.moved
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        operands = [*args, *(kwargs or {}).values()]
        if any(self._moved(a) for a in operands) and name not in self.EXACT and not self._all_rounding(name, args) and (
            name in self.JUMPS or name.rstrip("_") in self.JUMPS
            or (isinstance(out, torch.Tensor) and not out.is_floating_point())
            or (isinstance(out, (tuple, list)) and any(isinstance(o, torch.Tensor) and not o.is_floating_point() for o in out))
        ):
            self.jumped = True
        if not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.numel() == 0:
            return out
        if out.dtype != torch.float64 and not self.narrow:
            return out
        if name.endswith("_") or any(
            isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
            for a in args
        ) or (self.exact and self._copied(out, operands)) or (
            name in self.INTEGRAL and not (kwargs or {}).get("decimals") and len(args) < 2
        ):
            return out
        g = self.gens.setdefault(str(out.device), torch.Generator(out.device).manual_seed(self.seed))
        d = torch.rand(out.shape, generator=g, dtype=torch.float64, device=out.device)
        u = max(self.u, UNIT_ROUNDOFF.get(out.dtype, 0.0))  # at least a rounding of its own dtype
        o = out.double()
        if self.exact:  # one rounding each: o +- o u lands on a neighbour (o (1 +- u) would not: 1 +- u
            # rounds in fp64), up, down, or either at random per element; an inf or a NaN stays
            step = {"up": u, "down": -u}.get(self.exact, torch.where(d < 0.5, -u, u))
            out = torch.where(torch.isfinite(o), o + o * step, o).to(out.dtype)
        else:
            out = (o * (1 + u * (2 * d - 1))).to(out.dtype)
        self.moved.add(out.untyped_storage().data_ptr())
        return out
def jittered(graph, args, u, runs=3):  # per output, its jittered runs; none where a run jumped. The
    # program's parts below fp64 move too unless that makes a run jump; then only its fp64 results move
    for narrow in (True, False):
        out = []
        for seed in range(runs):  # fresh inputs per run: the program may write into them
            up = [a.double() if a.is_floating_point() else a.clone() for a in args]
            mode = Jitter(u, seed, narrow)
            with mode:
                out.append(outs(graph(*up)))
            if mode.jumped:
                break
        else:
            return [list(t) for t in zip(*out)]
    return [[] for _ in out[0]]
def rounded_runs(graph, args, u, runs=3):  # (the fp64 run, its moved runs): every step's result one
    # rounding up, one down, then each element's either way at random (runs seeds); results that copy
    # their operands' values stay (Jitter's exact), and a run that jumps is kept. None where a run fails
    fresh = lambda: [(a.double() if a.is_floating_point() else a).clone() for a in args]  # the program may write into them
    try:
        base = outs(graph(*fresh()))
        moved = []
        for seed, how in enumerate(["up", "down"] + ["random"] * runs):
            xs = fresh()  # made outside the mode: the inputs are the program's, not a step of it
            with Jitter(u, seed, True, how):
                moved.append(outs(graph(*xs)))
    except Exception:
        return None
    return base, moved
def rounding_decided(graph, args, fused, u, runs=3):  # per output, where fused gives what a rounding
    # decides: a moved run (rounded_runs) gives an integer or a bool another value than the same fp64
    # run unmoved, and fused's value is one of the moved runs' (a float: another class, where either is
    # an inf or a NaN, and fused's class is a moved run's; or another finite value, where fused's is
    # exactly a moved run's, as a trunc, floor or round of a value a rounding carries across an
    # integer). The zero pivot of a singular matrix follows the last bit of its entries, and the sign
    # of the infs its solve gives with it: no measure of the compiler. An index no moved run gives (an
    # argmax of distinct values), a finite value no moved run gives and a zero's sign stay judged; None
    # where a run fails
    got = rounded_runs(graph, args, u, runs)
    if got is None:
        return None
    base, moved = got
    out = []
    for k, (e, f) in enumerate(zip(base, fused)):
        same = [m[k].cpu() for m in moved if isinstance(m[k], torch.Tensor) and isinstance(e, torch.Tensor) and m[k].shape == e.shape]
        if len(same) < len(moved) or f.shape != e.shape:
            out.append(None)
            continue
        e, f = e.cpu().to(f.dtype), f.cpu()
        if f.is_floating_point():
            ke, kf = kind(e), kind(f)
            finite = torch.isfinite(e) & torch.isfinite(f)
            hits = [((kind(m) != ke) & (kind(m) == kf) & ((kf >= 3) | (ke >= 3))) | (finite & (m != e) & (m == f))
                    for m in (t.to(f.dtype) for t in same)]
        else:
            hits = [(t.to(f.dtype) != e) & (t.to(f.dtype) == f) for t in same]
        out.append(torch.stack(hits).any(0))
    return out
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24, torch.float64: 2.0**-53}  # u = 2^-p of each format (p significand bits)
def unit_roundoff(ts):  # of the narrowest float dtype below fp64 among ts (fp64's when none)
    return max([UNIT_ROUNDOFF.get(t.dtype, 0.0) for t in ts] + [UNIT_ROUNDOFF[torch.float64]])
class Faithful(torch.utils._python_dispatch.TorchDispatchMode):
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
            try:
                func(*a64, **k64)
            except (RuntimeError, NotImplementedError, TypeError):
                return func(*args, **kwargs)
            for k in written:
                name = schema.arguments[k].name
                a = args[k] if k < len(args) else kwargs.get(name)
                b = a64[k] if k < len(a64) else k64.get(name)
                if low(a):
                    a.copy_(b)
            first = args[written[0]] if written[0] < len(args) else kwargs.get(schema.arguments[written[0]].name)
            return first
        eager = func(*args, **kwargs)
        try:
            o64 = func(*a64, **k64)
        except (RuntimeError, NotImplementedError, TypeError):
            return eager
        fe, se = tree.tree_flatten(eager)
        fo = tree.tree_flatten(o64)[0]
        if len(fe) != len(fo):
            return eager
        return tree.tree_unflatten([self._round(o, e) for o, e in zip(fo, fe)], se)
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
    # an eager run where every zero a reduction returns has the other sign. Whether a sum of zeros is
    # +0 or -0 is its accumulator's and its order's (+0 + -0 is +0, a sum from a +0 start is +0, a
    # max or min of +0 and -0 is whichever came first): no program fixes it, so an output whose class
    # changes with it is not judged on that class. A pointwise op's zero keeps its sign here
    # (atan2(-0, 1) is -0 by definition, and judged)
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
        flip = lambda t: torch.where(t == 0, -t, t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
        return torch.utils._pytree.tree_map(flip, out)
def reduction_zero_signs(graph, make, eager):  # per output, where its class (a bool's value) changes
    # when every reduction's zeros change sign; None where that run fails
    try:
        with ReductionZeroSigns():
            flipped = outs(graph(*make()))
    except Exception:
        return None
    out = []
    for e, d in zip(eager, flipped):
        e = e.cpu()
        d = d.cpu() if isinstance(d, torch.Tensor) and d.shape == e.shape and d.dtype == e.dtype else e
        out.append(kind(d) != kind(e) if e.is_floating_point() else d != e if e.dtype == torch.bool
                   else torch.zeros(e.shape, dtype=torch.bool))
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
    def free(k):  # and where its class follows the sign of a reduction's zero: one more eager run, once
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

if __name__ == '__main__':
    reproduces, message = check(graph, make(), sys.argv[1] if len(sys.argv) > 1 else 'inductor')
    print(('REPRODUCES: ' if reproduces else 'clean: ') + message)
    sys.exit(int(reproduces))
