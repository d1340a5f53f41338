"""The .mar rows of peers_bench.py: one TorchServe archive, made with
torch-model-archiver as a TorchServe user makes it, served as it is by both servers
(chorus with --model-store, TorchServe's inference API and its `ts` handlers).

    resnet18_mar  torchvision's ResNet-18 (seeded weights, a state dict) under TorchServe's
                  default `image_classifier` handler, a 224x224 JPEG per request
    big_mar       a 200 MB state dict (Linear 5000x10000) under BaseHandler, every call
                  reading every weight: what one copy per worker costs

Runs in peers_bench.py's preparation child (it imports torch)."""

import io
import json
import math
import os
import subprocess
import sys
import textwrap

MAR_MODELS = {
    "resnet18_mar": "torchvision ResNet-18 (seeded state dict) in a .mar, TorchServe's "
                    "default image_classifier handler, a 224x224 JPEG per request",
    "big_mar": "Linear 5000x10000 (191 MiB state dict) in a .mar under BaseHandler, "
               "every call reading every weight",
}

RESNET_MODEL = """
from torchvision.models.resnet import BasicBlock, ResNet


class ImageClassifier(ResNet):
    def __init__(self):
        super().__init__(BasicBlock, [2, 2, 2, 2])
"""

BIG_MODEL = """
import torch


class Big(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(5000, 10000)

    def forward(self, x):
        return self.fc(x)
"""

# Ignores the request's bytes: one row of ones through the whole layer, its sum answered.
BIG_HANDLER = """
import torch
from ts.torch_handler.base_handler import BaseHandler


class BigHandler(BaseHandler):
    def preprocess(self, data):
        return torch.ones(len(data), 5000)

    def postprocess(self, data):
        return [round(float(row.sum()), 3) for row in data]
"""


def _write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


def _state_dict(source, class_name, path, seed):
    import torch

    namespace = {}
    exec(textwrap.dedent(source), namespace)
    torch.manual_seed(seed)
    model = namespace[class_name]()
    torch.save(model.state_dict(), path)
    return sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20


def _jpeg(path, seed):
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    with open(path, "wb") as f:
        f.write(buffer.getvalue())


def build(work, name):
    """Archives model `name` into work/mar_store and writes its request's bytes; its
    prepared spec."""
    store = os.path.join(work, "mar_store")
    sources = os.path.join(work, "mar_sources", name)
    os.makedirs(store, exist_ok=True)
    os.makedirs(sources)
    input_bin = os.path.join(work, "inputs", f"{name}.bin")
    os.makedirs(os.path.dirname(input_bin), exist_ok=True)
    weights = os.path.join(sources, "weights.pt")
    if name == "resnet18_mar":
        model_file = _write(sources, "model.py", RESNET_MODEL)
        mib = _state_dict(RESNET_MODEL, "ImageClassifier", weights, 0)
        handler = "image_classifier"
        _jpeg(input_bin, 0)
    else:
        model_file = _write(sources, "model.py", BIG_MODEL)
        mib = _state_dict(BIG_MODEL, "Big", weights, 0)
        handler = _write(sources, "big_handler.py", BIG_HANDLER)
        with open(input_bin, "wb") as f:
            f.write(b"x")
    archiver = os.path.join(os.path.dirname(sys.executable), "torch-model-archiver")
    subprocess.run([archiver, "--model-name", name, "--version", "1.0", "--model-file",
                    model_file, "--serialized-file", weights, "--handler", handler,
                    "--export-path", store, "-f"], check=True, stdout=subprocess.DEVNULL)
    return {"mar": True, "store": store, "input_bin": input_bin,
            "description": MAR_MODELS[name], "weights_mib": mib}


def same_answer(a, b):
    """Whether two answers agree: as JSON values (floats within 1e-5), else as bytes."""
    def close(x, y):
        if isinstance(x, float) or isinstance(y, float):
            return (isinstance(x, (int, float)) and isinstance(y, (int, float))
                    and math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-5))
        if isinstance(x, list) and isinstance(y, list):
            return len(x) == len(y) and all(close(p, q) for p, q in zip(x, y))
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(close(x[k], y[k]) for k in x)
        return x == y
    try:
        return close(json.loads(a), json.loads(b))
    except ValueError:
        return a == b
