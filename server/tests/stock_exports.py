"""Makes models with stock torch tools only (no chorus import): run as a script in its own
process. Writes, under OUT: a stock torch.package archive whose model class exists only
inside it (stock_package.pt), the same model as TorchScript (torchscript.pt), as a
torch.export program with a dynamic batch (export.pt2), compiled by AOTInductor with its
signature in the package's metadata (aoti.pt2) and without (aoti_unsigned.pt2), its example
inputs (inputs.pt, a list) and the exporting process's inputs and outputs (expected.pt).

    python stock_exports.py OUT
"""

import json
import os
import sys

MODEL_SOURCE = '''
import torch


class TinyClassifier(torch.nn.Module):
    """conv -> relu -> pool -> linear: [B, 3, 8, 8] -> [B, 10]."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.head = torch.nn.Linear(6 * 4 * 4, 10)

    def forward(self, image):
        x = torch.nn.functional.max_pool2d(self.conv(image).relu(), 2)
        return self.head(x.flatten(1))
'''


def main(out):
    import torch
    from torch.package import PackageExporter

    os.makedirs(out, exist_ok=True)
    # The class lives in a module only this process can import: the archive must carry it.
    with open(os.path.join(out, "tiny_classifier_def.py"), "w") as f:
        f.write(MODEL_SOURCE)
    sys.path.insert(0, out)
    import tiny_classifier_def

    torch.manual_seed(0)
    model = tiny_classifier_def.TinyClassifier().eval()
    with PackageExporter(os.path.join(out, "stock_package.pt")) as exporter:
        exporter.intern("tiny_classifier_def")
        exporter.extern(["torch", "torch.**"])
        exporter.save_pickle("model", "model.pkl", model)
    torch.jit.script(model).save(os.path.join(out, "torchscript.pt"))
    image = torch.randn(3, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (image,), dynamic_shapes={"image": {0: batch}})
    torch.export.save(program, os.path.join(out, "export.pt2"))
    signature = {"inputs": [{"name": "image", "dtype": "float32", "shape": [-1, 3, 8, 8]}],
                 "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1, 10]}],
                 "batching": {"batchable": True, "batch_dim": 0, "max_batch_size": 4}}
    torch._inductor.aoti_compile_and_package(
        program, package_path=os.path.join(out, "aoti.pt2"),
        inductor_configs={"aot_inductor.metadata": {"chorus.signature": json.dumps(signature)}})
    torch._inductor.aoti_compile_and_package(program,
                                             package_path=os.path.join(out, "aoti_unsigned.pt2"))
    torch.save([image[:2]], os.path.join(out, "inputs.pt"))
    with torch.no_grad():
        expected = model(image)
    torch.save({"image": image, "logits": expected}, os.path.join(out, "expected.pt"))
    os.remove(os.path.join(out, "tiny_classifier_def.py"))
    assert "chorus" not in sys.modules


if __name__ == "__main__":
    main(sys.argv[1])
