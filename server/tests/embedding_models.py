"""Tiny random-weight Hugging Face checkpoints made here by transformers (nothing
downloaded) for the embedding tests: a BERT encoder in sentence-transformers' layout
(mean or CLS pooling, normalized or not) and a Qwen2 decoder; and the reference
embeddings transformers computes for them, one text at a time."""

import json
import os

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CORPUS = os.path.join(ROOT, "examples", "llama3", "corpus.txt")


def write_tokenizer(directory, specials):
    """A BPE tokenizer trained on the example corpus, saved as tokenizer.json; the
    first special token pads."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(open(CORPUS, encoding="utf-8").read().splitlines(), trainer)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"pad_token": specials[0]}))
    return tokenizer


def bert_checkpoint(directory, pooling="mean", normalize=True, seed=0):
    import transformers
    directory.mkdir(parents=True)
    tokenizer = write_tokenizer(directory, ["[PAD]", "[CLS]", "[SEP]"])
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=128,
                                     pad_token_id=0)
    transformers.BertModel(config).save_pretrained(str(directory))
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 32, "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False}))
    return directory


def qwen2_checkpoint(directory, seed=0):
    import transformers
    directory.mkdir(parents=True)
    tokenizer = write_tokenizer(directory, ["<|endoftext|>"])
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(vocab_size=tokenizer.get_vocab_size(), hidden_size=32,
                                      intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128)
    transformers.Qwen2ForCausalLM(config).save_pretrained(str(directory))
    return directory


def reference_embeddings(directory, texts, pooling, normalize):
    """transformers' AutoModel on each text alone (no padding), pooled as asked."""
    import tokenizers
    import transformers
    tokenizer = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    model = transformers.AutoModel.from_pretrained(str(directory)).eval()
    out = []
    with torch.inference_mode():
        for text in texts:
            ids = torch.tensor([tokenizer.encode(text).ids])
            hidden = model(input_ids=ids).last_hidden_state[0].float()
            vector = {"mean": hidden.mean(0), "cls": hidden[0], "last": hidden[-1]}[pooling]
            out.append(torch.nn.functional.normalize(vector, dim=-1) if normalize else vector)
    return torch.stack(out)
