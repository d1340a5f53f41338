"""The compute ceiling of the peer benchmark: one worker with no server around it.

    bare_loop.py ARCHIVE INPUT_BIN BATCH

Loads the archive as TorchServe's handler does (torchserve_handler.load: stock
torch.package, CHORUS_PEERS_INTRA_OP_THREADS intra-op threads), builds the
input from the benchmark's input bytes (BATCH copies of it along the first
dimension when the model batches), warms up, prints "ready" and then, for each
line "WINDOW_S" read from stdin, runs the model back to back under
torch.inference_mode for that long and prints "ITEMS SECONDS" (items: calls
times BATCH). The driver starts N of these at once, one per server worker, and
sums their rates: what N workers could serve if handling a request cost
nothing but the model's own call.
"""

import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchserve_handler  # noqa: E402 (beside this file)


def main():
    archive, input_bin, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # torch.package's own deprecation notice (TorchServe's workers log it too).
    warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
    model, shape, dtype = torchserve_handler.load(archive)
    with open(input_bin, "rb") as f:
        raw = bytearray(f.read())
    one = torch.frombuffer(raw, dtype=dtype).reshape([1 if d == -1 else d for d in shape])
    x = one.repeat(batch, *([1] * (one.dim() - 1))) if batch > 1 else one
    with torch.inference_mode():
        for _ in range(3):
            model(x)
        print("ready", flush=True)
        for line in sys.stdin:
            window_s = float(line)
            calls, began = 0, time.perf_counter()
            while time.perf_counter() - began < window_s:
                model(x)
                calls += 1
            print(calls * batch, time.perf_counter() - began, flush=True)


if __name__ == "__main__":
    main()
