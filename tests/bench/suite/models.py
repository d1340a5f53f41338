"""The benchmark suite's models: what each is, its inputs, and how TorchScript takes it.

Every model is built with fixed seeds and random weights (nothing downloaded).
Inputs are small enough that one call takes milliseconds on a 2-core machine,
so a run measures hundreds of calls per mode.
"""

import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _import_from(folder: str, module: str):
    """Imports `module` from `folder` under its plain name, as torch.package will see it."""
    path = os.path.join(ROOT, folder)
    if path not in sys.path:
        sys.path.insert(0, path)
    sys.modules.pop(module, None)
    return __import__(module)


@dataclass
class BenchModel:
    name: str
    build: Callable[[], Tuple[torch.nn.Module, Tuple[torch.Tensor, ...]]]
    # How to make TorchScript of it: "trace" (no data-dependent control flow),
    # "script", or None when neither gives the same program.
    torchscript: Optional[str]
    description: str
    # Whether torch.export takes it (then the suite also runs it as a program and
    # compiled by AOTInductor).
    exports: bool = False


def _resnet18():
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None)
    return model, (torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1)),)


def _mobilenet_v3():
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(weights=None)
    return model, (torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(1)),)


def _mlp():
    mlp = _import_from("examples/packaging/mlp", "model")
    return mlp.build(), mlp.example_inputs()


def _llama3_debug():
    llama = _import_from("examples/llama3", "model")
    model = llama.build("debug", seed=0)
    tokens = torch.randint(0, model.args.vocab_size, (1, 32),
                           generator=torch.Generator().manual_seed(1))
    return model, (tokens,)


def _control_flow():
    refiner = _import_from("examples/packaging/control_flow", "model")
    return refiner.build(), refiner.example_inputs()


MODELS = {
    m.name: m for m in [
        BenchModel("resnet18", _resnet18, "trace", "torchvision ResNet-18, 1x3x64x64",
                   exports=True),
        BenchModel("mobilenet_v3", _mobilenet_v3, "trace",
                   "torchvision MobileNetV3-Small, 1x3x96x96", exports=True),
        BenchModel("mlp", _mlp, "trace", "the example MLP (16-64-64-4), batch 8", exports=True),
        BenchModel("llama3_debug", _llama3_debug, "trace",
                   "Llama 3 debug (dim 256, 6 layers), forward on 1x32 tokens"),
        # Data-dependent loop lengths and per-sample routing: a trace would
        # freeze one path and scripting rejects its Python, so no TorchScript.
        BenchModel("control_flow", _control_flow, None,
                   "the example iterative refiner: Python loops and branches per sample"),
    ]
}
