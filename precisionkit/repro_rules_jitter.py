"""The diff rule's fp64 runs moved by roundings, as Python source pasted into the rule
(:data:`precisionkit.repro_rules.CHECKS`): ``Jitter`` (every step's new float result moved by up to a
rounding, a run that turns a moved value into a jump marked), ``jittered`` (per output, the jittered
runs that did not jump), ``rounded_runs`` (the fp64 run and its runs moved by exactly one rounding per
step, all up, all down and at random, copies of operands' values left alone) and ``rounding_decided``
(where an integer, a bool, a float's inf/NaN class or its finite value is one a rounding decides and
fused gives a value a moved run gives). Kept apart from the rest of the rule for its length only: it runs where the rule runs.
"""

JITTER = """class Jitter(torch.overrides.TorchFunctionMode):
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
"""
