"""The training data: a small text corpus, a byte-level tokenizer, a data loader.

Packaged into the archive with the model (package_llama.py); the corpus is an
archive resource, read through the archive's own importer.
"""

import torch

VOCAB_SIZE = 256  # one token per byte


def encode(text: str) -> torch.Tensor:
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(tokens) -> str:
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def corpus_tokens() -> torch.Tensor:
    """The packaged corpus, as byte tokens (read from the archive that holds this module)."""
    global _CORPUS
    if _CORPUS is None:
        import torch_package_importer  # the PackageImporter that loaded this module
        _CORPUS = encode(torch_package_importer.load_text("corpus", "corpus.txt"))
    return _CORPUS


_CORPUS = None


def batches(step: int, global_batch: int, seq_len: int, seed: int) -> torch.Tensor:
    """Step `step`'s batch: [global_batch, seq_len + 1] windows of the corpus.

    A function of (step, seed) alone, so a resumed job sees the batches the
    uninterrupted one would have.
    """
    corpus = corpus_tokens()
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(corpus) - seq_len - 1, (global_batch,), generator=generator)
    return torch.stack([corpus[s:s + seq_len + 1] for s in starts.tolist()])
