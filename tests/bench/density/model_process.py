"""One model in its own Python process, served over HTTP (the processes stack
of make bench-density: Triton's Python-backend shape without its frontend).

    model_process.py ARCHIVE PORT

Loads the chorus archive with stock torch.package as the peers' TorchServe
handler does (tests/bench/peers/torchserve_handler.py: its `load`), then
answers each POST's body, the input tensor's raw bytes, with the output
tensor's raw bytes. HTTP/1.1 keep-alive, a thread per connection (the model's
calls take turns on the GIL, as in any one Python process).
"""

import http.server
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
from torchserve_handler import load  # noqa: E402

MODEL, SHAPE, DTYPE = load(sys.argv[1])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (http.server's name)
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        x = torch.frombuffer(bytearray(raw), dtype=DTYPE).reshape(SHAPE)
        with torch.inference_mode():
            answer = MODEL(x).contiguous().numpy().tobytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
