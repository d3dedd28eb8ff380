"""The architectures M runs: models from ``transformers`` built from configs with seeded random weights.

Each entry is a workload in the same duck-typed form a user's own workload takes (see
:mod:`.workloads`): ``name``, ``build()`` returning an ``nn.Module`` and ``inputs(generator, batch)``
returning a tuple of tensors on ``generator.device``. The module is an adapter holding the library's
model as ``model`` (so the divergence locator names its submodules as the library does, e.g.
``model.transformer.h.0.ln_1``) and returning the model's main outputs as a tuple of tensors.

Vision backbones (ResNet-50, ViT, ConvNeXt) come from ``transformers`` too: its implementations need
no torchvision, whose PyPI wheels are built against one torch release each.

Sizes per scale: ``tiny`` (two layers, width 32: the tests), ``small`` (the default profile: compile
time per model in seconds on a 2-core CPU), ``real`` (the published sizes: GPT-2 small, BERT-base,
a 12-layer Llama-style decoder, T5-small, ResNet-50, ViT-B/16, ConvNeXt-T).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: Token ids are drawn from the first VOCAB_DRAWN ids of the vocabulary (every config has at least that many).
VOCAB_DRAWN = 500


class Adapter(nn.Module):
    """Positional tensors in, the model's main outputs out (a tuple of tensors)."""

    def __init__(self, model: nn.Module, kind: str, outputs: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.kind = kind
        self.outputs = outputs

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.kind == "text":
            ids, mask = tensors
            out = self.model(input_ids=ids, attention_mask=mask, use_cache=False, return_dict=True)
        elif self.kind == "seq2seq":
            ids, mask, decoder_ids = tensors
            out = self.model(
                input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, use_cache=False, return_dict=True
            )
        else:
            (pixels,) = tensors
            out = self.model(pixel_values=pixels, return_dict=True)
        return tuple(out[name].flatten(1) if out[name].dim() == 4 else out[name] for name in self.outputs)


def _text(cfg: dict[str, int], family: str) -> Any:
    import transformers as t

    layers, width, heads, ffn, vocab = cfg["layers"], cfg["width"], cfg["heads"], cfg["ffn"], cfg["vocab"]
    if family == "gpt2":
        # bos / eos inside the vocabulary (GPT-2's own, 50256, is past the small ones); the forward never reads them.
        return t.GPT2Config(
            n_layer=layers,
            n_embd=width,
            n_head=heads,
            n_inner=ffn,
            vocab_size=vocab,
            n_positions=1024,
            bos_token_id=vocab - 1,
            eos_token_id=vocab - 1,
        )
    if family == "bert":
        return t.BertConfig(
            num_hidden_layers=layers,
            hidden_size=width,
            num_attention_heads=heads,
            intermediate_size=ffn,
            vocab_size=vocab,
        )
    if family == "llama":
        return t.LlamaConfig(
            num_hidden_layers=layers,
            hidden_size=width,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            intermediate_size=ffn,
            vocab_size=vocab,
        )
    if family == "t5":
        return t.T5Config(
            num_layers=layers,
            num_decoder_layers=layers,
            d_model=width,
            num_heads=heads,
            d_kv=width // heads,
            d_ff=ffn,
            vocab_size=vocab,
        )
    raise ValueError(f"no text family {family!r}")


TEXT_SCALES = {
    "tiny": dict(layers=2, width=32, heads=2, ffn=64, vocab=VOCAB_DRAWN),
    "small": dict(layers=2, width=128, heads=4, ffn=512, vocab=2048),
}
#: Published sizes: GPT-2 small, BERT-base, a 12-layer Llama-style decoder of GPT-2's width, T5-small.
REAL_TEXT = {
    "gpt2": dict(layers=12, width=768, heads=12, ffn=3072, vocab=50257),
    "bert": dict(layers=12, width=768, heads=12, ffn=3072, vocab=30522),
    "llama": dict(layers=12, width=768, heads=12, ffn=2048, vocab=32000),
    "t5": dict(layers=6, width=512, heads=8, ffn=2048, vocab=32128),
}


def _vision(scale: str, family: str) -> Any:
    import transformers as t

    if family == "resnet50":  # bottleneck blocks, as ResNet-50; "real" has its [3, 4, 6, 3] stages
        depths, widths = {"tiny": ([1, 1, 1, 1], [32, 64, 64, 128]), "small": ([1, 1, 1, 1], [64, 128, 256, 512])}.get(
            scale, ([3, 4, 6, 3], [256, 512, 1024, 2048])
        )
        return t.ResNetConfig(
            depths=depths, hidden_sizes=widths, embedding_size=widths[0] // 4 or 8, layer_type="bottleneck"
        )
    if family == "vit":
        layers, width, heads = {"tiny": (2, 32, 2), "small": (2, 128, 4)}.get(scale, (12, 768, 12))
        return t.ViTConfig(
            num_hidden_layers=layers,
            hidden_size=width,
            num_attention_heads=heads,
            intermediate_size=4 * width,
            patch_size=16 if scale == "real" else 8,
        )
    if family == "convnext":
        depths, widths = {"tiny": ([1, 1, 1, 1], [16, 32, 32, 64]), "small": ([1, 1, 1, 1], [32, 64, 128, 256])}.get(
            scale, ([3, 3, 9, 3], [96, 192, 384, 768])
        )
        return t.ConvNextConfig(depths=depths, hidden_sizes=widths)
    raise ValueError(f"no vision family {family!r}")


@dataclass(frozen=True)
class Architecture:
    """One architecture of the zoo: which library class, what it takes and what it returns."""

    name: str
    model_class: str  # a class of ``transformers``
    kind: str  # text | seq2seq | image
    outputs: tuple[str, ...]  # the output fields compared
    causal: bool = False  # a decoder: its padding mask is right-aligned like the encoders'

    def config(self, scale: str) -> Any:
        if self.kind == "image":
            return _vision(scale, self.name)
        sizes = REAL_TEXT[self.name] if scale == "real" else TEXT_SCALES[scale]
        return _text(sizes, self.name)


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("gpt2", "GPT2LMHeadModel", "text", ("logits",), causal=True),
        Architecture("bert", "BertModel", "text", ("last_hidden_state", "pooler_output")),
        Architecture("llama", "LlamaForCausalLM", "text", ("logits",), causal=True),
        Architecture("t5", "T5Model", "seq2seq", ("last_hidden_state", "encoder_last_hidden_state")),
        Architecture("resnet50", "ResNetModel", "image", ("pooler_output",)),
        Architecture("vit", "ViTModel", "image", ("last_hidden_state",)),
        Architecture("convnext", "ConvNextModel", "image", ("pooler_output",)),
    )
}


@dataclass(frozen=True)
class ZooWorkload:
    """An architecture at one scale, as a workload (the same form a user's workload has)."""

    arch: Architecture
    scale: str
    seq_len: int
    image_size: int
    source: str = "transformers"

    @property
    def name(self) -> str:
        return self.arch.name

    def build(self) -> nn.Module:
        import transformers

        cls: Callable[[Any], nn.Module] = getattr(transformers, self.arch.model_class)
        config = self.arch.config(self.scale)
        if self.arch.kind == "image":
            config.image_size = self.image_size
        return Adapter(cls(config), self.arch.kind, self.arch.outputs).eval()

    def inputs(self, generator: torch.Generator, batch: int) -> tuple[torch.Tensor, ...]:
        device = generator.device
        if self.arch.kind == "image":
            # Normalized pixels, as an image pipeline hands them to a backbone.
            size = (batch, 3, self.image_size, self.image_size)
            return (torch.randn(size, generator=generator, device=device),)
        ids = torch.randint(0, VOCAB_DRAWN, (batch, self.seq_len), generator=generator, device=device)
        # Each sequence keeps a random number of real tokens (at least half), the rest is padding.
        keep = torch.randint(self.seq_len // 2, self.seq_len + 1, (batch, 1), generator=generator, device=device)
        mask = (torch.arange(self.seq_len, device=device)[None, :] < keep).to(torch.int64)
        if self.arch.kind == "seq2seq":
            return ids, mask, ids[:, : max(1, self.seq_len // 2)].clone()
        return ids, mask


def zoo_workloads(names: tuple[str, ...], scale: str, seq_len: int, image_size: int) -> list[ZooWorkload]:
    unknown = [n for n in names if n not in ARCHITECTURES]
    if unknown:
        raise ValueError(f"unknown architectures {unknown}; known: {', '.join(ARCHITECTURES)}")
    if scale not in ("tiny", "small", "real"):
        raise ValueError(f"unknown scale {scale!r}; expected tiny, small or real")
    return [ZooWorkload(ARCHITECTURES[n], scale, seq_len, image_size) for n in names]
