"""Train Llama 3 on the bundled corpus through chorus' training service, then serve
the result from the same server and generate text greedily.

    python3 train_and_serve.py [--server HOST:PORT] [--steps 60] [--config debug]

Without --server it starts build/bin/chorus-server on a scratch model
repository. Steps: package the model (code, corpus, tokenizer) with
package_llama.py; create a job (FSDP over 2 interpreters); train, printing the
loss; export the trained model into the server's repository; generate from a
prompt with ModelInfer, one byte at a time.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import data  # noqa: E402
import package_llama  # noqa: E402
from chorus.client import Client  # noqa: E402
from chorus.client.training import TrainingClient  # noqa: E402


def start_server(repository, interpreters):
    binary = os.path.join(os.environ.get("CHORUS_BIN_DIR", os.path.join(ROOT, "build", "bin")),
                          "chorus-server")
    process = subprocess.Popen([binary, "--model-repository", repository, "--host", "127.0.0.1",
                                "--port", "0", "--metrics-port", "-1", "--http-port", "-1",
                                "--interpreters", str(interpreters)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = re.search(r"port (\d+)", process.stdout.readline()).group(1)
    return process, f"127.0.0.1:{port}"


def generate(client, model, prompt, length):
    tokens = list(data.encode(prompt).tolist())
    for _ in range(length):
        logits = client.infer(model, {"tokens": np.array([tokens], dtype=np.int64)})["logits"]
        tokens.append(int(logits[0, -1].argmax()))
    return data.decode(tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", help="a running chorus-server (else one is started)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--config", default="debug")
    parser.add_argument("--overrides", default='{"dim": 128, "n_layers": 2, "n_heads": 8, '
                                               '"n_kv_heads": 4, "multiple_of": 64}')
    parser.add_argument("--dp", type=int, default=2, help="FSDP ranks (interpreters)")
    parser.add_argument("--prompt", default="The lighthouse keeper ")
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="chorus-llama3-")
    archive = os.path.join(scratch, "llama3.pt")
    overrides = json.loads(args.overrides)
    package_llama.package(archive, args.config, overrides)
    print(f"packaged {archive}")
    server = None
    address = args.server
    if address is None:
        os.makedirs(os.path.join(scratch, "models"))
        server, address = start_server(os.path.join(scratch, "models"), max(2, args.dp))
    try:
        with TrainingClient(address) as trainer, Client(address) as inference:
            job = trainer.create_job(
                name="llama3", archive=archive, model_factory="model:build",
                model_config_json=json.dumps({"name": args.config, "vocab_size": 256, **overrides}),
                parallelize="parallelize:parallelize_for_job", data_loader="data:batches",
                global_batch=8, seq_len=64, seed=0, dp_shard=args.dp,
                optimizer={"lr": 3e-3, "weight_decay": 0.01},
                lr_schedule={"kind": "warmup_cosine", "warmup_steps": 5,
                             "total_steps": args.steps, "min_lr_ratio": 0.1})
            for metrics in trainer.step(job, args.steps):
                if metrics.step == 1 or metrics.step % 10 == 0:
                    print(f"step {metrics.step:4d}  loss {metrics.loss:.3f}  "
                          f"{metrics.tokens_per_second:8.0f} tok/s  MFU {metrics.mfu_pct:.2f}%")
            exported = trainer.export(job, "llama3_trained")
            print(f"exported {exported.path}; serving it as llama3_trained")
            trainer.delete(job)
            print("generated:", repr(generate(inference, "llama3_trained", args.prompt, 60)))
    finally:
        if server is not None:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
