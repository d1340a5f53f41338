"""The models tests/gpu/serve_gpu.py serves, built from fixed seeds with random weights
(nothing downloaded). Packaged with chorus' create_package, this module is interned into
each archive, so the serving interpreters never need it on their path.
"""

import torch
from torch import nn


class StrictFp32(nn.Module):
    """Runs `model` in true fp32 on a GPU: cuDNN's convolutions default to TF32, whose
    10-bit mantissa alone would put a ResNet's outputs ~1e-2 off the CPU's. The switch is
    process-wide, so every path that runs this model (chorus, the plain-Python baselines)
    runs the same kernels."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        return self.model(x)


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: two 3x3 convolutions and a shortcut."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        downsample = None  # made first, as torchvision does: the same draws from the seed
        if stride != 1 or inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18(weights=None), layer for layer, with its initialization
    drawn in its order (the same seed gives the same weights), for hosts without it."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
        for index, (inplanes, planes, stride) in enumerate(widths, start=1):
            setattr(self, f"layer{index}", nn.Sequential(BasicBlock(inplanes, planes, stride),
                                                         BasicBlock(planes, planes)))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18():
    """(model, source): torchvision's ResNet-18 where torchvision imports, else ours; seed
    0, random weights, eval mode, wrapped in StrictFp32."""
    torch.manual_seed(0)
    try:
        import torchvision
        model, source = torchvision.models.resnet18(weights=None), "torchvision"
    except ImportError:
        model, source = ResNet18(), "tests/gpu/gpu_models.py"
    return StrictFp32(model).eval(), source


class BigMLP(nn.Module):
    """`depth` bias-free width x width layers: fp32 weights of 4 * depth * width**2 bytes
    (width 8192, depth 4: 1 GiB)."""

    def __init__(self, width: int, depth: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def big_mlp(width: int, depth: int) -> BigMLP:
    """Seed 2, torch's default initialization, eval mode."""
    torch.manual_seed(2)
    return BigMLP(width, depth).eval()


class Tiny(nn.Module):
    """A few bytes of weights: what makes a server open its CUDA context, so that a later
    load's memory is the model's alone."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)
