"""The fleet of make bench-density: M distinct models, as a host serving many
customers' models holds them, and the files every stack serves them from.

Built with fixed seeds, nothing downloaded. A fleet of M holds, in this order
(so the fleet of 20 is the first 20 of the fleet of 50):
  per 10 models: 1 torchvision ResNet-18, 1 MobileNetV3-Small, 1 BERT-style
  classifier (transformers' BertForSequenceClassification, 4 layers of width
  256), 1 iterative refiner (the suite's control_flow), 6 MLPs of different
  widths (the example MLP, hidden widths 64 to 1,024);
each with its own seed, so no two models are the same weights.

fleet_models.py builds and packages them, in a child process: the driver
never imports torch, so it maps none of libtorch's pages and lowers no stack's
PSS by sharing them.
"""

from dataclasses import dataclass

KINDS_PER_TEN = ["resnet18", "mobilenet_v3", "bert", "control_flow"] + ["mlp"] * 6
MLP_WIDTHS = [64, 128, 256, 512, 768, 1024]


@dataclass(frozen=True)
class FleetModel:
    name: str
    kind: str
    seed: int
    width: int = 0  # MLPs: hidden width


def fleet(size):
    """The first `size` models of the fleet."""
    models = []
    for i in range(size):
        kind = KINDS_PER_TEN[i % 10]
        width = MLP_WIDTHS[(i // 10 + i % 10) % len(MLP_WIDTHS)] if kind == "mlp" else 0
        models.append(FleetModel(f"{kind}_{i:02d}", kind, seed=1000 + i, width=width))
    return models
