"""Task E: a GPT-2-style byte-level decoder and one training loop with an eager and a fused switch.

Everything that could make the two paths differ other than the execution path is fixed by
:class:`TrainConfig`: initialization seed, data-order seed, batch, schedule (linear warmup then
cosine decay), AdamW settings, gradient clipping and autocast precision. The fused switch wraps the
loss computation (model forward + cross-entropy) in :class:`precisionkit.paths.FusedFunction`, so
``torch.compile`` traces the forward and AOTAutograd compiles the matching backward; the optimizer
step stays eager and identical on both paths.

``init_ulp_nudge`` is the numerics-only control of task E: it moves every initial weight by exactly
one ULP (direction drawn from a generator seeded by the init seed), so a run keeps the fused run's
data order and initialization and differs from eager only by rounding-sized state.

Training checkpoints after every evaluation interval and resumes from the latest checkpoint of the
same configuration (the directory is keyed by a hash of the config), bit for bit on the eager path.
"""

import contextlib
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from precisionkit.paths import FusedFunction, GeneratedCode, capture_generated_code

from ...storage import atomic_path
from .corpus import Corpus

VOCAB = 256  # byte-level: every byte value is a token
PRECISIONS = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


# --------------------------------------------------------------------------------------- model


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention written out (matmul, mask, softmax, matmul) as in GPT-2, so the
    fused path has the softmax chain to fuse rather than one opaque attention kernel."""

    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not divisible by heads {heads}")
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.mask: torch.Tensor
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x)) with tanh-GELU."""

    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, context)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2 architecture over bytes: learned positions, tied input/output embedding, no dropout
    (dropout would add random draws that differ between paths and hide the numerics)."""

    def __init__(self, layers: int, heads: int, width: int, context: int) -> None:
        super().__init__()
        self.context = context
        self.wte = nn.Embedding(VOCAB, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, context) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight
        # GPT-2 initialization: N(0, 0.02), residual projections scaled by 1/sqrt(2 * layers).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        if t > self.context:
            raise ValueError(f"sequence length {t} exceeds the model context {self.context}")
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# ------------------------------------------------------------------------------------ training


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

    def __post_init__(self) -> None:
        if self.path not in ("eager", "fused"):
            raise ValueError(f"path must be 'eager' or 'fused', got {self.path!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        for name in ("layers", "heads", "width", "context", "batch", "steps", "eval_every", "eval_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_profile(cls, train: dict[str, int], **kwargs: Any) -> "TrainConfig":
        """Config from a profile's ``train`` dict (``kwargs`` override any field); GPT-2-small
        widths get GPT-2's 6e-4 peak LR, smaller models 1e-3."""
        needed = ("layers", "heads", "width", "context", "batch", "steps", "eval_every", "eval_batches")
        missing = [k for k in needed if k not in train]
        if missing:
            raise ValueError(f"profile train settings lack {', '.join(missing)}")
        lr = 6e-4 if train["width"] >= 768 else 1e-3
        return cls(**{**{k: int(train[k]) for k in needed}, "lr": lr, **kwargs})

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


class TrainingInterrupted(RuntimeError):
    """Raised by :func:`train` when ``stop_after`` steps are done (simulates a killed run)."""


@dataclass
class TrainResult:
    """Curve rows (one per evaluation), fused-path evidence, and timing of one run."""

    config: TrainConfig
    rows: list[dict[str, Any]]
    evidence: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    resumed_from_step: int = 0
    n_params: int = 0
    #: Parameter elements whose initial value the ULP nudge changed (0 without the nudge).
    nudged_elements: int = 0


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


def make_loss_fn(
    model: GPT, cfg: TrainConfig, device: torch.device
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Mean next-byte cross-entropy, forward under autocast in ``cfg.precision`` (fp32 loss)."""
    dtype = PRECISIONS[cfg.precision]

    def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ctx = torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
        with ctx:
            logits = model(x)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    return loss_fn


def _code_evidence(prefix: str, captured: GeneratedCode) -> dict[str, Any]:
    return {
        f"{prefix}_graphs": captured.graphs,
        f"{prefix}_kernel_count": len(captured.kernel_names),
        f"{prefix}_code_sha256": captured.sha256,
    }


def nudge_one_ulp(model: nn.Module, seed: int) -> int:
    """Move every parameter element one ULP up or down (signs from a generator seeded by ``seed``,
    so the control is reproducible and unbiased); returns how many elements changed (all of them).

    The smallest possible change of the state: whatever the run does differently afterwards is
    rounding amplified by training, the size a pure numerics difference can reach.
    """
    g = torch.Generator().manual_seed(seed)
    changed = 0
    with torch.no_grad():
        for p in model.parameters():  # tied weights appear once
            up = torch.randint(0, 2, p.shape, generator=g).bool().to(p.device)
            target = torch.where(up, torch.full_like(p, math.inf), torch.full_like(p, -math.inf))
            moved = torch.nextafter(p, target)
            changed += int((moved != p).sum())
            p.copy_(moved)
    return changed


@dataclass
class _Trainer:
    """The mutable state of one run: model, optimizer, LR schedule and loss scaler."""

    model: GPT
    opt: torch.optim.AdamW
    sched: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler


def _build(cfg: TrainConfig, device: torch.device) -> _Trainer:
    torch.manual_seed(cfg.init_seed)
    model = GPT(cfg.layers, cfg.heads, cfg.width, cfg.context).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cfg.lr_factor)
    # Loss scaling only where the autocast dtype needs it (fp16); a no-op otherwise.
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "float16")
    return _Trainer(model, opt, sched, scaler)


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class _Progress:
    """Where a run stands: optimizer steps done, curve rows so far, seconds spent before this process."""

    step: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0


def _load_checkpoint(ckpt: Path, cfg: TrainConfig, trainer: _Trainer, device: torch.device) -> _Progress:
    """Restore ``trainer`` and the RNG from ``ckpt`` (which must belong to ``cfg``); returns where it stood."""
    state = torch.load(ckpt, map_location=device, weights_only=False)
    if state["config_key"] != cfg.key():
        raise RuntimeError(f"checkpoint {ckpt} belongs to config {state['config_key']}, not {cfg.key()}")
    trainer.model.load_state_dict(state["model"])
    trainer.opt.load_state_dict(state["optimizer"])
    trainer.sched.load_state_dict(state["scheduler"])
    trainer.scaler.load_state_dict(state["scaler"])
    _set_rng_state(state["rng"])
    return _Progress(state["step"], state["rows"], state["seconds"])


def _save_checkpoint(ckpt: Path, cfg: TrainConfig, trainer: _Trainer, progress: _Progress, seconds: float) -> None:
    state = {
        "config_key": cfg.key(),
        "config": asdict(cfg),
        "model": trainer.model.state_dict(),
        "optimizer": trainer.opt.state_dict(),
        "scheduler": trainer.sched.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "rng": _rng_state(),
        "step": progress.step,  # the data position: batches are a function of (data seed, step)
        "rows": progress.rows,
        "seconds": seconds,
    }
    with atomic_path(ckpt) as tmp:
        torch.save(state, tmp)


def _remove_checkpoint(ckpt: Path) -> None:
    ckpt.unlink(missing_ok=True)
    for folder in (ckpt.parent, ckpt.parent.parent):  # config-key folder, then the run folder if empty
        with contextlib.suppress(OSError):
            folder.rmdir()


LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _loss_paths(cfg: TrainConfig, model: GPT, device: torch.device) -> tuple[LossFn, LossFn]:
    """The training and evaluation loss of ``cfg.path``: the eager loss twice, or two fused wrappers
    (separate compiles, so the evaluation's no-grad graph does not recompile the training one)."""
    if cfg.path != "fused":
        loss_fn = make_loss_fn(model, cfg, device)
        return loss_fn, loss_fn
    options = json.loads(cfg.options_json)
    return (
        FusedFunction(make_loss_fn(model, cfg, device), cfg.backend, options),
        FusedFunction(make_loss_fn(model, cfg, device), cfg.backend, options),
    )


#: Fused-path evidence fields copied into a run's evidence, per loss function (train, eval).
_FUSED_EVIDENCE_FIELDS = (
    "graph_count",
    "graph_breaks",
    "recompiles",
    "kernel_count",
    "code_sha256",
    "compile_seconds",
    "extern_calls",
)


def _fused_evidence(cfg: TrainConfig, train_fn: LossFn, eval_fn: LossFn) -> dict[str, Any]:
    """The fused wrappers' evidence (``train_*``, ``eval_*``), backend and options; empty when eager."""
    if cfg.path != "fused":
        return {}
    evidence: dict[str, Any] = {}
    for name, fn in (("train", train_fn), ("eval", eval_fn)):
        if not isinstance(fn, FusedFunction):
            raise TypeError(f"the fused path's {name} loss is a {type(fn).__name__}, not a FusedFunction")
        ev = fn.evidence.as_metadata()
        evidence.update({f"{name}_{k}": ev[k] for k in _FUSED_EVIDENCE_FIELDS})
    evidence["backend"] = cfg.backend
    evidence["options"] = cfg.options_json
    return evidence


@dataclass
class _StepStats:
    """Sums over the optimizer steps since the last curve point."""

    loss: float = 0.0
    norm: float = 0.0
    steps: int = 0
    skipped: int = 0


def _optimizer_step(
    cfg: TrainConfig, trainer: _Trainer, train_fn: LossFn, x: torch.Tensor, y: torch.Tensor, evidence: dict[str, Any]
) -> tuple[float, float, bool]:
    """One training step (forward, scaled backward, clip, optimizer and schedule step); returns the
    loss, the gradient norm before clipping and whether GradScaler skipped the update. The first
    fused step adds the backward graph's generated-code evidence to ``evidence``."""
    scaler, opt = trainer.scaler, trainer.opt
    # The backward graph's code arrives at the first backward() when compiled, or with the
    # forward when AOTAutograd serves both from its cache: the capture spans both.
    first_fused_step = cfg.path == "fused" and "bwd_graphs" not in evidence
    with capture_generated_code() if first_fused_step else contextlib.nullcontext(GeneratedCode()) as captured:
        loss = train_fn(x, y)
        scaled = scaler.scale(loss)
        scaled.backward()
    if first_fused_step:
        evidence.update(_code_evidence("bwd", captured.of_kind("backward")))
    scaler.unscale_(opt)
    norm = torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), cfg.grad_clip)
    scale_before = scaler.get_scale() if scaler.is_enabled() else 1.0
    scaler.step(opt)
    scaler.update()
    skipped = scaler.is_enabled() and scaler.get_scale() < scale_before  # inf/nan: the update was skipped
    opt.zero_grad(set_to_none=True)
    trainer.sched.step()
    return loss.detach().item(), norm.item(), skipped


def train(
    cfg: TrainConfig,
    corpus: Corpus,
    *,
    checkpoint_dir: Path | None = None,
    stop_after: int | None = None,
    log: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train one run; evaluate and checkpoint every ``cfg.eval_every`` steps and at the end.

    ``checkpoint_dir`` (a folder for this run; the config key is appended) enables resuming: a
    checkpoint of the same config is loaded and training continues from its step. The checkpoint is
    deleted once the run completes. ``stop_after`` raises :class:`TrainingInterrupted` after that
    many steps (counted from step 0), leaving the last checkpoint behind.
    """
    if corpus.sha256 != cfg.corpus_sha256 and cfg.corpus_sha256:
        raise ValueError(f"config expects corpus {cfg.corpus_sha256[:12]}, got {corpus.sha256[:12]}")
    device = torch.device(cfg.device)
    trainer = _build(cfg, device)
    # In place, before any step: the optimizer already holds these parameters (a resume overwrites them).
    nudged = nudge_one_ulp(trainer.model, cfg.init_seed) if cfg.init_ulp_nudge else 0
    ckpt = Path(checkpoint_dir) / cfg.key() / "checkpoint.pt" if checkpoint_dir is not None else None
    progress = _Progress()
    if ckpt is not None and ckpt.exists():
        progress = _load_checkpoint(ckpt, cfg, trainer, device)
        if log:
            log(f"resumed {cfg.path}/{cfg.precision} from step {progress.step} ({ckpt})")
    resumed_from, rows = progress.step, progress.rows
    train_fn, eval_fn = _loss_paths(cfg, trainer.model, device)
    evals = [(x.to(device), y.to(device)) for x, y in eval_batches(corpus, cfg)]
    evidence: dict[str, Any] = {}

    def evaluate() -> float:
        with torch.no_grad():
            total = sum(float(eval_fn(x, y)) for x, y in evals)
        return total / len(evals)

    start = time.perf_counter()
    if progress.step == 0 and not rows:
        rows.append(_row(0, None, evaluate(), None, 0.0, 0, cfg))
    stats = _StepStats()
    while progress.step < cfg.steps:
        x, y = (t.to(device) for t in train_batch(corpus, cfg, progress.step))
        loss, norm, skipped = _optimizer_step(cfg, trainer, train_fn, x, y, evidence)
        progress.step += 1
        stats = _StepStats(stats.loss + loss, stats.norm + norm, stats.steps + 1, stats.skipped + skipped)
        step = progress.step
        if step % cfg.eval_every == 0 or step == cfg.steps:
            eval_loss = evaluate()
            lr = float(trainer.sched.get_last_lr()[0])
            rows.append(
                _row(step, stats.loss / stats.steps, eval_loss, stats.norm / stats.steps, lr, stats.skipped, cfg)
            )
            stats = _StepStats()
            if log:
                log(
                    f"{cfg.path}/{cfg.precision}/seed{cfg.data_seed % 1000}: step {step} train {rows[-1]['train_loss']:.4f} eval {eval_loss:.4f}"
                )
            if ckpt is not None:
                _save_checkpoint(ckpt, cfg, trainer, progress, progress.elapsed + (time.perf_counter() - start))
        if stop_after is not None and step >= stop_after and step < cfg.steps:
            raise TrainingInterrupted(f"stopped after {step} steps (last checkpoint at step {rows[-1]['step']})")

    seconds = progress.elapsed + (time.perf_counter() - start)
    evidence.update(_fused_evidence(cfg, train_fn, eval_fn))
    if ckpt is not None:
        _remove_checkpoint(ckpt)
    return TrainResult(
        config=cfg,
        rows=rows,
        evidence=evidence,
        seconds=seconds,
        resumed_from_step=resumed_from,
        n_params=sum(p.numel() for p in trainer.model.parameters()),
        nudged_elements=nudged,
    )


def _row(
    step: int,
    train_loss: float | None,
    eval_loss: float,
    grad_norm: float | None,
    lr: float,
    skipped: int,
    cfg: TrainConfig,
) -> dict[str, Any]:
    """One curve point; train loss and grad norm are means over the steps since the last point."""
    return {
        "step": step,
        "tokens": step * cfg.batch * cfg.context,
        "train_loss": train_loss,
        "eval_loss": eval_loss,
        "perplexity": math.exp(eval_loss),
        "grad_norm": grad_norm,
        "lr": lr,
        "skipped_steps": skipped,
    }
