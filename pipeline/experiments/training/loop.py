"""Task E's training loop: one function (:func:`train`) with an eager and a fused switch.

The fused switch wraps the loss computation (model forward + cross-entropy) in
:class:`precisionkit.paths.FusedFunction`, so ``torch.compile`` traces the forward and AOTAutograd
compiles the matching backward; the optimizer step stays eager and identical on both paths. What
else the two paths share is fixed by :class:`.config.TrainConfig`.

Training checkpoints after every evaluation interval and resumes from the latest checkpoint of the
same configuration (:mod:`.checkpoint`), bit for bit on the eager path.
"""

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from precisionkit.evidence import evidence_fields
from precisionkit.paths import FusedFunction

from .checkpoint import CheckpointWriter, RunPosition, Trainer, build_trainer, load_checkpoint, remove_checkpoint
from .compilers import backward_evidence, compiler_globals_kept, failing_as, is_inductor
from .config import PRECISIONS, TrainConfig, eval_batches, train_batch
from .corpus import Corpus
from .gpt import GPT, nudge_one_ulp


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
    #: Intra-op CPU threads the run computed on (``cfg.threads``, or the process's count when 0).
    threads: int = 0


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
        evidence.update(evidence_fields(fn.evidence, _FUSED_EVIDENCE_FIELDS, prefix=f"{name}_"))
    evidence["backend"] = cfg.backend
    evidence["options"] = cfg.options_json
    return evidence


class _StepStats:
    """Sums over the optimizer steps since the last curve point, kept on the training device so that
    a step reads nothing back (the host waits for the device only at curve points, :meth:`read`).
    The gradient norm of a step that GradScaler skipped is inf or NaN by definition (that is why it
    was skipped) and its update was never applied, so the norm is summed over the applied steps only.
    The sums are float64 where the device has it, added one step at a time, so they equal the
    Python float sums of the per-step values."""

    def __init__(self, device: torch.device) -> None:
        dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
        self.loss = torch.zeros((), dtype=dtype, device=device)
        self.norm = torch.zeros((), dtype=dtype, device=device)
        self.skipped = torch.zeros((), dtype=torch.int64, device=device)
        self.steps = 0

    def add(self, loss: torch.Tensor, norm: torch.Tensor, skipped: torch.Tensor) -> None:
        self.loss += loss.to(self.loss.dtype)
        self.norm += torch.where(skipped, 0.0, norm.to(self.norm.dtype))
        self.skipped += skipped.to(torch.int64)
        self.steps += 1

    def read(self) -> tuple[float, float | None, int]:
        """Mean loss, mean gradient norm over the applied steps (None when every step was skipped)
        and the skipped count: the one read-back of a curve point."""
        skipped = int(self.skipped)
        applied = self.steps - skipped
        return float(self.loss) / self.steps, (float(self.norm) / applied if applied else None), skipped


def _optimizer_step(
    cfg: TrainConfig, trainer: Trainer, train_fn: LossFn, x: torch.Tensor, y: torch.Tensor, evidence: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One training step (forward, scaled backward, clip, optimizer and schedule step); returns the
    loss, the gradient norm before clipping and whether GradScaler skipped the update, as tensors on
    the training device (nothing is read back). The first fused step adds the backward graph's
    evidence to ``evidence`` (:func:`.compilers.backward_evidence`), and a compiler's failure in it is
    a :class:`.compilers.TrainingCompileError` naming the compiler and its error."""
    scaler, opt = trainer.scaler, trainer.opt
    first = cfg.path == "fused" and "bwd_graphs" not in evidence
    inductor = first and is_inductor(cfg.backend)
    with backward_evidence(cfg.backend, evidence) if inductor else contextlib.nullcontext():
        with failing_as(cfg.backend, "the training step's forward", first):
            loss = train_fn(x, y)
        scaled = scaler.scale(loss)
        with (
            backward_evidence(cfg.backend, evidence) if first and not inductor else contextlib.nullcontext(),
            failing_as(cfg.backend, "the training step's backward", first),
        ):
            scaled.backward()
    scaler.unscale_(opt)
    norm = torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), cfg.grad_clip)
    # GradScaler skips the update exactly when an unscaled gradient is inf or NaN, and then so is
    # the total norm: decided on the device, with no read-back (its own get_scale() would sync).
    skipped = ~torch.isfinite(norm) if scaler.is_enabled() else torch.zeros((), dtype=torch.bool, device=norm.device)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    trainer.sched.step()
    return loss.detach(), norm.detach(), skipped


def _resume(
    ckpt: Path | None, cfg: TrainConfig, trainer: Trainer, device: torch.device, log: Callable[[str], None] | None
) -> RunPosition:
    """Where a run starts: the checkpoint of its config when one exists, else step 0."""
    if ckpt is None or not ckpt.exists():
        return RunPosition()
    progress = load_checkpoint(ckpt, cfg, trainer, device)
    if log:
        log(f"resumed {cfg.path}/{cfg.precision} from step {progress.step} ({ckpt})")
    return progress


def train(
    cfg: TrainConfig,
    corpus: Corpus,
    *,
    checkpoint_dir: Path | None = None,
    stop_after: int | None = None,
    log: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train one run; evaluate every ``cfg.eval_every`` steps and at the end, and checkpoint at those
    points at least ``cfg.checkpoint_every`` steps apart, off the training thread (:class:`CheckpointWriter`).

    ``checkpoint_dir`` (a folder for this run; the config key is appended) enables resuming: a
    checkpoint of the same config is loaded and training continues from its step. The checkpoint is
    deleted once the run completes. ``stop_after`` raises :class:`TrainingInterrupted` after that
    many steps (counted from step 0), leaving the last checkpoint behind.
    """
    kept = compiler_globals_kept(cfg.backend) if cfg.path == "fused" else contextlib.nullcontext()
    with pinned_threads(cfg.threads) as threads, kept:
        result = _train(cfg, corpus, checkpoint_dir, stop_after, log)
    result.threads = threads
    return result


@contextlib.contextmanager
def pinned_threads(threads: int) -> Iterator[int]:
    """Intra-op threads set to ``threads`` inside the block (0: left as they are), restored after;
    yields the count the block computes on."""
    before = torch.get_num_threads()
    if threads > 0 and threads != before:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _train(
    cfg: TrainConfig,
    corpus: Corpus,
    checkpoint_dir: Path | None,
    stop_after: int | None,
    log: Callable[[str], None] | None,
) -> TrainResult:
    """The run of :func:`train`, on the threads it set."""
    if corpus.sha256 != cfg.corpus_sha256 and cfg.corpus_sha256:
        raise ValueError(f"config expects corpus {cfg.corpus_sha256[:12]}, got {corpus.sha256[:12]}")
    device = torch.device(cfg.device)
    trainer = build_trainer(cfg, device)
    # In place, before any step: the optimizer already holds these parameters (a resume overwrites them).
    nudged = nudge_one_ulp(trainer.model, cfg.init_seed) if cfg.init_ulp_nudge else 0
    ckpt = Path(checkpoint_dir) / cfg.key() / "checkpoint.pt" if checkpoint_dir is not None else None
    progress = _resume(ckpt, cfg, trainer, device, log)
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
        with failing_as(cfg.backend, "the first evaluation (no_grad forward)", cfg.path == "fused"):
            rows.append(_row(0, None, evaluate(), None, 0.0, 0, cfg))
    stats = _StepStats(device)
    saved_at = progress.step
    writer = CheckpointWriter()  # off the training thread; waited for before the run relies on it
    try:
        while progress.step < cfg.steps:
            x, y = (t.to(device) for t in train_batch(corpus, cfg, progress.step))
            stats.add(*_optimizer_step(cfg, trainer, train_fn, x, y, evidence))
            progress.step += 1
            step = progress.step
            if step % cfg.eval_every == 0 or step == cfg.steps:
                eval_loss = evaluate()
                lr = float(trainer.sched.get_last_lr()[0])
                train_loss, mean_norm, skipped = stats.read()
                rows.append(_row(step, train_loss, eval_loss, mean_norm, lr, skipped, cfg))
                stats = _StepStats(device)
                if log:
                    log(
                        f"{cfg.path}/{cfg.precision}/seed{cfg.data_seed % 1000}: step {step} train {rows[-1]['train_loss']:.4f} eval {eval_loss:.4f}"
                    )
                if ckpt is not None and step - saved_at >= cfg.checkpoint_every and step < cfg.steps:
                    writer.save(ckpt, cfg, trainer, progress, progress.elapsed + (time.perf_counter() - start))
                    saved_at = step
            if stop_after is not None and step >= stop_after and step < cfg.steps:
                raise TrainingInterrupted(f"stopped after {step} steps (last checkpoint at step {saved_at})")
    finally:
        writer.wait()

    seconds = progress.elapsed + (time.perf_counter() - start)
    evidence.update(_fused_evidence(cfg, train_fn, eval_fn))
    if ckpt is not None:
        remove_checkpoint(ckpt)
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
    """One curve point; the train loss is the mean over the steps since the last point, the grad norm
    the mean over those of them whose update was applied."""
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
