"""The peer benchmark's model with 1 GiB of weights.

The case where one copy of the weights per worker process is what a
process-per-worker server costs: 16 fp32 layers of 4096 x 4096 (1.0 GiB of
weights), called on one 4096-wide row, so that every call reads every weight and
no page of them stays cold in either server. This module is packed into the
model's archive as it is (torch.package), so it imports nothing but torch.
"""

import torch
from torch import nn

WIDTH = 4096
LAYERS = 16


class BigMlp(nn.Module):
    def __init__(self, width: int = WIDTH, layers: int = LAYERS):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return x


def build() -> BigMlp:
    torch.manual_seed(0)
    return BigMlp()


def example_inputs():
    return (torch.randn(1, WIDTH, generator=torch.Generator().manual_seed(1)),)
