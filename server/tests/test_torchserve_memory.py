"""A TorchServe archive's state dict is held once for all the model's workers (TorchServe
holds a copy per worker process: serve#1320): BaseHandler's torch.load of the archive's
checkpoint maps it, and load_state_dict makes the mapped tensors the module's parameters."""

import json

import pytest
import torch
from conftest import ServerProcess
from test_torchserve_api import TORCHSERVE_FLAGS, call
from torchserve_archives import archive

IN_FEATURES, OUT_FEATURES = 5_000, 10_000  # 50M float32 weights: 200 MB
WORKERS = 4

MODEL = f"""
import torch


class Big(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear({IN_FEATURES}, {OUT_FEATURES})

    def forward(self, x):
        return self.fc(x)
"""

TINY_MODEL = MODEL.replace(f"Linear({IN_FEATURES}, {OUT_FEATURES})", "Linear(1, 1)")

# Answers the sum of the module's weights, every page of which it read at initialize.
HANDLER = """
from ts.torch_handler.base_handler import BaseHandler


class SumHandler(BaseHandler):
    def initialize(self, context):
        super().initialize(context)
        self.total = float(sum(p.double().sum() for p in self.model.parameters()))

    def handle(self, data, context):
        return [{"total": self.total} for _ in data]
"""

CONFIG = f"minWorkers: {WORKERS}\n"


def big_archive(store, model_source):
    torch.manual_seed(0)
    module_globals = {}
    exec(model_source, module_globals)
    state = module_globals["Big"]().state_dict()
    total = float(sum(t.double().sum() for t in state.values()))
    archive(store, "big", {"model.py": model_source, "sum_handler.py": HANDLER,
                           "big.pt": state, "model-config.yaml": CONFIG},
            "sum_handler.py", serialized="big.pt", model_file="model.py",
            config="model-config.yaml")
    return total


def test_four_workers_hold_one_copy_of_a_state_dict(tmp_path):
    pss = {}
    for kind, source in (("tiny", TINY_MODEL), ("big", MODEL)):
        store = str(tmp_path / kind / "store")
        total = big_archive(store, source)
        server = ServerProcess(store, *TORCHSERVE_FLAGS)
        try:
            status, _, body = call(server, "/predictions/big", b"x")
            assert status == 200, body
            assert json.loads(body)["total"] == pytest.approx(total, rel=1e-9)
            pss[kind] = server.serving_pss_mib()
        finally:
            assert server.stop() == 0
    added = pss["big"] - pss["tiny"]
    print(f"{WORKERS} workers of a 191 MiB state dict added {added:.0f} MiB of PSS")
    # One copy is 191 MiB; TorchServe's four worker processes would hold four (763 MiB).
    assert added < 260, f"{WORKERS} workers added {added:.0f} MiB of PSS"
