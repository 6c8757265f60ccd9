"""The models the trainer knows: a small residual CNN classifier (enough real compute to exercise DDP,
small enough for a CPU) and the GPT-2 style Transformers of trainer.gpt, chosen by one --model name."""
from __future__ import annotations

import torch
from torch import nn

from trainer.gpt import DEFAULT_VOCAB_SIZE, GPT_SIZES, Transformer
from trainer.huggingface import shape_of

# name -> (base width, residual blocks per stage); three stages double the width and halve the image.
MODEL_SIZES: dict[str, tuple[int, int]] = {"tiny": (16, 1), "small": (32, 2), "base": (64, 3)}


class ResidualBlock(nn.Module):
    """conv-norm-GELU twice with a skip connection.

    GroupNorm instead of BatchNorm: it normalises each sample on its own, so a 2-rank run computes
    exactly what a 1-rank run on the same global batch computes (BatchNorm statistics would be per rank).
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.GroupNorm(8, channels), nn.GELU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.GroupNorm(8, channels),
        )
        self.activation = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(x + self.body(x))


MODEL_NAMES = [*MODEL_SIZES, *GPT_SIZES]


def is_language_model(name: str) -> bool:
    """A GPT: one of GPT_SIZES, or the spelled-out shape of a pretrained one (trainer.huggingface)."""
    return shape_of(name) is not None


def build_model(name: str, *, num_classes: int, vocab_size: int | None,
                padded_vocab_size: int | None = None) -> nn.Module:
    """The named model: a GPT (VOCAB_SIZE None = its default vocabulary; PADDED_VOCAB_SIZE for a
    pretrained one, see Transformer) or a CNN with NUM_CLASSES outputs."""
    if is_language_model(name):
        return Transformer(shape_of(name), vocab_size or DEFAULT_VOCAB_SIZE[name], padded_vocab_size)
    return build_cnn(name, num_classes)


def build_cnn(size: str, num_classes: int) -> nn.Module:
    """Builds the CNN of the named size (a key of MODEL_SIZES) for 3-channel images of any size."""
    width, blocks = MODEL_SIZES[size]
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1, bias=False), nn.GroupNorm(8, width), nn.GELU()]
    channels = width
    for stage in range(3):
        if stage > 0:  # downsample and widen between stages
            layers += [nn.Conv2d(channels, channels * 2, 3, stride=2, padding=1, bias=False),
                       nn.GroupNorm(8, channels * 2), nn.GELU()]
            channels *= 2
        layers += [ResidualBlock(channels) for _ in range(blocks)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)]
    return nn.Sequential(*layers)
