"""E: does a model trained fused learn the same as one trained eager, within measured noise?"""

from typing import Any

from ...experiment import BaselineTable, Experiment
from . import report, spec


def _load():
    from . import assets

    return (assets,)


def _cost():
    from . import cost

    return cost


def build_model(layers: int, heads: int, width: int, context: int) -> Any:
    """E's GPT-2-style byte-level model (``gpt.GPT``), freshly built: for what runs it outside E (the
    benchmarks' training step). Importing it imports E's model code only when called."""
    from .gpt import GPT

    return GPT(layers, heads, width, context)


def divergence_subject(
    model_sizes: dict[str, int], device: Any, init_seed: int, sequences: int
) -> tuple[Any, Any, str]:
    """E's model as the Diagnostics' per-layer divergence runs it: built from ``model_sizes``
    (``TrainSizes.model()``) with E's runs' initialization (``init_seed``, before any step) on ``device``,
    and the first ``sequences`` sequences of E's first evaluation batch. (model, tokens, its shape in words)."""
    import torch

    from .config import TrainConfig, eval_batches
    from .corpus import load_corpus

    cfg = TrainConfig.from_profile(model_sizes, device=str(device), init_seed=init_seed)
    torch.manual_seed(cfg.init_seed)  # the E training runs' initialization, before any step
    model = build_model(cfg.layers, cfg.heads, cfg.width, cfg.context).to(device)
    tokens, _ = eval_batches(load_corpus(), cfg)[0]
    shape = f"layers={cfg.layers} heads={cfg.heads} width={cfg.width} context={cfg.context}"
    return model, tokens[:sequences].to(device), shape


EXPERIMENT = Experiment(
    id=spec.ID,
    title="End-to-end training alignment",
    group=spec.GROUP,
    slug="training",
    sections=("3.2", "6.1"),
    load=_load,
    plan_deliverable="loss (train / eval), grad norm and perplexity curves and the final-metric difference table",
    deliverable=report.deliverable,
    details=report.details,
    baseline=(BaselineTable("training_curves", method="curves"),),
    sizes=spec.SIZES,
    short="Training alignment",
    cost=_cost,
)
