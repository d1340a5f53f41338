"""The tiny Llama 3 the training tests and the chaos run train, and its job spec."""

import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples", "llama3"))

# A small Llama 3 (GQA) that trains in seconds on 2 cores.
TINY = {"name": "debug", "dim": 128, "n_layers": 2, "n_heads": 8, "n_kv_heads": 4,
        "vocab_size": 256, "multiple_of": 64}


def package_tiny_llama(path, build=None):
    """Packages the example's Llama 3 in the TINY shape at `path` (build: another factory)."""
    import package_llama
    kwargs = {} if build is None else {"build": build}
    package_llama.package(str(path), "debug", {k: v for k, v in TINY.items() if k != "name"},
                          **kwargs)
    return str(path)


def spec(archive, **overrides):
    """CreateJob's fields for the tiny Llama on its corpus; `overrides` replace any."""
    base = dict(name="tiny-llama", archive=archive, model_factory="model:build",
                model_config_json=json.dumps(TINY), parallelize="parallelize:parallelize_for_job",
                data_loader="data:batches", global_batch=8, seq_len=32, seed=3, dp_shard=1, tp=1,
                optimizer={"lr": 3e-3, "weight_decay": 0.0}, loss="cross_entropy")
    base.update(overrides)
    return base
