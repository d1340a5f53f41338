"""TorchServe's responseTimeout on chorus-server: a batch that outlives it gets
TorchServe's 500 "Worker died.", and the worker's handler is made and initialized again
(TorchServe starts a new worker process), then serves the next requests."""

import json

from conftest import ServerProcess
from test_torchserve_api import call
from torchserve_archives import archive

# Spins in Python on "spin" (the deadline interrupts it at a bytecode); answers which
# handler object it is and how many initializations this process has seen.
SPINNING_HANDLER = '''
import builtins


class Spinner:
    def initialize(self, context):
        builtins.spinner_initializations = getattr(builtins, "spinner_initializations", 0) + 1
        self.initialized = True

    def handle(self, data, context):
        if (data[0].get("data") or data[0].get("body")) == b"spin":
            while True:
                pass
        return [{"handler": id(self), "initializations": builtins.spinner_initializations}
                for _ in data]
'''

CONFIG = """
minWorkers: 1
responseTimeout: 5
"""


def test_a_batch_past_the_response_timeout_gets_workers_died_and_a_new_handler(tmp_path):
    store = str(tmp_path / "store")
    archive(store, "spinner", {"spinner.py": SPINNING_HANDLER, "model-config.yaml": CONFIG},
            "spinner.py", config="model-config.yaml")
    server = ServerProcess(store, "--models", "spinner.mar", "--torchserve-inference-port", "0",
                           interpreters=1)
    try:
        status, _, body = call(server, "/predictions/spinner", b"x",
                               {"Content-Type": "application/octet-stream"})
        assert status == 200, body
        before = json.loads(body)
        status, _, body = call(server, "/predictions/spinner", b"spin",
                               {"Content-Type": "application/octet-stream"})
        assert status == 500, body
        assert json.loads(body) == {"code": 500, "type": "InternalServerException",
                                    "message": "Worker died."}
        status, _, body = call(server, "/predictions/spinner", b"x",
                               {"Content-Type": "application/octet-stream"})
        assert status == 200, body
        after = json.loads(body)
        assert after["initializations"] == before["initializations"] + 1
        assert "responseTimeout" in server.log_text()
    finally:
        assert server.stop() == 0
