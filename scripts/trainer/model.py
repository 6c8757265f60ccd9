"""A small residual CNN classifier: enough real compute to exercise DDP, small enough for a CPU."""
from __future__ import annotations

import torch
from torch import nn

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


def build_model(size: str, num_classes: int) -> nn.Module:
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
