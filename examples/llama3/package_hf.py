"""Packages a Llama 3 checkpoint in Hugging Face's layout for chorus-server to serve
(server-side generation: the OpenAI API, Triton's generate conventions).

    python3 package_hf.py CHECKPOINT_DIR REPOSITORY/llama3/1/model.pt [--max-seq-len 4096]

CHECKPOINT_DIR holds config.json, model.safetensors (or its shards) and tokenizer.json
(with tokenizer_config.json for the chat template, generation_config.json for EOS).
A chorus-trained model is written in that layout by hf_checkpoint.save_checkpoint.
The model's directory needs a config.json with a "generation" section (docs/server.md).
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import hf_checkpoint  # noqa: E402
from chorus.package import PackagingRules, create_package  # noqa: E402

# Imported where the archive runs, not packaged (compiled extensions).
EXTERN = ["tokenizers", "tokenizers.**", "jinja2", "jinja2.**", "markupsafe", "markupsafe.**"]


def package(checkpoint: str, output: str, name: str = "llama3",
            max_seq_len: int = None) -> dict:
    generator = hf_checkpoint.load_generator(checkpoint, max_seq_len)
    return create_package(
        output, generator, (["Hello"],), name=name, batchable=False,
        input_names=["text_input"], output_names=["text_output"],
        rules=PackagingRules(extern=EXTERN), source=os.path.abspath(checkpoint),
        progress=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("output")
    parser.add_argument("--name", default="llama3")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="the context to serve (default: the checkpoint's)")
    args = parser.parse_args()
    manifest = package(args.checkpoint, args.output, args.name, args.max_seq_len)
    print(f"wrote {args.output}: {manifest['model']['name']}, {len(manifest['files'])} records")


if __name__ == "__main__":
    main()
