"""The model repositories make bench-triton serves, on Triton and on chorus alike: Triton's
own format (config.pbtxt and <version>/model.py), one folder per instance count, every
model's model.py the file of the same name in model_py/.

    triton_models.py WORK --instances 1,2 --fleet 20,50 --fleet-instances 1,2

writes (in a child process of the driver, which never imports torch: it would map
libtorch's pages and lower both servers' PSS by sharing them)
  WORK/repository-n<K>/               the six models (MODELS), K instances each
  WORK/fleet-<M>-n<K>/                the first M models of the density fleet, K instances each
  WORK/weights/                       each model's weights, written once (torch.save) and
                                      hard-linked into every repository (a symbolic link
                                      would leave the model's folder, and chorus maps only
                                      checkpoints inside it)
  WORK/checks/<model>.in.npy, .expected.bin  a request's input, the answer it must get
  WORK/fleet/<name>.{bin,expected.bin} the fleet's request bytes and answers (load.py's)
  WORK/prepared.json                  what was written: ITERATIONS calibrated, weights'
                                      sizes, the fleet's specs, torch's version
"""

import argparse
import json
import os
import shutil
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = os.path.join(HERE, "model_py")

# The repository's models: their tensors (FP32 INPUT0 -> OUTPUT0) and config.pbtxt's
# other settings. "threads": the model sets torch's intra-op threads from the parameter
# INTRA_OP_THREADS, cores over the instance count (what chorus-server sets for its one
# pool with as many interpreters), so a Triton stub per instance does not oversubscribe
# the cores either.
MODELS = {
    "identity": {"dims": [1, 4], "out": [1, 4]},
    "pyloop": {"dims": [1, 4], "out": [1, 4]},
    "mlp": {"dims": [1, 4], "out": [1, 4], "threads": True,
            "parameters": {"WIDTH": 1024, "LAYERS": 3}},
    "resnet18": {"dims": [3, 64, 64], "out": [1000], "max_batch_size": 8,
                 "dynamic_batching": True, "threads": True},
    "bls": {"dims": [1, 4], "out": [1, 4]},
    "decoupled": {"dims": [1, 4], "out": [1, 4], "decoupled": True,
                  "parameters": {"RESPONSES": 16}},
}

# What perf_analyzer measures: (row, model, extra perf_analyzer arguments, protocol).
# resnet18 is measured with requests of 1 item (its dynamic batcher joins them) and of 8.
ROWS = [
    ("identity", "identity", [], "grpc"),
    ("identity_http", "identity", [], "http"),
    ("pyloop", "pyloop", [], "grpc"),
    ("mlp", "mlp", [], "grpc"),
    ("resnet18", "resnet18", ["-b", "1"], "grpc"),
    ("resnet18_b8", "resnet18", ["-b", "8"], "grpc"),
    ("bls", "bls", [], "grpc"),
    ("decoupled", "decoupled", ["--streaming"], "grpc"),
]
PYLOOP_TARGET_S = 0.001

FLEET_WIDTHS = [128, 256, 384, 512, 768, 1024]
FLEET_IN, FLEET_OUT = 64, 16


def fleet_names(size):
    return [f"fleet_{i:02d}" for i in range(size)]


def fleet_width(name):
    i = int(name.rsplit("_", 1)[1])
    return FLEET_WIDTHS[(i + i // len(FLEET_WIDTHS)) % len(FLEET_WIDTHS)]


# --------------------------------------------------------------------------
# config.pbtxt

def config_text(name, spec, count, parameters):
    """config.pbtxt of model `name` (a MODELS entry) with `count` CPU instances."""
    dims = ", ".join(str(d) for d in spec["dims"])
    out = ", ".join(str(d) for d in spec["out"])
    lines = [f'name: "{name}"', 'backend: "python"',
             f"max_batch_size: {spec.get('max_batch_size', 0)}",
             f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]',
             f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {out} ] }} ]',
             f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]"]
    if spec.get("dynamic_batching"):
        lines.append("dynamic_batching { }")
    if spec.get("decoupled"):
        lines.append("model_transaction_policy { decoupled: true }")
    for key, value in parameters.items():
        lines.append(f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}')
    return "\n".join(lines) + "\n"


def write_model(repository, name, source, config, weights=()):
    """repository/name/{config.pbtxt, 1/model.py} and the weight files hard-linked into 1/."""
    version = os.path.join(repository, name, "1")
    os.makedirs(version)
    with open(os.path.join(repository, name, "config.pbtxt"), "w") as f:
        f.write(config)
    shutil.copyfile(os.path.join(SOURCES, source), os.path.join(version, "model.py"))
    for path in weights:
        os.link(path, os.path.join(version, os.path.basename(path)))


# --------------------------------------------------------------------------
# Preparation (imports torch: runs as a child process)

def import_source(name):
    """A model_py/ file as a module, with a stand-in triton_python_backend_utils (its
    functions only are used here, to compute reference answers with the model's code)."""
    sys.modules.setdefault("triton_python_backend_utils",
                           types.ModuleType("triton_python_backend_utils"))
    sys.path.insert(0, SOURCES)
    try:
        return __import__(name)
    finally:
        sys.path.remove(SOURCES)


def calibrate_pyloop():
    """ITERATIONS for about PYLOOP_TARGET_S of pyloop's walk in this Python."""
    walk = import_source("pyloop").walk
    iterations, elapsed = 1000, 0.0
    while elapsed < 0.05:
        iterations *= 2
        began = time.perf_counter()
        walk(27, iterations)
        elapsed = time.perf_counter() - began
    best = min(_timed(walk, iterations) for _ in range(5))
    return max(100, int(iterations * PYLOOP_TARGET_S / best))


def _timed(walk, iterations):
    began = time.perf_counter()
    walk(27, iterations)
    return time.perf_counter() - began


def write_weights(work):
    """mlp.pt and resnet18.pt under WORK/weights (fixed seeds); {file: path}, the nets."""
    import torch
    import torchvision
    folder = os.path.join(work, "weights")
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    params = MODELS["mlp"]["parameters"]
    mlp = import_source("mlp").build(params["WIDTH"], params["LAYERS"]).eval()
    torch.manual_seed(1)
    resnet = torchvision.models.resnet18().eval()
    paths = {}
    for name, net in (("mlp", mlp), ("resnet18", resnet)):
        paths[name] = os.path.join(folder, f"{name}.pt")
        torch.save(net.state_dict(), paths[name])
    return paths, {"mlp": mlp, "resnet18": resnet}


def write_checks(work, nets, iterations):
    """A request per model and the answer it must get, as .npy files."""
    import numpy as np
    import torch
    folder = os.path.join(work, "checks")
    os.makedirs(folder)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 4)).astype(np.float32)
    image = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    with torch.inference_mode():
        mlp = nets["mlp"](torch.from_numpy(x)).numpy()
        logits = nets["resnet18"](torch.from_numpy(image)).numpy()
    seed = 27 + int(abs(float(x.flat[0])) * 1000) % 1000
    total = import_source("pyloop").walk(seed, iterations)
    responses = MODELS["decoupled"]["parameters"]["RESPONSES"]
    checks = {"identity": (x, x), "pyloop": (x, x + np.float32(total % 1000)),
              "mlp": (x, mlp), "resnet18": (image, logits), "bls": (x, mlp),
              "decoupled": (x, np.stack([x + np.float32(i) for i in range(responses)]))}
    for name, (request, answer) in checks.items():
        np.save(os.path.join(folder, f"{name}.in.npy"), request)
        answer.astype(np.float32).tofile(os.path.join(folder, f"{name}.expected.bin"))


def write_repositories(work, instance_counts, weights, iterations):
    cores = os.cpu_count() or 1
    for count in instance_counts:
        repository = os.path.join(work, f"repository-n{count}")
        for name, spec in MODELS.items():
            parameters = dict(spec.get("parameters", {}))
            if spec.get("threads"):
                parameters["INTRA_OP_THREADS"] = max(1, cores // count)
            if name == "pyloop":
                parameters["ITERATIONS"] = iterations
            files = [weights[name]] if name in weights else []
            write_model(repository, name, f"{name}.py",
                        config_text(name, spec, count, parameters), files)


def write_fleet(work, sizes, instance_counts):
    """The density fleet: weights and request files for max(sizes) models, and a
    repository per size and instance count; returns the fleet's specs (load.py's form)."""
    import numpy as np
    import torch
    build = import_source("fleet_mlp").build
    folder = os.path.join(work, "fleet")
    os.makedirs(folder)
    specs = {}
    spec = {"dims": [1, FLEET_IN], "out": [1, FLEET_OUT]}
    for i, name in enumerate(fleet_names(max(sizes))):
        torch.manual_seed(100 + i)
        width = fleet_width(name)
        net = build(width).eval()
        # Named weights.pt as every fleet model's model.py reads it.
        weights = os.path.join(folder, name, "weights.pt")
        os.makedirs(os.path.dirname(weights))
        torch.save(net.state_dict(), weights)
        x = torch.randn(1, FLEET_IN, generator=torch.Generator().manual_seed(200 + i))
        with torch.inference_mode():
            y = net(x)
        input_bin = os.path.join(folder, f"{name}.bin")
        expected_bin = os.path.join(folder, f"{name}.expected.bin")
        x.numpy().astype(np.float32).tofile(input_bin)
        y.numpy().astype(np.float32).tofile(expected_bin)
        specs[name] = {"input": {"name": "INPUT0", "shape": [1, FLEET_IN], "dtype": "float32"},
                       "output": {"name": "OUTPUT0"}, "input_bin": input_bin,
                       "expected_bin": expected_bin, "width": width,
                       "weights_mib": round(sum(p.numel() * 4 for p in net.parameters())
                                            / 2**20, 3)}
        for size in (s for s in sizes if i < s):
            for count in instance_counts:
                write_model(os.path.join(work, f"fleet-{size}-n{count}"), name, "fleet_mlp.py",
                            config_text(name, spec, count, {"WIDTH": width,
                                                            "INTRA_OP_THREADS": 1}), [weights])
    return specs


def prepare(work, instance_counts, sizes, fleet_instance_counts):
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    iterations = calibrate_pyloop()
    weights, nets = write_weights(work)
    write_checks(work, nets, iterations)
    write_repositories(work, instance_counts, weights, iterations)
    fleet = write_fleet(work, sizes, fleet_instance_counts) if sizes else {}
    prepared = {"torch": torch.__version__, "pyloop_iterations": iterations,
                "weights_mib": {name: round(os.path.getsize(path) / 2**20, 2)
                                for name, path in weights.items()},
                "fleet": fleet}
    with open(os.path.join(work, "prepared.json"), "w") as f:
        json.dump(prepared, f, indent=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("work")
    parser.add_argument("--instances", default="1,2")
    parser.add_argument("--fleet", default="20,50")
    parser.add_argument("--fleet-instances", default="1,2")
    args = parser.parse_args()
    counts = sorted({int(n) for n in args.instances.split(",")})
    sizes = sorted({int(m) for m in args.fleet.split(",") if m})
    fleet_counts = sorted({int(n) for n in args.fleet_instances.split(",")})
    prepare(args.work, counts, sizes, fleet_counts)


if __name__ == "__main__":
    main()
