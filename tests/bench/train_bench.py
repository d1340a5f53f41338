"""make bench-train: training through chorus' service, FSDP on 2 ranks vs one rank.

Llama 3 debug model (dim 256, 6 layers, 16 heads, vocab 256 for the byte
corpus), global batch 8 x 64 tokens, fp32, AdamW, on a real chorus-server with
2 interpreters. Per layout: 20 steps from the packaged corpus; tokens/s,
step time and MFU are medians of steps 2-20 (MFU against the CPU's measured
fp32 matmul peak, all cores); loss_ratio_20_vs_1; resume_bit_exact is 1 when
10 steps + save + load (new job) + 10 steps give the same 20 losses and the
same model outputs as 20 straight steps.

multi_host: the same job (same global batch) on 2 chorus servers x 2
interpreters, driven through the first (FSDP across all 4 ranks, and HSDP:
shard in a server, replicate across), against that first server alone
(fsdp2). tokens_per_s_vs_one_host is the FSDP job's median tokens/s over
fsdp2's; cross_host_mib_per_step the MiB each server sends the other per step
(FSDP). On one 2-core machine the second server adds no cores: the ratio
measures the cost of spanning servers (Gloo over loopback, 4 ranks sharing 2
cores), not a speed-up.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples", "llama3"))

import package_llama  # noqa: E402
from chorus.client.training import TrainingClient  # noqa: E402


def start_server(bin_dir, scratch):
    """A chorus-server with 2 interpreters on loopback: (process, address)."""
    server = subprocess.Popen([os.path.join(bin_dir, "chorus-server"), "--model-repository",
                               os.path.join(scratch, "models"), "--host", "127.0.0.1",
                               "--port", "0", "--metrics-port", "-1", "--http-port", "-1",
                               "--interpreters", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return server, "127.0.0.1:" + re.search(r"port (\d+)", server.stdout.readline()).group(1)


def multi_host(client, spec, hosts, steps):
    """The job on every server of `hosts` (2 interpreters each), per layout."""
    figures = {}
    for layout in ("fsdp", "hsdp"):
        job = client.create_job(**spec(2), hosts=hosts, layout=layout)
        metrics = client.step(job, steps, timeout=3600)[1:]
        client.delete(job)
        figures[layout] = {
            "tokens_per_s": statistics.median(m.tokens_per_second for m in metrics),
            "step_s": statistics.median(m.step_seconds for m in metrics),
            "cross_host_mib_per_step": statistics.median(
                m.cross_host_bytes_per_host for m in metrics) / 2**20,
            "losses": [m.loss for m in metrics],
        }
        print(f"2 servers x 2, {layout}: {figures[layout]['tokens_per_s']:8.1f} tok/s  "
              f"step {figures[layout]['step_s']:.3f} s  "
              f"{figures[layout]['cross_host_mib_per_step']:.1f} MiB/step across")
    return figures


def job_spec(archive, dp):
    """The benchmark's job: the Llama 3 debug model on `dp` ranks."""
    return dict(name="bench", archive=archive, model_factory="model:build",
                model_config_json=json.dumps({"name": "debug", "vocab_size": 256}),
                parallelize="parallelize:parallelize_for_job", data_loader="data:batches",
                global_batch=8, seq_len=64, seed=0, dp_shard=dp,
                optimizer={"lr": 2e-3, "weight_decay": 0.0})


def train_and_resume(client, spec, key, dp, steps, scratch):
    """`steps` straight steps of a job on `dp` ranks, and whether half of them, a
    checkpoint, a new job loading it and the other half give the same losses and
    outputs; the figures (printed too)."""
    probe = (np.arange(64, dtype=np.int64) * 7 % 256).reshape(1, 64)
    job = client.create_job(**spec(dp))
    straight = client.step(job, steps, timeout=3600)
    straight_out = client.evaluate(job, probe)
    client.delete(job)
    job = client.create_job(**spec(dp))
    first = client.step(job, steps // 2, timeout=3600)
    client.save(job, os.path.join(scratch, f"ckpt-{key}"))
    client.delete(job)
    job = client.create_job(**spec(dp))
    client.load(job, os.path.join(scratch, f"ckpt-{key}"))
    second = client.step(job, steps - steps // 2, timeout=3600)
    resumed_out = client.evaluate(job, probe)
    client.delete(job)
    losses = [m.loss for m in straight]
    exact = ([m.loss for m in first + second] == losses and
             np.array_equal(straight_out, resumed_out))
    tail = straight[1:]
    figures = {
        "tokens_per_s": statistics.median(m.tokens_per_second for m in tail),
        "mfu_pct": statistics.median(m.mfu_pct for m in tail),
        "step_s": statistics.median(m.step_seconds for m in tail),
        "loss_ratio_20_vs_1": losses[-1] / losses[0],
        "resume_bit_exact": 1 if exact else 0,
        "losses": losses,
    }
    print(f"{key:9s} {figures['tokens_per_s']:8.1f} tok/s  "
          f"step {figures['step_s']:.3f} s  MFU {figures['mfu_pct']:.2f}%  "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}  resume exact: {exact}")
    return figures


def summarize(result):
    """The report: fsdp2's figures, one_rank's, and multi_host against fsdp2."""
    report = dict(result["fsdp2"])
    report["one_rank"] = result["one_rank"]
    report["fsdp2_tokens_per_s_over_one_rank"] = (result["fsdp2"]["tokens_per_s"] /
                                                  result["one_rank"]["tokens_per_s"])
    layouts = result["multi_host"]
    report["multi_host"] = {
        "hosts": 2, "interpreters_per_host": 2, "network": "loopback",
        "tokens_per_s_vs_one_host": layouts["fsdp"]["tokens_per_s"] /
        result["fsdp2"]["tokens_per_s"],
        "cross_host_mib_per_step": layouts["fsdp"]["cross_host_mib_per_step"],
        "by_layout": {layout: dict(figures, tokens_per_s_vs_one_host=figures["tokens_per_s"] /
                                   result["fsdp2"]["tokens_per_s"])
                      for layout, figures in layouts.items()},
    }
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="build/bench/train.json")
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="chorus-bench-train-")
    archive = os.path.join(scratch, "llama3.pt")
    package_llama.package(archive, "debug", {})
    os.makedirs(os.path.join(scratch, "models"))
    server, address = start_server(args.bin, scratch)

    def spec(dp):
        return job_spec(archive, dp)

    result = {}
    try:
        with TrainingClient(address) as client:
            for key, dp in (("fsdp2", 2), ("one_rank", 1)):
                result[key] = train_and_resume(client, spec, key, dp, args.steps, scratch)
            other, other_address = start_server(args.bin, scratch)
            try:
                result["multi_host"] = multi_host(client, spec, [address, other_address],
                                                  args.steps)
            finally:
                other.terminate()
                other.wait()
    finally:
        server.terminate()
        server.wait()
    report = summarize(result)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(report, out, indent=2)
    print(f"wrote {args.out}")

if __name__ == "__main__":
    main()
