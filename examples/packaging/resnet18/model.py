"""torchvision's ResNet-18 with random weights (no download): a real vision model.

torchvision stays extern (installed next to torch); only this file is interned.
"""

import torch
import torchvision


def build(num_classes: int = 1000, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torchvision.models.resnet18(weights=None, num_classes=num_classes)


def example_inputs():
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(2, 3, 64, 64, generator=generator),)
