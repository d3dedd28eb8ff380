"""The main document's claims and the experiments that give them evidence, derived from the registry."""

from ..experiment import Experiment
from ..experiments import EXPERIMENTS
from ..sections import SECTIONS, Section

#: Claim -> experiments giving evidence, in the main document's order (each experiment names its sections).
CLAIM_EVIDENCE: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (key, tuple(e.id for e in EXPERIMENTS if key in e.sections))
    for key in SECTIONS
    if any(key in e.sections for e in EXPERIMENTS)
)

__all__ = ["CLAIM_EVIDENCE", "EXPERIMENTS", "SECTIONS", "Experiment", "Section"]
