"""Builds and packages the fleet (fleet.py) as chorus archives, with each
model's input bytes and reference output; run as a child of the driver:

    fleet_models.py WORK SIZE
"""

import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench", "suite"))
sys.path.insert(0, HERE)

import models as suite_models  # noqa: E402
from bert_classifier import LogitsOnly  # noqa: E402
from fleet import fleet  # noqa: E402


def _build(model):
    """(nn.Module, example inputs) of one fleet model."""
    generator = torch.Generator().manual_seed(model.seed + 1)
    if model.kind == "bert":
        import transformers
        config = transformers.BertConfig(
            vocab_size=8000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
            intermediate_size=1024, max_position_embeddings=128, num_labels=4)
        torch.manual_seed(model.seed)
        module = LogitsOnly(transformers.BertForSequenceClassification(config))
        return module, (torch.randint(0, 8000, (1, 16), generator=generator),)
    if model.kind == "mlp":
        mlp = suite_models._import_from("examples/packaging/mlp", "model")
        module = mlp.build(hidden=[model.width, model.width], seed=model.seed)
        return module, (torch.randn(8, 16, generator=generator),)
    module, inputs = suite_models.MODELS[model.kind].build()
    # Its own weights, near the suite's (whose scale keeps activations and the
    # refiner's data-dependent loops as they are).
    generator = torch.Generator().manual_seed(model.seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.mul_(1 + 0.01 * torch.randn(parameter.shape, generator=generator))
    return module, inputs


def prepare(work, size):
    """Packages the first `size` models into work/chorus/<name>/1/model.pt with
    their input bytes and reference outputs; writes work/prepared.json."""
    from chorus.package import PackagingRules, create_package
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    prepared = {"torch": torch.__version__, "models": {}}
    for model in fleet(size):
        module, inputs = _build(model)
        module.eval()
        folder = os.path.join(work, "chorus", model.name, "1")
        os.makedirs(folder, exist_ok=True)
        archive = os.path.join(folder, "model.pt")
        # transformers is an installed library, as torchvision is: the package
        # holds the model's own code only.
        rules = PackagingRules(extern=["transformers", "transformers.**"])
        manifest = create_package(archive, module, inputs, name=model.name, batchable=False,
                                  rules=rules, progress=False)
        (x,) = inputs
        with torch.inference_mode():
            y = module(x)
        inputs_dir = os.path.join(work, "inputs")
        os.makedirs(inputs_dir, exist_ok=True)
        input_bin = os.path.join(inputs_dir, f"{model.name}.bin")
        x.contiguous().numpy().tofile(input_bin)
        expected_bin = os.path.join(inputs_dir, f"{model.name}.expected.bin")
        y.contiguous().numpy().tofile(expected_bin)
        weights = sum(p.numel() * p.element_size() for p in module.parameters())
        prepared["models"][model.name] = {
            "kind": model.kind, "archive": archive, "input_bin": input_bin,
            "expected_bin": expected_bin,
            "input": manifest["inputs"][0], "output": manifest["outputs"][0],
            "weights_mib": weights / 2**20}
    with open(os.path.join(work, "prepared.json"), "w") as f:
        json.dump(prepared, f, indent=1)


if __name__ == "__main__":
    prepare(sys.argv[1], int(sys.argv[2]))
