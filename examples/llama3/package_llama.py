"""Packages the Llama 3 model for chorus: code, corpus and an initial model.

    python3 package_llama.py OUT.pt [--config debug] [--overrides '{"dim": 128}']

The archive holds model.py, parallelize.py and data.py (interned), the corpus
(resource corpus/corpus.txt), and the initial model as the servable entry
point. A training job names the pieces it uses:
  model_factory "model:build", parallelize "parallelize:parallelize_for_job",
  data_loader "data:batches".
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import data  # noqa: E402
import model as llama  # noqa: E402
from chorus.package import create_package  # noqa: E402


def package(output: str, config: str = "debug", overrides: dict = None, seed: int = 0,
            build=llama.build) -> dict:
    """Packages `build(config, seed=seed, **overrides)` (model.py's build, or a wrapper of it)."""
    overrides = dict(overrides or {})
    overrides.setdefault("vocab_size", data.VOCAB_SIZE)
    model = build(config, seed=seed, **overrides)
    example = data.encode("chorus trains and serves")[None, :]
    corpus = open(os.path.join(HERE, "corpus.txt"), encoding="utf-8").read()
    return create_package(
        output, model, (example,), name="llama3", batchable=True, max_batch_size=16,
        output_names=["logits"], dynamic_axes={"tokens": [1], "logits": [1]},
        resources={("corpus", "corpus.txt"): corpus}, modules=["parallelize", "data"],
        progress=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output")
    parser.add_argument("--config", default="debug", choices=sorted(llama.CONFIGS))
    parser.add_argument("--overrides", default="{}", help="JSON of ModelArgs fields")
    args = parser.parse_args()
    manifest = package(args.output, args.config, json.loads(args.overrides))
    print(f"wrote {args.output}: {manifest['model']['name']}, "
          f"{len(manifest['files'])} records")


if __name__ == "__main__":
    main()
