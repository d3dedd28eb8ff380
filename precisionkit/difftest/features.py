"""What a program shows, in the vocabulary of the bug corpus (``tests/fuzz_corpus``)."""

from __future__ import annotations

from ..repro import Case

#: What a program's source (and its inputs) show, in the vocabulary of the bug corpus: the
#: features of a *minimized* mismatch say which class of defect it is.
_FEATURE_PATTERNS = {
    "argmin_argmax": r"\.arg(?:min|max)\(|torch\.arg(?:min|max)\(|\.indices\b",
    # (not of an integer or bool input i<k> / b<k>: those have no signed zero)
    "min_max_signed_zero": r"torch\.(?:minimum|maximum|clamp)\(|torch\.(?:min|max)\((?![ib]\d+\b)[^)]*dim=",
    "cast": r"\.to\(",
    "floor_divide": r"floor_divide|//",
    "rounding": r"torch\.(?:ceil|floor|round|trunc|frac|remainder|fmod|floor_divide)\(",
    "pow_exp_log": r"torch\.(?:exp|log|sqrt|rsqrt|pow)\(|\*\* ",
    "nan_inf": r"nan_to_num|reciprocal|torch\.(?:log|sqrt|rsqrt|isinf|isnan|isfinite)\(| / ",
    "index_put": r"\]\s*=\s|index_put",
    "index_add": r"index_add",
    "scatter_gather": r"gather|scatter",
    "cumulative": r"cumsum|cumprod",
    "output_dtype": r"cum(?:sum|prod)\([^)]*dtype=",
    "reduction": r"\.(?:sum|mean|amax|amin|logsumexp|arg(?:min|max))\(|torch\.(?:sum|mean|amax|logsumexp|arg(?:min|max))\(",
    "flip_roll": r"flip|roll",
    "as_strided": r"as_strided",
    "shift_bitwise": r"<<|>>| \^ | & ",
    "in_place_view": r"\.\w+_\(|\]\s*=\s",
    "expanded_view": r"\.expand\(",
    "transpose_input": r"\.t\(\)|transpose|permute",
    "duplicate_indices": r"% \d|index_add\(0",
    # min / max / amin / amax / argmin / argmax of an integer or bool value: the typed generator
    # names integer inputs i<k> and bool inputs b<k>; a bool mask is reduced as uint8 bytes
    "integer_reduction": r"torch\.(?:argmin|argmax|amin|amax|min|max)\([ib]\d+\b|\b[ib]\d+(?:\.to\(torch\.uint8\))?\.(?:argmin|argmax|amin|amax|min|max)\(",
    # a reduction of every element to one value or index (no dim)
    "full_reduction": r"torch\.(?:min|max|amin|amax)\(\w+\)|\.(?:min|max|amin|amax|argmin|argmax)\(\)",
    "amin": r"\bamin\(",
    "isinf_isnan": r"\bis(?:inf|nan|finite)\(",
    "where_class": r"torch\.where\(~?torch\.is(?:inf|nan|finite)\(",
    "small_int_dtype": r"torch\.u?int(?:8|16|32)\b",  # and inputs of those dtypes (see features_of)
    "add_zero": r"\+ torch\.zeros_like\(|torch\.zeros_like\([^)]*\) \+ |\+ -?0\.0\b",  # x + 0 is not x at -0.0
    "signed_zero": r"^$",  # from the rule's message, not the source (see features_of)
    # the GPU vocabulary (:mod:`.gpu`)
    "matmul": r" @ |torch\.(?:matmul|mm|bmm|addmm)\(",
    "welford": r"torch\.var(?:_mean)?\(|\.std\(|\.var\(|layer_norm|group_norm|batch_norm",
    "atomic_scatter": r"accumulate=True|scatter_add|index_add",
    "where_fill_reduction": r"(?:torch\.where|masked_fill)\(.*\)\.(?:amax|sum|max)\(|softmax\((?:torch\.where|[^)]*masked_fill)",
    "large_index": r"^$",  # from the case's recorded features (see features_of)
    # the wide vocabulary (:mod:`.typed_wide`); a softmax not preceded by ``log_``
    "softmax": r"(?<!\w)softmax\(",
    "log_softmax": r"log_softmax\(",
    "trig": r"torch\.(?:sin|cos|tan)\(",
    # exp of a value shifted by tens (to its dtype's overflow / underflow), log of a scaled |x|
    "exp_log_extreme": r"torch\.exp\(\w+ [+-] \d{2,3}\.\d+\)|torch\.log\(\w+\.abs\(\) \* ",
    # a constant of 1e10 or more, or 1e-10 or less (and inputs at such scales: see features_of)
    "extreme_magnitude": r"\de[+-](?:[1-9]\d|\d{3})\b",
    # the transpose of a reshape, a slice with a step
    "strided_view": r"\.reshape\(\d+, \d+\)\.t\(\)|\[[^\]\n]*::\d",
    "cat_stack": r"torch\.(?:cat|stack)\(",
    "long_odd_row": r"^$",  # from the inputs' shapes (see features_of)
    "zero_only_values": r"torch\.copysign\(torch\.zeros_like\(",
    "tie_only_values": r"torch\.round\(\w+\)\.clamp\(-1\.0, 1\.0\)",
    "huge_only_values": r"\(torch\.sign\(\w+\) \+ 2\.0\) \* ",
}
#: features a program's generator recorded that its source alone cannot show (sizes, strategies)
_RECORDED = (
    "large_index",
    "long_reduction",
    "persistent_reduction",
    "looped_reduction",
    "split_reduction",
    "masked_tail",
)


#: What an input read as data shows by its layout, and by its values.
_LAYOUT_FEATURES = {
    "transposed": "transpose_input",
    "broadcast": "expanded_view",
    "channels_last": "channels_last_input",
    "strided": "strided_input",
}
_VALUE_FEATURES = {
    "edge": "special_values",
    "specials": "special_values",
    "index": "duplicate_indices",
    "tail": "extreme_in_tail",
}
#: float inputs drawn at scales outside 2^-20 .. 2^20 show ``extreme_magnitude`` (the typed
#: generator's usual scales are 1e-3 .. 300; :mod:`.typed_wide` draws 1e-40 .. 1e30)
_FLOAT_VALUES = ("normal", "edge", "grid", "specials", "tail")
_USUAL_SCALE = (2.0**-20, 2.0**20)
#: a last dim of odd length in this range shows ``long_odd_row``: rows of a few hundred elements
#: that end in a tail of every vector width (the reduction generator's 2^20-term rows are longer)
LONG_ROW = (100, 1000)
#: integer dtypes narrower than int64: sign extension, wrap-around and vector widths differ there
_SMALL_INTS = ("int8", "uint8", "int16", "int32")
#: Every feature :func:`features_of` can name: from the source, the inputs, the generator's record
#: and the rule's message.
VOCABULARY = frozenset(
    {
        *_FEATURE_PATTERNS,
        *_RECORDED,
        *_LAYOUT_FEATURES.values(),
        *_VALUE_FEATURES.values(),
        "fp16_bf16",
        "integer_dtype",
        "bool_dtype",
    }
)


def features_of(case: Case, message: str = "") -> set[str]:
    """The corpus vocabulary features of a program: from its source, from the dtypes, layouts and
    values of the inputs it reads as data (a ``transposed`` input counts as ``transpose_input``;
    an input read only for its ``.dtype`` counts for nothing) and, given the ``diff`` rule's
    ``message`` about it, from what went wrong: ``signed_zero`` when eager and fused are zeros of
    opposite sign, ``nan_inf`` when either is NaN or infinite."""
    import re

    from ..minimize import single_output

    wrong = re.match(r"output (\d+):", message)
    if wrong:  # only the lines the wrong output depends on say what the defect is
        case = single_output(case, int(wrong.group(1))) or case
    src = case.source
    found = {name for name, pat in _FEATURE_PATTERNS.items() if re.search(pat, src)}
    found.discard("signed_zero")
    found.discard("large_index")
    found.discard("long_odd_row")
    found.update(f for f in case.extra.get("features", ()) if f in _RECORDED)
    body = src.split("\n", 1)[1] if "\n" in src else ""
    for i in case.inputs:
        if not re.search(rf"\b{re.escape(i.name)}\b(?!\.dtype)", body):
            continue  # read for its dtype only: its layout and values do not reach the result
        if i.dtype in ("float16", "bfloat16") or re.search(r"float16|bfloat16", src):
            found.add("fp16_bf16")
        if i.values in ("int", "index") or re.search(r"int(?:8|16|32|64)\b|torch\.long", src):
            found.add("integer_dtype")
        if i.dtype in _SMALL_INTS:
            found.add("small_int_dtype")
        if i.values == "bool" or re.search(r"torch\.bool| (?:[<>]=?|[=!]=) ", src):
            found.add("bool_dtype")
        found.update(f for f in (_LAYOUT_FEATURES.get(i.layout), _VALUE_FEATURES.get(i.values)) if f)
        if i.values in _FLOAT_VALUES and not _USUAL_SCALE[0] <= i.scale <= _USUAL_SCALE[1]:
            found.add("extreme_magnitude")
        if i.shape and LONG_ROW[0] <= i.shape[-1] <= LONG_ROW[1] and i.shape[-1] % 2:
            found.add("long_odd_row")
    got = re.search(r"eager (\S+), fused \([^)]*\) (\S+),", message)
    if got:
        e, f = got.groups()
        if {e.strip("-"), f.strip("-")} == {"0.0"} and e != f:
            found.add("signed_zero")
        if any(v.strip("-") in ("nan", "inf") for v in (e, f)):
            found.add("nan_inf")
    return found


#: Features no generated program shows before it runs: read from the rule's message about a mismatch.
FROM_MESSAGE = frozenset({"signed_zero"})
#: Features only the GPU generator writes (:mod:`.gpu`): a CPU campaign never draws them.
GPU_ONLY = frozenset(
    {
        "where_fill_reduction",
        "channels_last_input",
        "persistent_reduction",
        "looped_reduction",
        "split_reduction",
        "masked_tail",
    }
)
#: Features a campaign draws only when asked (``large_index``: billions of elements, with
#: ``PK_DIFFTEST_LARGE=1`` on CUDA; see :mod:`.gpu`).
OPT_IN = frozenset({"large_index"})


def feature_frequencies(programs: int = 1000, device: str = "cpu", start: int = 0) -> dict[str, float]:
    """How often each vocabulary feature appears per 1000 programs of a campaign's plan on ``device``
    (:func:`~precisionkit.difftest.generator.plan`: the same generators and seeds a campaign draws;
    generating compiles nothing and needs no device). Every feature of :data:`VOCABULARY`, also
    those at 0."""
    from .generator import generate, plan

    todo = plan(programs, start, device=device)
    counts = dict.fromkeys(sorted(VOCABULARY), 0)
    for generator, seed in todo:
        for feature in features_of(generate(seed, generator, device=device)):
            counts[feature] += 1  # a name outside the vocabulary is a KeyError: the vocabulary is whole
    return {f: 1000 * n / len(todo) for f, n in counts.items()}
