"""The examples in precisionkit's docstrings run, and say what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import precisionkit

MODULES = sorted(m.name for m in pkgutil.walk_packages(precisionkit.__path__, "precisionkit."))
# Modules whose public functions carry examples: a docstring edit that drops them fails here.
WITH_EXAMPLES = {
    "precisionkit.batched",
    "precisionkit.bits",
    "precisionkit.decide",
    "precisionkit.hosttraffic",
    "precisionkit.paths",
    "precisionkit.reference",
    "precisionkit.stats",
    "precisionkit.tolerance",
}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(module, name):
        # Dynamo keeps weak references into an example's globals; clearing them early would
        # make its clean-up callbacks fail when the compiled function is collected.
        runner.run(test, clear_globs=False)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples in {name} failed (output above)"
    if name in WITH_EXAMPLES:
        assert results.attempted > 0


def test_modules_with_examples_exist():
    # A renamed module would otherwise drop out of the check above without a failure.
    assert set(MODULES) >= WITH_EXAMPLES
