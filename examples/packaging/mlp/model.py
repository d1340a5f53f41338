"""A multi-layer perceptron: the smallest useful chorus package."""

from dataclasses import dataclass, field
from typing import List

import torch
from torch import nn


@dataclass
class MLPConfig:
    in_features: int = 16
    hidden: List[int] = field(default_factory=lambda: [64, 64])
    out_features: int = 4
    seed: int = 0


class MLP(nn.Module):
    def __init__(self, config: MLPConfig):
        super().__init__()
        sizes = [config.in_features, *config.hidden, config.out_features]
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.layers = nn.Sequential(*layers[:-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def build(**overrides) -> MLP:
    config = MLPConfig(**overrides)
    torch.manual_seed(config.seed)
    return MLP(config)


def example_inputs():
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(8, MLPConfig().in_features, generator=generator),)
