"""Tokens/s and MFU of the Llama 3 example at its ~1B config on one GPU, bf16.

    python3 tests/gpu/llama_1b_mfu.py [--steps 20] [--batch 4] [--seq-len 2048]
                                       [--out gpu-train.json]

For a lent GPU machine (the device tool), from the repository root; finishes
in a few minutes. It trains the example's model.py directly with the same step
chorus' trainer runs for one rank (autocast bf16 compute, fp32 master weights,
AdamW), so the figure is the model's and the device's, with no chorus build
needed on that machine. MFU uses torchtitan's FLOPs per token,
6 (N - N_embedding) + 12 L H head_dim seq_len, over the GPU's dense bf16 peak.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "llama3"))
import model as llama  # noqa: E402

# Dense bf16 tensor-core peaks (no sparsity), FLOP/s, from the vendors' datasheets.
BF16_PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}


def device_peak(name: str) -> float:
    for key, peak in BF16_PEAKS.items():
        if key in name:
            return peak
    raise SystemExit(f"no bf16 peak known for {name!r}; add it to BF16_PEAKS")


def flops_per_token(model, seq_len: int) -> float:
    args = model.args
    head_dim = args.dim // args.n_heads
    return (6.0 * llama.count_params(model, exclude_embedding=True) +
            12.0 * args.n_layers * args.n_heads * head_dim * seq_len)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="1B")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default="gpu-train.json")
    args = parser.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    # Initialized on the CPU (the example's init draws from a CPU generator), then moved.
    model = llama.build(args.config, seed=0, max_seq_len=args.seq_len).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, **({"fused": True} if cuda else {}))
    vocab = model.args.vocab_size
    generator = torch.Generator(device=device).manual_seed(0)
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)

    def step():
        tokens = torch.randint(0, vocab, (args.batch, args.seq_len + 1), device=device,
                               generator=generator)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    synchronize()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    tokens_per_s = args.batch * args.seq_len / seconds
    # A CPU run only checks the script (python3 ... --device cpu --config debug).
    mfu = (tokens_per_s * flops_per_token(model, args.seq_len) / device_peak(name) * 100
           if cuda else None)
    result = {"device": name, "config": args.config,
              "params": llama.count_params(model), "batch": args.batch,
              "seq_len": args.seq_len, "step_s": seconds, "tokens_per_s": tokens_per_s,
              "mfu_pct": mfu,
              "memory_gib": torch.cuda.max_memory_allocated() / (1 << 30) if cuda else None,
              "last_loss": float(loss)}
    print(json.dumps(result, indent=2))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
