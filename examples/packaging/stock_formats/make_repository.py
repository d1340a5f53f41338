"""Lays out a model repository serving the stock files export_stock.py wrote, unconverted:

    python make_repository.py STOCK_DIR REPOSITORY

torch.export programs and AOTInductor packages (with their signature in the metadata)
need nothing but the file; a stock torch.package archive and a TorchScript file need a
config.json with their signature (and, for torch.package, where the model is), as
Triton's PyTorch backend does (docs/server.md, "Model configuration").
"""

import json
import os
import shutil
import sys

SIGNATURE = {"max_batch_size": 32, "inputs": [{"name": "x", "datatype": "FP32", "dims": [16]}]}
MODELS = {
    "mlp_export": ("mlp_export.pt2", None),
    "mlp_aoti": ("mlp_aoti.pt2", None),
    "mlp_torchscript": ("mlp_torchscript.pt", SIGNATURE),
    "mlp_package": ("mlp_package.pt",
                    {"entry_point": {"package": "mlp", "resource": "model.pkl"}, **SIGNATURE}),
}


def main(stock: str, repository: str) -> None:
    for name, (file, config) in MODELS.items():
        version = os.path.join(repository, name, "1")
        os.makedirs(version, exist_ok=True)
        shutil.copy(os.path.join(stock, file), os.path.join(version, file))
        if config is not None:
            with open(os.path.join(repository, name, "config.json"), "w") as f:
                json.dump(config, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
