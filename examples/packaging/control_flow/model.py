"""A model whose behaviour depends on the data through Python control flow.

It refines its answer in a loop until the update is small (a data-dependent
number of iterations), routes each sample through one of two experts by a
Python-level decision, and keeps a Python list of intermediate norms. Tracing
would freeze one path; chorus runs the Python as written.
"""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class RefinerConfig:
    features: int = 32
    max_steps: int = 20
    tolerance: float = 1e-3
    seed: int = 0


class IterativeRefiner(nn.Module):
    def __init__(self, config: RefinerConfig):
        super().__init__()
        self.config = config
        self.update = nn.Linear(config.features, config.features)
        self.small_expert = nn.Linear(config.features, 2)
        self.large_expert = nn.Sequential(
            nn.Linear(config.features, 64), nn.Tanh(), nn.Linear(64, 2))

    def refine(self, state: torch.Tensor) -> torch.Tensor:
        norms = []
        for _ in range(self.config.max_steps):
            step = 0.5 * torch.tanh(self.update(state))
            state = state + step
            norms.append(float(step.norm()))
            if norms[-1] < self.config.tolerance:
                break
        return state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = []
        for sample in x:  # per-sample routing decided in Python
            state = self.refine(sample.unsqueeze(0))
            expert = self.large_expert if state.abs().mean() > 1.0 else self.small_expert
            outputs.append(expert(state))
        return torch.cat(outputs)


def build(**overrides) -> IterativeRefiner:
    config = RefinerConfig(**overrides)
    torch.manual_seed(config.seed)
    return IterativeRefiner(config)


def example_inputs():
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(4, RefinerConfig().features, generator=generator) * 2,)
