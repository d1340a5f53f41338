"""The models peers_bench.py serves, and the files both servers read: the chorus
archives, TorchServe's model store and perf_analyzer's input files."""

import base64
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

ALL_MODELS = ["resnet18", "control_flow", "big_mlp", "resnet18_batched", "resnet18_mar",
              "big_mar"]
# Configurations that batch on both sides, with the same settings: the model packaged
# batchable up to max_batch_size; chorus' dynamic batching waits up to delay_ms for a
# batch to fill (config.json max_queue_delay_us), TorchServe's frontend likewise
# (batchSize, maxBatchDelay in the archive's model-config.yaml), whose handler then
# runs the batch as one call. perf_analyzer still sends one item per request.
BATCHED = {"resnet18_batched": {"model": "resnet18", "max_batch_size": 8, "delay_ms": 2}}


# --------------------------------------------------------------------------
# Preparation (a child process: the driver itself never imports torch, so it
# maps none of libtorch's pages and cannot lower either stack's PSS by sharing
# them).

def prepare(work, names):
    """Packages each model, writes its input bytes and reference output; runs in a
    child process. Writes work/prepared.json."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "bench", "suite"))
    sys.path.insert(0, HERE)
    import torch

    import mar_models
    import models as suite_models
    from chorus.package import create_package
    prepared = {"torch": torch.__version__}
    for name in names:
        if name in mar_models.MAR_MODELS:
            prepared[name] = mar_models.build(work, name)
            continue
        if name == "big_mlp":
            import big_mlp
            model, inputs = big_mlp.build(), big_mlp.example_inputs()
            description = ("16 fp32 Linear layers 4096x4096 with ReLU (1.0 GiB of weights), "
                           "forward on 1x4096")
        else:
            spec = suite_models.MODELS[BATCHED.get(name, {}).get("model", name)]
            model, inputs = spec.build()
            description = spec.description
        model.eval()
        folder = os.path.join(work, "chorus", name, "1")
        os.makedirs(folder)
        archive = os.path.join(folder, "model.pt")
        batching = BATCHED.get(name)
        if batching:
            description += (f"; batched up to {batching['max_batch_size']} within "
                            f"{batching['delay_ms']} ms on both sides")
            manifest = create_package(archive, model, inputs, name=name, batchable=True,
                                      max_batch_size=batching["max_batch_size"],
                                      progress=False)
            with open(os.path.join(work, "chorus", name, "config.json"), "w") as f:
                json.dump({"max_queue_delay_us": batching["delay_ms"] * 1000}, f)
        else:
            manifest = create_package(archive, model, inputs, name=name, batchable=False,
                                      progress=False)
        (x,) = inputs
        with torch.inference_mode():
            y = model(x)
        input_bin = os.path.join(work, "inputs", f"{name}.bin")
        os.makedirs(os.path.dirname(input_bin), exist_ok=True)
        with open(input_bin, "wb") as f:
            f.write(x.contiguous().numpy().tobytes())
        with open(os.path.join(work, "inputs", f"{name}.expected.bin"), "wb") as f:
            f.write(y.contiguous().numpy().tobytes())
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        prepared[name] = {"archive": archive, "input_bin": input_bin,
                          "input": manifest["inputs"][0], "output": manifest["outputs"][0],
                          "description": description, "weights_mib": weights / 2**20}
        del model
    with open(os.path.join(work, "prepared.json"), "w") as f:
        json.dump(prepared, f, indent=1)


def archive_for_torchserve(python, store, name, archive, config=None):
    """Adds `archive` to TorchServe's model `store` as torch-model-archiver makes it
    (no-archive format: a folder, so TorchServe does not unzip it at start) with
    the peers' handler, the archive itself hard-linked in (the tool copies it);
    `config`: a model-config.yaml."""
    archiver = os.path.join(os.path.dirname(python), "torch-model-archiver")
    command = [archiver, "--model-name", name, "--version", "1.0",
               "--serialized-file", archive,
               "--handler", os.path.join(HERE, "torchserve_handler.py"),
               "--export-path", store, "--archive-format", "no-archive"]
    if config:
        command += ["--config-file", config]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    copy = os.path.join(store, name, os.path.basename(archive))
    try:
        os.unlink(copy)
        os.link(archive, copy)
    except OSError:
        shutil.copyfile(archive, copy)


def torchserve_store(work, prepared, python):
    """A TorchServe model store holding each prepared model (archive_for_torchserve)."""
    store = os.path.join(work, "torchserve_store")
    os.makedirs(store)
    for name in ALL_MODELS:
        if name not in prepared or prepared[name].get("mar"):
            continue  # a .mar serves from its own store on both sides
        config = None
        if name in BATCHED:
            config = os.path.join(work, f"{name}.model-config.yaml")
            with open(config, "w") as f:
                f.write(f"batchSize: {BATCHED[name]['max_batch_size']}\n"
                        f"maxBatchDelay: {BATCHED[name]['delay_ms']}\n")
        archive_for_torchserve(python, store, name, prepared[name]["archive"], config)
    return store


def write_inputs(work, prepared):
    """perf_analyzer's input files: the same bytes for both servers."""
    for name, spec in prepared.items():
        if not isinstance(spec, dict):
            continue
        if spec.get("mar"):
            with open(os.path.join(work, "inputs", f"{name}.torchserve.json"), "w") as f:
                json.dump({"data": [{"TORCHSERVE_INPUT": [spec["input_bin"]]}]}, f)
            continue
        with open(spec["input_bin"], "rb") as f:
            payload = f.read()
        inputs = os.path.join(work, "inputs")
        with open(os.path.join(inputs, f"{name}.grpc.json"), "w") as f:
            json.dump({"data": [{spec["input"]["name"]: {
                "b64": base64.b64encode(payload).decode()}}]}, f)
        with open(os.path.join(inputs, f"{name}.torchserve.json"), "w") as f:
            json.dump({"data": [{"TORCHSERVE_INPUT": [spec["input_bin"]]}]}, f)
