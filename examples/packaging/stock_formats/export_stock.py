"""Makes the MLP recipe's model in the formats people already have, with stock torch
tools only (this script never imports chorus):

    python export_stock.py OUT_DIR

writes OUT_DIR/mlp_package.pt (torch.package: PackageExporter), mlp_torchscript.pt
(torch.jit.script + save), mlp_export.pt2 (torch.export with a dynamic batch),
mlp_aoti.pt2 (that program compiled by AOTInductor, its signature in the package's
metadata) and example_inputs.pt (a list of tensors, for chorus-package --example-inputs).
"""

import json
import os
import sys

import torch
from torch.package import PackageExporter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mlp"))

import model  # noqa: E402  (the mlp recipe's model.py)


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    mlp = model.build().eval()
    (example,) = model.example_inputs()
    with PackageExporter(os.path.join(out, "mlp_package.pt")) as exporter:
        exporter.intern("model")  # the model's code travels inside the archive
        exporter.extern(["torch", "torch.**"])
        exporter.save_pickle("mlp", "model.pkl", mlp)
    torch.jit.script(mlp).save(os.path.join(out, "mlp_torchscript.pt"))
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(mlp, (example,), dynamic_shapes=({0: batch},))
    torch.export.save(program, os.path.join(out, "mlp_export.pt2"))
    # AOTInductor packages carry no dtypes or shapes of their own: chorus reads them from
    # this metadata key (or from the model's config.json).
    signature = {"inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 16]}],
                 "outputs": [{"name": "scores", "dtype": "float32", "shape": [-1, 4]}],
                 "batching": {"batchable": True, "batch_dim": 0, "max_batch_size": 32}}
    torch._inductor.aoti_compile_and_package(
        program, package_path=os.path.join(out, "mlp_aoti.pt2"),
        inductor_configs={"aot_inductor.metadata": {"chorus.signature": json.dumps(signature)}})
    torch.save([example], os.path.join(out, "example_inputs.pt"))
    assert "chorus" not in sys.modules


if __name__ == "__main__":
    main(sys.argv[1])
