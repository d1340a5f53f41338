"""chorus serving on a GPU: correctness, weight sharing, footprint and throughput.

    python tests/gpu/serve_gpu.py --bin-dir DIR --device cuda:0 --interpreters 4
                                  --out FILE.json [--quick] [--work DIR]

For a lent GPU machine (the device tool), from the repository root, with chorus' Python
package (and grpcio, protobuf) on PYTHONPATH; about 3 minutes on one H200. `--device cpu
--quick` rehearses every step on a host without a GPU (smaller images and weights, shorter
windows; the GPU-only ratios are then null and the CPU figures stand in their details).
Every model is packaged here with create_package (fixed seeds, random weights, eval mode,
nothing downloaded) and served by chorus-server (`--no-supervisor`, so that the serving
process is the one started) from `--interpreters` interpreters, on `--device` (config.json's
"device"). The steps, each recorded under its key, or as {"error": ...} while the others go on:

  resnet18_max_abs_diff     ResNet-18 (torchvision's, else tests/gpu/gpu_models.py's, the
  llama_debug_max_abs_diff  same weights) and Llama 3 "debug" logits: concurrent requests
                            (so that several interpreters answer) against the same model run
                            on the CPU in this process; fp32 throughout (TF32 off).
  generation_matches_cpu    the debug Llama served with {"device", "generation"} (KV cache
                            on the device): greedy completions of concurrent prompts over
                            HTTP /generate equal full recomputation on the CPU here.
  gpu_throughput_vs_threads ResNet-18, batch 8, fp32: chorus with N interpreters over one
                            Python interpreter with N threads calling the same model (the
                            archive loaded with stock torch.package, inputs moved to the
                            device and outputs back, as chorus does): equal time windows
                            after a warm-up, interleaved rounds, medians. `method` says
                            which chorus path gives the ratio: bench_suite_runner (N
                            threads calling chorus::Model in-process, as the CPU benchmark
                            suite does) when the bin dir has it, else chorus-server over
                            gRPC with N client threads; the server's rate is reported
                            either way.
  gpu_weight_copies         device memory the serving process gains when a big MLP
                            (1 GiB fp32; 16 MiB with --quick) is loaded into a server already
                            holding a tiny model on the device (so its CUDA context is
                            there before), over the weights' size: 1.0 means one copy for
                            all interpreters.
  gpu_footprint_vs_processes  that server's device memory once 8N concurrent unbatched
                            requests have run on its interpreters, over N plain Python
                            processes that each load the same MLP to the device and run it
                            once (their memory summed, read while all are alive).
Device memory is nvidia-smi's per process (--query-compute-apps); where the process is not
listed (another PID namespace), the device's memory.used over its idle value. On the CPU
the same arithmetic runs on the processes' PSS (/proc/PID/smaps_rollup).

Writes one JSON object to --out (also when steps fail) and exits 1 if any step failed.
"""

import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
for folder in (HERE, os.path.join(ROOT, "tests", "bench", "suite"),
               os.path.join(ROOT, "server", "tests"), os.path.join(ROOT, "examples", "llama3")):
    sys.path.insert(0, folder)

import gpu_models  # noqa: E402
import python_runner  # noqa: E402  (loads an archive with stock torch.package)
# The server plumbing and the throughput and memory steps: gpu_measure.py.
from gpu_measure import (Server, Throughput, add_model, concurrent_infer,  # noqa: E402
                         footprint, gpu_index, on_gpu, timed_window, weight_copies)

PROMPTS = ["chorus", "trains and serves Llama 3", "a", "the quick brown fox jumps over",
           "In the beginning", "0123456789"]


@dataclass
class Sizes:
    image: int          # ResNet-18 input side
    mlp_width: int      # the big MLP: depth layers of width x width
    mlp_depth: int
    warmup_s: float     # throughput windows
    measure_s: float
    rounds: int
    gen_tokens: int


FULL = Sizes(image=224, mlp_width=8192, mlp_depth=4, warmup_s=2, measure_s=5, rounds=2,
             gen_tokens=16)
QUICK = Sizes(image=64, mlp_width=1024, mlp_depth=4, warmup_s=0.5, measure_s=1.5, rounds=1,
              gen_tokens=8)


class Report:
    """The JSON object: results by key, a failing step's error under its key."""

    def __init__(self):
        self.results = {"step_seconds": {}}
        self.failed = []

    def attempt(self, key, function, *args, label=None):
        """Runs a step; its dict of results (if any) is merged in. Returns that dict ({} for
        none), or None if the step failed (recorded under `key`). Its time is recorded under
        `label` (default: `key`)."""
        start = time.monotonic()
        try:
            values = function(*args)
        except Exception as error:  # every step's failure is recorded
            self.fail(key, error)
            return None
        finally:
            self.results["step_seconds"][label or key] = round(time.monotonic() - start, 1)
        self.results.update(values or {})
        return values or {}

    def fail(self, key, error):
        traceback.print_exception(error)
        self.results[key] = {"error": f"{type(error).__name__}: {error}"}
        self.failed.append(key)


# ---------------------------------------------------------------- correctness


def max_abs_diff(server, model_name, model, arrays):
    """Largest |served - CPU reference| over concurrent requests, and the reference's scale."""
    served = concurrent_infer(server, model_name, arrays)
    with torch.no_grad():
        expected = [model(torch.from_numpy(a)).numpy() for a in arrays]
    diff = max(float(np.abs(s - e).max()) for s, e in zip(served, expected))
    return diff, max(float(np.abs(e).max()) for e in expected)


class Resnet18:
    key = "resnet18_max_abs_diff"
    name = "resnet18"

    def package(self, repository, args, sizes):
        self.model, self.source = gpu_models.resnet18()
        self.example = torch.randn(8, 3, sizes.image, sizes.image,
                                   generator=torch.Generator().manual_seed(1))
        # Batch 8 is the throughput batch: requests of 8 are never merged into bigger ones.
        # The manifest names the device too, for bench_suite_runner (which reads no config).
        self.archive = add_model(repository, "resnet18", self.model, (self.example,),
                                 {"device": args.device}, max_batch_size=8, device=args.device)
        self.image = sizes.image

    def check(self, server):
        rng = np.random.default_rng(2)
        arrays = [rng.standard_normal((2, 3, self.image, self.image)).astype(np.float32)
                  for _ in range(6)]
        diff, scale = max_abs_diff(server, "resnet18", self.model, arrays)
        return {self.key: diff, "resnet18": {"source": self.source, "requests": len(arrays),
                                             "input_shape": list(arrays[0].shape),
                                             "max_abs_output": scale}}


class LlamaLogits:
    key = "llama_debug_max_abs_diff"
    name = "llama_debug"

    def package(self, repository, args, sizes):
        import model as llama  # examples/llama3
        self.model = llama.build("debug", seed=0).eval()
        self.vocab = self.model.args.vocab_size
        example = torch.randint(0, self.vocab, (2, 32), generator=torch.Generator().manual_seed(1))
        add_model(repository, "llama_debug", self.model, (example,), {"device": args.device},
                  max_batch_size=8)

    def check(self, server):
        rng = np.random.default_rng(3)
        arrays = [rng.integers(0, self.vocab, (1, 32), dtype=np.int64) for _ in range(8)]
        diff, scale = max_abs_diff(server, "llama_debug", self.model, arrays)
        return {self.key: diff, "llama_debug": {"requests": len(arrays), "input_shape": [1, 32],
                                                "max_abs_output": scale}}


class Generation:
    key = "generation_matches_cpu"
    name = "llm"

    def package(self, repository, args, sizes):
        import llm_models  # server/tests: the debug generator test_generate.py serves
        self.llm = llm_models
        self.generator = llm_models.debug_generator()
        self.tokens = sizes.gen_tokens
        add_model(repository, "llm", self.generator, (["chorus"],),
                  {"device": args.device, "generation": {"cache_blocks": 64}},
                  batchable=False, input_names=["text_input"], output_names=["text_output"])

    def check(self, server):
        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
            served = list(pool.map(lambda p: server.generate("llm", p, self.tokens), PROMPTS))
        expected = [self.llm.recompute_greedy(self.generator, p, self.tokens) for p in PROMPTS]
        encode = self.generator.tokenizer.encode
        return {self.key: served == expected, "generation": {
            "prompts": len(PROMPTS), "max_tokens": self.tokens,
            "served_token_counts": [len(encode(text)) for text in served],
            "reference_token_counts": [len(encode(text)) for text in expected],
            "mismatches": [{"prompt": p, "served": s, "expected": e}
                           for p, s, e in zip(PROMPTS, served, expected) if s != e]}}


# ---------------------------------------------------------------- the run


def check_model(step, server):
    server.wait_ready([step.name])
    return step.check(server)


def throughput(args, sizes, resnet, work, server):
    if resnet is None:
        raise RuntimeError("resnet18 was not packaged")
    return Throughput(args, sizes, resnet, work).check(server)


def serve_main_models(report, args, sizes, work):
    """The correctness steps, then throughput, on one server holding their models."""
    repository = os.path.join(work, "repository")
    os.makedirs(repository)
    steps = [step for step in (Resnet18(), LlamaLogits(), Generation())
             if report.attempt(step.key, step.package, repository, args, sizes,
                               label=f"package {step.name}") is not None]
    resnet = next((step for step in steps if isinstance(step, Resnet18)), None)
    keys = [step.key for step in steps] + ["gpu_throughput_vs_threads"]
    try:
        server = Server(args.bin_dir, repository, args.interpreters,
                        os.path.join(work, "server.log"))
    except Exception as error:  # every step that needed it fails with it
        for key in keys:
            report.fail(key, error)
        return
    try:
        for step in steps:
            report.attempt(step.key, check_model, step, server)
        report.attempt("gpu_throughput_vs_threads", throughput, args, sizes, resnet, work,
                       server)
    finally:
        server.stop()


def nvidia_smi_gpu(index):
    """(name, driver version) of GPU `index`, or (None, None) without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader", "-i", index], capture_output=True,
                             text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    name, driver = (field.strip() for field in out.strip().split(","))
    return name, driver


def environment(args):
    """What ran: versions and the device (read with nvidia-smi: this process never opens
    a CUDA context, which would count in the device's memory)."""
    name, driver = platform.processor() or platform.machine(), None
    if on_gpu(args.device):
        name, driver = nvidia_smi_gpu(gpu_index(args.device))
    return {"torch_version": torch.__version__, "cuda_version": torch.version.cuda,
            "device": args.device, "device_name": name, "driver_version": driver,
            "interpreters": args.interpreters, "python_version": platform.python_version(),
            "quick": args.quick, "bin_dir": args.bin_dir}


def run(args):
    sizes = QUICK if args.quick else FULL
    report = Report()
    started = time.monotonic()
    if args.work:
        os.makedirs(args.work, exist_ok=True)
    work = tempfile.mkdtemp(prefix="serve_gpu-", dir=args.work)
    try:
        report.attempt("environment", environment, args)
        serve_main_models(report, args, sizes, work)
        memory = {}
        report.attempt("gpu_weight_copies", weight_copies, args, sizes, work, memory)
        report.attempt("gpu_footprint_vs_processes", footprint, args, memory)
    finally:
        report.results["failed_steps"] = report.failed
        report.results["elapsed_s"] = round(time.monotonic() - started, 1)
        with open(args.out, "w") as out:
            json.dump(report.results, out, indent=2)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report.results, indent=2))
    return 1 if report.failed else 0


# ---------------------------------------------------------------- plain-Python workers


def load_quietly(archive):
    """The archive's model and example inputs, by stock torch.package (whose unpickler
    warns that TypedStorage is deprecated)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return python_runner.load(archive)


def worker_threads(args):
    """The GIL-bound alternative: one interpreter, N threads calling the model."""
    model, inputs = load_quietly(args.archive)
    device = torch.device(args.device)
    model.to(device)
    batch = inputs[0]

    def call():
        with torch.inference_mode():
            model(batch.to(device)).cpu()

    rate = timed_window([call] * args.interpreters, args.warmup_s, args.measure_s)
    print(json.dumps({"batches_per_s": rate}))


def worker_hold(args):
    """One plain process holding the model on the device after one forward, until stdin
    closes."""
    model, inputs = load_quietly(args.archive)
    device = torch.device(args.device)
    model.to(device)
    with torch.inference_mode():
        model(*(x.to(device) for x in inputs)).cpu()
    print("ready", flush=True)
    sys.stdin.read()


WORKERS = {"threads": worker_threads, "hold": worker_hold}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", default=os.environ.get("CHORUS_BIN_DIR"),
                        help="chorus' binaries (default: $CHORUS_BIN_DIR)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--interpreters", type=int, default=4)
    parser.add_argument("--out", default="serve-gpu.json")
    parser.add_argument("--quick", action="store_true", help="small sizes, short windows")
    parser.add_argument("--work", help="keep the archives and server logs under this folder")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--archive", help=argparse.SUPPRESS)
    parser.add_argument("--warmup-s", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--measure-s", type=float, default=3.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is None and not args.bin_dir:
        parser.error("--bin-dir (or $CHORUS_BIN_DIR) is required")
    return args


def main():
    args = parse_args()
    if args.worker:
        return WORKERS[args.worker](args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
