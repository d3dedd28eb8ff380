"""What determines a task E training run's numbers: :class:`TrainConfig` (model, schedule, seeds,
precision, path) and the batches a config sees (:func:`train_batch`, :func:`eval_batches`).

Everything that could make the eager and fused paths differ other than the execution path is fixed
by the config: initialization seed, data-order seed, batch, schedule (linear warmup then cosine
decay), AdamW settings, gradient clipping and autocast precision. :meth:`TrainConfig.key` hashes it,
so a checkpoint is only ever resumed by the config that wrote it.
"""

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .corpus import Corpus

PRECISIONS = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run's numbers. Two runs with equal configs produce
    equal curves on the eager path; :meth:`key` identifies a config for checkpoints."""

    layers: int
    heads: int
    width: int
    context: int
    batch: int
    steps: int
    eval_every: int
    eval_batches: int
    path: str = "eager"  # eager | fused
    precision: str = "bfloat16"  # autocast dtype, or float32 for no autocast
    device: str = "cpu"
    init_seed: int = 0
    data_seed: int = 0
    backend: str = "inductor"
    options_json: str = "{}"  # compiler options as sorted JSON (kept hashable)
    corpus_sha256: str = ""
    #: Move every initial weight one ULP (the numerics-only control); False: no perturbation.
    init_ulp_nudge: bool = False
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = -1  # -1: 10% of steps
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    #: Fewest steps between two checkpoints (written at curve points; 0: at every curve point but the
    #: last). A GPT-2-small checkpoint with its optimizer state is about 1.5 GB, so GPU sizes keep
    #: them at least 250 steps apart.
    checkpoint_every: int = 0
    #: Intra-op CPU threads the run computes on (0: the process's count as it is). On a CPU the count
    #: changes reduction orders and so the bits of every curve; :func:`.loop.train` pins it for the run.
    threads: int = 0

    def __post_init__(self) -> None:
        if self.path not in ("eager", "fused"):
            raise ValueError(f"path must be 'eager' or 'fused', got {self.path!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0 (0: as the process has it), got {self.threads}")
        for name in ("layers", "heads", "width", "context", "batch", "steps", "eval_every", "eval_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_profile(cls, train: dict[str, int], **kwargs: Any) -> "TrainConfig":
        """Config from E's model and schedule sizes (``TrainSizes.model()`` of training/spec.py;
        ``kwargs`` override any field); GPT-2-small widths get GPT-2's 6e-4 peak LR, smaller models 1e-3."""
        needed = ("layers", "heads", "width", "context", "batch", "steps", "eval_every", "eval_batches")
        missing = [k for k in needed if k not in train]
        if missing:
            raise ValueError(f"profile train settings lack {', '.join(missing)}")
        lr = 6e-4 if train["width"] >= 768 else 1e-3
        spacing = {"checkpoint_every": int(train["checkpoint_every"])} if "checkpoint_every" in train else {}
        return cls(**{**{k: int(train[k]) for k in needed}, "lr": lr, **spacing, **kwargs})

    @property
    def warmup(self) -> int:
        return max(1, self.steps // 10) if self.warmup_steps < 0 else self.warmup_steps

    def key(self) -> str:
        """Hash of every field plus the torch version: a changed config never shares a checkpoint."""
        blob = json.dumps({**asdict(self), "torch": torch.__version__}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def lr_factor(self, step: int) -> float:
        """Multiplier of the peak LR after ``step`` optimizer steps: linear warmup, cosine decay."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        progress = min(1.0, (step - self.warmup) / max(1, self.steps - self.warmup))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def train_batch(corpus: Corpus, cfg: TrainConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The training batch of ``step``: random windows drawn from a generator seeded by
    (data seed, step), so the data position after a resume is just the step number."""
    seed = int.from_bytes(hashlib.sha256(f"{cfg.data_seed}:{step}".encode()).digest()[:8], "little") & (2**63 - 1)
    g = torch.Generator().manual_seed(seed)
    data = corpus.train
    if data.numel() <= cfg.context + 1:
        raise ValueError(f"train split ({data.numel()} bytes) is shorter than one window of {cfg.context + 1}")
    starts = torch.randint(0, data.numel() - cfg.context - 1, (cfg.batch,), generator=g)
    return _windows(data, starts, cfg.context)


def eval_batches(corpus: Corpus, cfg: TrainConfig) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed evaluation windows, evenly spaced over the eval split; identical for every run."""
    data = corpus.eval
    if data.numel() <= cfg.context + 1:
        raise ValueError(f"eval split ({data.numel()} bytes) is shorter than one window of {cfg.context + 1}")
    n = cfg.eval_batches * cfg.batch
    starts = torch.linspace(0, data.numel() - cfg.context - 1, n).long()
    return [_windows(data, starts[i : i + cfg.batch], cfg.context) for i in range(0, n, cfg.batch)]


def _windows(data: torch.Tensor, starts: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    chunks = torch.stack([data[s : s + context + 1] for s in starts.tolist()]).long()
    return chunks[:, :-1], chunks[:, 1:]
