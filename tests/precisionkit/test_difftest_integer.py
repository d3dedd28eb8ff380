"""The typed generator's integer and bool results (issue 41): min / max / amin / amax / argmin /
argmax over bool, int8, uint8, int32 and int64 values with ties, with and without ``dim``, and the
class tests isinf / isnan / isfinite with ``torch.where`` reading them. Generating compiles
nothing; the programs below run eagerly only."""

from __future__ import annotations

import functools
import re

import torch

from precisionkit import difftest
from precisionkit.difftest import typed
from precisionkit.difftest.features import feature_frequencies
from precisionkit.repro import namespace


def _runs(case) -> bool:
    """Whether eager runs the program: a few float16 programs of the float ops fill or mask-fill
    2**20, which float16 cannot hold (seeds 72, 162, 208, 214 of the first 300; invalid before the
    integer ops, and left out here)."""
    scope = namespace(case)
    try:
        with torch.no_grad():
            scope["graph"](*scope["make"]())
    except RuntimeError as exc:
        assert "cannot be converted to type c10::Half" in str(exc), (case.id, exc)
        return False
    return True


@functools.cache
def _sample() -> tuple:
    """A fixed sample of typed programs (those eager runs), made once, when a test first asks: at import it cost
    every pytest worker's collection about 3 s, also where no test of this file runs."""
    return tuple(c for c in (difftest.generate(s, "typed") for s in range(300)) if _runs(c))


NEW_FEATURES = ("integer_reduction", "full_reduction", "amin", "isinf_isnan", "where_class", "small_int_dtype")
_OPS = r"(argmin|argmax|amin|amax|min|max)"
#: a reduction line of an integer or bool input: (value, op, input, .values / .indices) by torch.op,
#: or (value, input, op) by the method of a full reduction
_REDUCE = re.compile(
    rf"^    (v\d+) = (?:torch\.{_OPS}\(([ib]\d+)\b[^\n]*?\)(\.values|\.indices)?|([ib]\d+)(?:\.to\(torch\.uint8\))?\.{_OPS}\(\))$"
)


def _outputs(case):
    scope = namespace(case)
    with torch.no_grad():
        got = scope["graph"](*scope["make"]())
    names = case.source.rstrip().splitlines()[-1].removeprefix("    return ").split(", ")
    return dict(zip(names, got if isinstance(got, tuple) else (got,), strict=True))


def test_a_seeded_sample_holds_every_new_op_form_and_operand_dtype() -> None:
    src = "\n".join(c.source for c in _sample())
    for form in (
        r"torch\.argmin\([ib]\d+\S*, dim=",
        r"torch\.argmax\([ib]\d+\S*, dim=",
        r"[ib]\d+(?:\.to\(torch\.uint8\))?\.argm(?:in|ax)\(\)",
        r"torch\.min\([ib]\d+, dim=-?\d, keepdim=\w+\)\.indices",
        r"torch\.max\([ib]\d+, dim=-?\d, keepdim=\w+\)\.values",
        r"torch\.(?:min|max)\([ib]\d+\)$",
        r"torch\.amin\([ib]\d+, dim=\(0, 1\)",
        r"torch\.amax\([ib]\d+, dim=-?\d",
        r"torch\.am(?:in|ax)\([ib]\d+\)$",
        r"b\d+\.to\(torch\.uint8\)",  # argmin / argmax of a bool mask, as bytes
        r"torch\.isinf\(",
        r"torch\.isnan\(",
        r"torch\.isfinite\(",
        r"torch\.where\(torch\.is(?:inf|nan|finite)\(",
        r"\* [\d.e+]+\)\.to\(torch\.float16\)",  # past float16's range, then cast: infinities
    ):
        assert re.search(form, src, re.M), form
    sample = _sample()
    reduced = {m.group(3) or m.group(5) for c in sample for m in map(_REDUCE.match, c.source.splitlines()) if m}
    dtypes = {i.dtype for c in sample for i in c.inputs if i.name in reduced}
    assert dtypes == {"bool", "int8", "uint8", "int32", "int64"}
    assert all(set(NEW_FEATURES) & difftest.features_of(c) for c in sample if c.source.count("torch.is") > 0)


def test_integer_inputs_of_reductions_have_few_distinct_values() -> None:
    """Ties decide which index is first: most reduced integer inputs hold at most 7 values."""
    small = total = 0
    for case in _sample()[:120]:
        names = {m.group(3) or m.group(5) for m in map(_REDUCE.match, case.source.splitlines()) if m}
        args = dict(zip([i.name for i in case.inputs], namespace(case)["make"](), strict=True))
        for name in names & {i.name for i in case.inputs if i.values == "int"}:
            total += 1
            small += int(args[name].unique().numel() <= 7)
    assert total >= 20 and small >= 0.6 * total, (small, total)


def test_reductions_over_int8_uint8_and_bool_keep_or_index_their_dtype() -> None:
    """Values (min / max ``.values``, amin, amax, the full min / max) keep the input's dtype;
    indices (argmin, argmax, ``.indices``) are int64. Read from the eager outputs of the sample."""
    seen = set()
    for case in _sample()[:150]:
        lines = {m.group(1): m for m in map(_REDUCE.match, case.source.splitlines()) if m}
        dtypes = {i.name: i.dtype for i in case.inputs}
        narrow = {n: m for n, m in lines.items() if dtypes.get(m.group(3) or m.group(5)) in ("int8", "uint8", "bool")}
        if not narrow:
            continue
        got = _outputs(case)
        for name, m in narrow.items():
            op, arg = m.group(2) or m.group(6), m.group(3) or m.group(5)
            index = op.startswith("arg") or m.group(4) == ".indices"
            want = torch.int64 if index else getattr(torch, dtypes[arg])
            assert got[name].dtype == want, (case.id, m.group(0))
            seen.add((dtypes[arg], index))
    assert seen == {(d, i) for d in ("int8", "uint8", "bool") for i in (True, False)}


def test_class_tests_of_specials_inputs_find_specials() -> None:
    """A specials input of at least 7 elements stored whole (contiguous or transposed: a strided,
    offset or broadcast one reads part of its salted buffer) holds +-inf and NaN (one element in 64,
    at least one of each): its isinf and isnan masks have a True, its isfinite mask a False; the
    float16 overflow gives infinities in most programs."""
    checked, overflowed, overflow_programs = set(), 0, 0
    for case in _sample():
        whole = ("contiguous", "transposed")
        specials = {
            i.name for i in case.inputs if i.values == "specials" and i.layout in whole and i.shape[0] * i.shape[1] >= 7
        }
        tests = re.findall(r"^    (v\d+) = torch\.(isinf|isnan|isfinite)\((\w+)\)$", case.source, re.M)
        mine = [(v, t, a) for v, t, a in tests if a in specials]
        over = re.findall(r"^    (v\d+) = torch\.isinf\((v\d+)\)$", case.source, re.M)
        over = [v for v, a in over if re.search(rf"^    {a} = .*\.to\(torch\.float16\)$", case.source, re.M)]
        if not mine and not over:
            continue
        got = _outputs(case)
        for v, test, _a in mine:
            assert got[v].dtype == torch.bool
            assert bool(got[v].any()) if test != "isfinite" else not bool(got[v].all()), (case.id, v)
            checked.add(test)
        overflow_programs += len(over)
        overflowed += sum(bool(got[v].any()) for v in over)
    assert checked == {"isinf", "isnan", "isfinite"}
    assert overflow_programs >= 5 and overflowed >= overflow_programs // 2, (overflowed, overflow_programs)


def test_each_new_feature_is_in_one_percent_of_a_thousand_programs() -> None:
    for device in ("cpu", "cuda"):
        freq = feature_frequencies(1000, device)
        assert all(freq[f] >= 10 for f in NEW_FEATURES), (device, {f: freq[f] for f in NEW_FEATURES})


def test_the_integer_stage_leaves_each_seeds_float_program_and_outputs_as_they_were(monkeypatch) -> None:
    """The new ops come after a seed's program from a stream of their own: without them, the
    program's lines, inputs and outputs are a prefix of those with them (the wide stage, which comes
    after this one and numbers its values after it, and the range stage after it are left out of both)."""
    monkeypatch.setattr(typed, "wide_stage", lambda p, shape: [])
    monkeypatch.setattr(typed, "range_stage", lambda p, shape: [])
    full = [difftest.generate(s, "typed") for s in range(40)]
    monkeypatch.setattr(typed, "int_stage", lambda p, shape: [])
    bare = [difftest.generate(s, "typed") for s in range(40)]
    grown = 0
    for a, b in zip(full, bare, strict=True):
        la, lb = a.source.splitlines(), b.source.splitlines()
        assert la[1 : len(lb) - 1] == lb[1:-1] and a.inputs[: len(b.inputs)] == b.inputs
        assert la[0].startswith(lb[0].removesuffix("):"))  # new inputs come after the old ones
        assert la[-1].startswith(lb[-1])  # the old outputs first, in their order
        grown += a.source != b.source
    assert grown >= 20
    assert difftest.generate(123, "typed") == difftest.generate(123, "typed")


def test_features_of_names_the_new_forms() -> None:
    from precisionkit.repro import Case, Input

    src = (
        "def graph(i0, b1, f2):\n"
        "    v0 = torch.amin(i0, dim=1, keepdim=False)\n"
        "    v1 = b1.to(torch.uint8).argmax()\n"
        "    v2 = torch.where(torch.isnan(f2), 0.0, f2)\n"
        "    return v0, v1, v2\n"
    )
    ins = (Input("i0", (3, 5), "int8", 1, values="int"), Input("b1", (3, 5), "bool", 2, values="bool"))
    case = Case("c", src, (*ins, Input("f2", (3, 5), "float16", 3, values="specials")), rule="diff")
    assert {
        "integer_reduction",
        "full_reduction",
        "amin",
        "isinf_isnan",
        "where_class",
        "small_int_dtype",
        "nan_inf",
        "special_values",
        "argmin_argmax",
    } <= difftest.features_of(case)
    # the index of a bool or integer minimum has no signed zero to lose
    bools = Case(
        "b",
        "def graph(b0):\n    return torch.min(b0, dim=0).indices\n",
        (Input("b0", (3, 5), "bool", 1, values="bool"),),
    )
    assert {"integer_reduction", "argmin_argmax", "bool_dtype"} <= difftest.features_of(bools)
    assert "min_max_signed_zero" not in difftest.features_of(bools)
    floats = Case("w", "def graph(f0):\n    return torch.amax(f0 * 2.0, dim=0)\n", (Input("f0", (3, 5)),))
    new = {"integer_reduction", "full_reduction", "amin", "small_int_dtype", "isinf_isnan", "where_class"}
    assert "reduction" in difftest.features_of(floats) and not new & difftest.features_of(floats)
