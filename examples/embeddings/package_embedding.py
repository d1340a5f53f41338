"""Packages a Hugging Face checkpoint as a text embedding model for chorus-server
(OpenAI's POST /v1/embeddings, or Triton's infer with a BYTES input `text`):

    python3 package_embedding.py CHECKPOINT_DIR REPOSITORY/NAME/1/model.pt \
        [--pooling mean|cls|last] [--normalize | --no-normalize] [--max-length N]

CHECKPOINT_DIR holds config.json, the weights (model.safetensors) and tokenizer.json,
with tokenizer_config.json for the padding token. Pooling and normalization follow its
sentence-transformers config (modules.json, 1_Pooling/config.json, a Normalize module)
when it has one; otherwise a decoder (a *ForCausalLM checkpoint) pools its last token, an
encoder the mean of its tokens, and both are normalized to unit length (as vLLM does).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from chorus.package import (PackagingError, PackagingRules, create_package,  # noqa: E402
                            installed_modules)
from embedder import TextEmbedder, pad_id  # noqa: E402

ST_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
              "pooling_mode_lasttoken": "last"}


def _read_json(checkpoint: str, name: str, required: bool = True) -> dict:
    path = os.path.join(checkpoint, name)
    if not os.path.exists(path):
        if required:
            raise PackagingError(f"{checkpoint} has no {name}")
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def sentence_transformers_settings(checkpoint: str):
    """(pooling, normalize) from a sentence-transformers layout, or (None, None)."""
    modules = _read_json(checkpoint, "modules.json", required=False)
    if not modules:
        return None, None
    pooling, normalize = None, False
    for module in modules:
        kind = module.get("type", "")
        if kind.endswith("Pooling"):
            config = _read_json(os.path.join(checkpoint, module["path"]), "config.json")
            modes = [ST_POOLING[k] for k, v in config.items() if v and k in ST_POOLING]
            unsupported = [k for k, v in config.items()
                           if v is True and k.startswith("pooling_mode") and k not in ST_POOLING]
            if unsupported or len(modes) != 1:
                raise PackagingError(f"{module['path']}/config.json: pooling "
                                     f"{unsupported or modes} is not supported "
                                     "(one of mean, CLS, last token)")
            pooling = modes[0]
        elif kind.endswith("Normalize"):
            normalize = True
    return pooling, normalize


# Position ids of these start past the padding id (transformers' RoBERTa embeddings).
OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert", "longformer"}


def longest_input(checkpoint: str, config: dict) -> int:
    """Tokens an input is truncated to: sentence-transformers' max_seq_length, else the
    tokenizer's model_max_length, else the positions the model has."""
    st = _read_json(checkpoint, "sentence_bert_config.json", required=False)
    if isinstance(st.get("max_seq_length"), int):
        return st["max_seq_length"]
    tokenizer = _read_json(checkpoint, "tokenizer_config.json", required=False)
    if isinstance(tokenizer.get("model_max_length"), int) and \
            tokenizer["model_max_length"] < 1_000_000:
        return tokenizer["model_max_length"]
    positions = config.get("max_position_embeddings") or 512
    if config.get("model_type") in OFFSET_POSITIONS:
        positions -= (config.get("pad_token_id") or 0) + 1
    return positions


def load_model(checkpoint: str):
    import transformers
    config = _read_json(checkpoint, "config.json")
    try:
        return transformers.AutoModel.from_pretrained(checkpoint).eval(), config
    except (ValueError, KeyError) as error:
        raise PackagingError(
            f"transformers cannot build model_type {config.get('model_type')!r} "
            f"(architectures {config.get('architectures')}) as a base model: {error}") from None


def package(checkpoint: str, output: str, name: str, pooling=None, normalize=None,
            max_length=None, max_batch_size: int = 32) -> dict:
    model, config = load_model(checkpoint)
    st_pooling, st_normalize = sentence_transformers_settings(checkpoint)
    decoder = any(a.endswith("ForCausalLM") for a in config.get("architectures") or [])
    pooling = pooling or st_pooling or ("last" if decoder else "mean")
    normalize = normalize if normalize is not None else (
        st_normalize if st_pooling is not None else True)
    tokenizer_path = os.path.join(checkpoint, "tokenizer.json")
    if not os.path.exists(tokenizer_path):
        raise PackagingError(f"{checkpoint} has no tokenizer.json (a fast tokenizer's file)")
    with open(tokenizer_path, encoding="utf-8") as f:
        tokenizer_json = f.read()
    vocab = json.loads(tokenizer_json).get("model", {}).get("vocab", {})
    pad = pad_id(_read_json(checkpoint, "tokenizer_config.json", required=False),
                 vocab if isinstance(vocab, dict) else {})
    pad = pad if pad is not None else (config.get("pad_token_id") or 0)
    max_length = max_length or longest_input(checkpoint, config)
    embedder = TextEmbedder(model, tokenizer_json, pooling, normalize, max_length, pad)
    return create_package(output, embedder, (["chorus", "serves embeddings"],), name=name,
                          max_batch_size=max_batch_size, input_names=["text"],
                          output_names=["embedding", "prompt_tokens"],
                          rules=PackagingRules(extern=installed_modules()),
                          source=os.path.abspath(checkpoint), progress=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("output")
    parser.add_argument("--name", default=None, help="default: the output's model folder")
    parser.add_argument("--pooling", choices=["mean", "cls", "last"])
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--max-batch-size", type=int, default=32)
    args = parser.parse_args()
    name = args.name or os.path.basename(os.path.dirname(os.path.dirname(
        os.path.abspath(args.output))))
    try:
        manifest = package(args.checkpoint, args.output, name, args.pooling, args.normalize,
                           args.max_length, args.max_batch_size)
    except PackagingError as error:
        sys.exit(f"package_embedding: {error}")
    print(f"wrote {args.output}: {manifest['model']['name']}")


if __name__ == "__main__":
    main()
