"""The differential tester's reach, judged by real bugs: every corpus case that reproduces under the
torch in use and lies within the ``diff`` rule must be caught, as a minimized mismatch with the
case's signature, by the general generators within their default budget (240 programs of
:func:`precisionkit.difftest.plan`), 80% of them at least. Minutes: ``make test-torch`` and
``make test-all`` run it, ``make test`` does not."""

from __future__ import annotations

import pytest

from precisionkit import difftest
from tests.fuzz_corpus.cases import CASES
from tests.fuzz_corpus.reach import SIGNATURES, measure

#: programs of the default campaign (``python -m tests.fuzz_corpus.reach`` and this test)
BUDGET = 240


def test_every_corpus_case_has_a_signature_in_the_testers_vocabulary() -> None:
    assert set(SIGNATURES) == {c.id for c in CASES}
    known = difftest.VOCABULARY  # every feature the tester can name
    for case_id, sig in SIGNATURES.items():
        assert sig is None or sig <= known, (case_id, sig - known)


@pytest.mark.heavy
def test_general_generators_catch_most_reproducing_corpus_bugs_within_the_budget() -> None:
    rec = measure(BUDGET, 0, log=lambda _line: None, stop_when_caught=True)
    judged = [r for r in rec["cases"] if r["reproduces_here"] and r["signature"] != "out of the rule"]
    if not judged:
        pytest.skip(f"no corpus case within the rule reproduces under torch {rec['torch']}")
    caught = [r for r in judged if r["caught"]]
    table = "\n".join(f"{r['id']:40s} {r['by'] or 'missed'}" for r in judged)
    assert len(caught) >= 0.8 * len(judged), f"caught {len(caught)} of {len(judged)}:\n{table}"
    assert rec["graphs"] <= BUDGET and all(r["by"].split()[0] in difftest.GENERATORS for r in caught)


#: programs of the CUDA campaign: a third go to the ``gpu`` generator (difftest.plan on cuda), so
#: 360 leaves the CPU generators their CPU budget of 240 and gives the GPU vocabulary 120
CUDA_BUDGET = 360


def test_every_cuda_corpus_case_has_a_signature_and_is_marked_cuda() -> None:
    from tests.fuzz_corpus.cuda_cases import CUDA_CASES
    from tests.fuzz_corpus.reach import CUDA_SIGNATURES

    assert set(CUDA_SIGNATURES) == {c.id for c in CUDA_CASES} and len(CUDA_CASES) >= 10
    assert {c.device for c in CUDA_CASES} == {"cuda"}
    assert len({c.issue for c in CUDA_CASES}) == len(CUDA_CASES)  # one case per report
    known = difftest.VOCABULARY  # every feature the tester can name
    for case_id, sig in CUDA_SIGNATURES.items():
        assert sig is None or sig <= known, (case_id, sig - known)


@pytest.mark.cuda
@pytest.mark.heavy
def test_the_generator_catches_most_reproducing_cuda_corpus_bugs_within_the_budget() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("the CUDA corpus needs a GPU: torch reports none here")
    rec = measure(CUDA_BUDGET, 0, log=lambda _line: None, stop_when_caught=True, device="cuda")
    judged = [r for r in rec["cases"] if r["reproduces_here"] and r["signature"] != "out of the rule"]
    if not judged:
        pytest.skip(f"no CUDA corpus case within the generators' vocabulary reproduces under torch {rec['torch']}")
    caught = [r for r in judged if r["caught"]]
    table = "\n".join(f"{r['id']:45s} {r['by'] or 'missed'}" for r in judged)
    assert len(caught) >= 0.8 * len(judged), f"caught {len(caught)} of {len(judged)}:\n{table}"
    assert rec["graphs"] <= CUDA_BUDGET
