"""The mutable state of one task E run (model, optimizer, LR schedule, loss scaler, RNG) and its
checkpoints: saved after every evaluation interval, loaded only by the config that wrote them
(the folder is keyed by :meth:`.config.TrainConfig.key`), removed when the run completes.
"""

import contextlib
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...files import atomic_path
from .config import TrainConfig
from .gpt import GPT


@dataclass
class Trainer:
    """The mutable state of one run: model, optimizer, LR schedule and loss scaler."""

    model: GPT
    opt: torch.optim.AdamW
    sched: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler


def build_trainer(cfg: TrainConfig, device: torch.device) -> Trainer:
    """A fresh run's state: the model initialized from ``cfg.init_seed``, AdamW, the schedule, the scaler."""
    torch.manual_seed(cfg.init_seed)
    model = GPT(cfg.layers, cfg.heads, cfg.width, cfg.context).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    # Loss scaling only where the autocast dtype needs it (fp16); a no-op otherwise.
    scaled = cfg.precision == "float16"
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        # With loss scaling, the fused AdamW skips an overflowed step on the device; with the default
        # one, GradScaler reads its inf flag back to the host every step (a sync per step on a GPU).
        fused=True if scaled else None,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cfg.lr_factor)
    scaler = torch.amp.GradScaler(device.type, enabled=scaled)
    return Trainer(model, opt, sched, scaler)


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
class RunPosition:
    """Where a run stands: optimizer steps done, curve rows so far, seconds spent before this process."""

    step: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0


def load_checkpoint(ckpt: Path, cfg: TrainConfig, trainer: Trainer, device: torch.device) -> RunPosition:
    """Restore ``trainer`` and the RNG from ``ckpt`` (which must belong to ``cfg``); returns where it stood."""
    state = torch.load(ckpt, map_location=device, weights_only=True)  # nothing is unpickled
    if state["config_key"] != cfg.key():
        raise RuntimeError(f"checkpoint {ckpt} belongs to config {state['config_key']}, not {cfg.key()}")
    trainer.model.load_state_dict(state["model"])
    trainer.opt.load_state_dict(state["optimizer"])
    trainer.sched.load_state_dict(state["scheduler"])
    trainer.scaler.load_state_dict(state["scaler"])
    _set_rng_state(state["rng"])
    return RunPosition(state["step"], state["rows"], state["seconds"])


def _on_host(value: Any) -> Any:
    """``value`` with every tensor copied to the host (a snapshot the next step cannot change)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _on_host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_host(v) for v in value)
    return value


class CheckpointWriter:
    """Writes checkpoints off the training thread: :meth:`save` takes a host snapshot of the state
    (the one part that must wait for the device) and hands the file to a writer thread, so training
    goes on while it is serialized and written; :meth:`wait` returns once the last one is on disk
    (before a resume point is relied on, and at the end of the run). A write that failed raises at
    the next :meth:`save` or :meth:`wait`."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, ckpt: Path, cfg: TrainConfig, trainer: Trainer, progress: RunPosition, seconds: float) -> None:
        self.wait()
        state = _on_host(checkpoint_state(cfg, trainer, progress, seconds))

        def write() -> None:
            try:
                with atomic_path(ckpt) as tmp:
                    torch.save(state, tmp)
            except BaseException as exc:  # noqa: BLE001 - raised in the training thread by wait()
                self._error = exc

        self._thread = threading.Thread(target=write, name="checkpoint-writer", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def checkpoint_state(cfg: TrainConfig, trainer: Trainer, progress: RunPosition, seconds: float) -> dict[str, Any]:
    """What a checkpoint holds: the model, optimizer, schedule and scaler, the RNG, the position."""
    return {
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


def remove_checkpoint(ckpt: Path) -> None:
    """Delete ``ckpt`` and its folders where they are left empty."""
    ckpt.unlink(missing_ok=True)
    for folder in (ckpt.parent, ckpt.parent.parent):  # config-key folder, then the run folder if empty
        with contextlib.suppress(OSError):
            folder.rmdir()
