"""make bench-llm: serving the debug Llama 3 at concurrency 1, 8 and 32, side by side in
one run, three ways on the same weights:

  chorus        chorus-server's generation engines (paged KV cache, continuous
                batching), token streaming over ModelStreamInfer (tritonclient);
  naive         today's examples/llama3/train_and_serve.py loop: one ModelInfer per new
                token, the whole sequence each time (no KV cache), greedy;
  transformers  Hugging Face transformers' generate() with its KV cache, one call per
                request from as many threads as the concurrency (a plain Python
                server); and, for reference, one batched call for all the concurrent
                requests at once (static batching: left-padded, everyone waits for
                the batch).

Every request is greedy, max_tokens long (the byte tokenizer has no EOS); each client
sends `requests_per_client` requests one after another. Per cell: aggregate tokens/s,
p50 time to first token and p50 inter-token latency (per request, its mean gap).

Prefix caching: requests that share a 1,024-token prefix (a system prompt, a document)
and differ in their last 16 to 64 bytes, one after another, to two models of the same
weights, one with prefix caching on and one with it off ("prefix_caching": false); the
ratio of their p50 times to first token is `prefix_cache.ttft_speedup`, and their
answers must be identical.

Structured output: 32 requests, 16 at a time, whose answers are 48 tokens of JSON under
a schema (a 24-character id and a 4-digit code: every answer has the same length),
against the same requests unconstrained (max_tokens 48), greedy; the ratio of their
tokens/s is `structured.tokens_per_s_vs_unconstrained`. Then half and half in one batch:
the unconstrained requests' p50 inter-token latency there over theirs alone is
`structured.mixed_unconstrained_itl_ratio` (1: masks do not slow their neighbours).

Writes build/bench/llm.json with the ratios chorus over naive and over transformers.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples", "llama3"))

import data  # noqa: E402
import generate  # noqa: E402
import hf_checkpoint  # noqa: E402
import model as llama  # noqa: E402

GOALS = {"tokens_per_s_vs_naive": {"32": 10.0},
         "tokens_per_s_vs_transformers": {"1": 1.0, "32": 3.0}}
PREFIX_GOAL = {"ttft_speedup": 3.0}
PREFIX_TOKENS = 1024
STRUCTURED_GOAL = {"tokens_per_s_vs_unconstrained": 0.8}
# Compact JSON of exactly 48 bytes: {"id": "<24>", "code": NNNN}.
STRUCTURED_SCHEMA = {"type": "object",
                     "properties": {"id": {"type": "string", "pattern": "^[a-z0-9]{24}$"},
                                    "code": {"type": "integer", "minimum": 1000,
                                             "maximum": 9999}},
                     "required": ["id", "code"], "additionalProperties": False}
STRUCTURED_TOKENS = 48


def debug_transformer(max_seq_len):
    return llama.build("debug", seed=3, vocab_size=data.VOCAB_SIZE,
                       max_seq_len=max_seq_len).eval()


def prompts(count, seed=0):
    """Mixed-length prompts (16 to 64 bytes) cut from the example corpus."""
    corpus = open(os.path.join(ROOT, "examples", "llama3", "corpus.txt"),
                  encoding="utf-8").read().encode("ascii", "ignore").decode()
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        length = int(torch.randint(16, 65, (1,), generator=generator))
        start = int(torch.randint(0, len(corpus) - length, (1,), generator=generator))
        out.append(corpus[start:start + length])
    return out


def summarize(records, wall_s):
    """records: per request (start, [token times]); the cell's figures."""
    tokens = sum(len(times) for _, times in records)
    ttft = [times[0] - start for start, times in records if times]
    itl = [(times[-1] - times[0]) / (len(times) - 1) for _, times in records if len(times) > 1]
    return {"requests": len(records), "tokens": tokens, "wall_s": round(wall_s, 3),
            "tokens_per_s": round(tokens / wall_s, 2),
            "ttft_p50_ms": round(1e3 * statistics.median(ttft), 2),
            "itl_p50_ms": round(1e3 * statistics.median(itl), 3)}


def run_clients(concurrency, requests_per_client, work):
    """Runs `work(client, i)` -> (start, token times) for every request: `concurrency`
    clients, each its requests in turn. Returns (records, wall seconds)."""
    records, errors = [], []
    lock = threading.Lock()

    def client(index):
        try:
            for k in range(requests_per_client):
                record = work(index, index * requests_per_client + k)
                with lock:
                    records.append(record)
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if errors:
        raise errors[0]
    return records, wall


class ChorusServer:
    def __init__(self, binary_dir, repository, interpreters, log_path):
        command = [os.path.join(binary_dir, "chorus-server"), "--model-repository", repository,
                   "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0",
                   "--http-port", "-1", "--interpreters", str(interpreters)]
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log,
                                        text=True)
        line = self.process.stdout.readline()
        match = re.search(r"port (\d+)", line)
        if not match:
            self.process.kill()
            raise RuntimeError(f"chorus-server did not start: {line!r} (see {log_path})")
        self.address = f"127.0.0.1:{match.group(1)}"

    def stop(self):
        self.process.terminate()
        self.process.wait(60)


class ChorusStreams:
    """Requests over one ModelStreamInfer stream; each waits for its own final response."""

    def __init__(self, address, model, max_tokens):
        import tritonclient.grpc as triton_grpc
        self.grpc = triton_grpc
        self.client = triton_grpc.InferenceServerClient(address)
        self.model, self.max_tokens = model, max_tokens
        self.pending = {}
        self.lock = threading.Lock()
        self.client.start_stream(callback=self._on_response)

    def _on_response(self, result, error):
        now = time.perf_counter()
        if error is not None:
            raise RuntimeError(f"chorus stream error: {error}")
        response = result.get_response()
        with self.lock:
            times, done, texts = self.pending[response.id]
        # One response per generated token (its text may be empty while an incomplete
        # character is held back).
        # The raw BYTES output: a 4-byte length, then the text (cheaper than as_numpy,
        # so the client takes less of the machine's two cores).
        times.append(now)
        texts.append(response.raw_output_contents[0][4:])
        if response.parameters["triton_final_response"].bool_param:
            done.set()

    def generate(self, request_id, prompt, **parameters):
        tensor = self.grpc.InferInput("text_input", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
        times, done, texts = [], threading.Event(), []
        with self.lock:
            self.pending[request_id] = (times, done, texts)
        start = time.perf_counter()
        self.client.async_stream_infer(self.model, [tensor], request_id=request_id,
                                       parameters={"max_tokens": self.max_tokens,
                                                   "temperature": 0.0, **parameters})
        if not done.wait(600):
            raise RuntimeError(f"request {request_id} did not finish")
        return start, times, b"".join(texts)

    def close(self):
        self.client.stop_stream()


def naive_generate(client, model, prompt, max_tokens):
    """train_and_serve.py's loop: the whole sequence each step, greedy."""
    tokens = data.encode(prompt).tolist()
    start, times = time.perf_counter(), []
    for _ in range(max_tokens):
        logits = client.infer(model, {"tokens": np.array([tokens], dtype=np.int64)})["logits"]
        tokens.append(int(logits[0, -1].argmax()))
        times.append(time.perf_counter())
    return start, times, tokens[-max_tokens:]


class TimingStreamer:
    """transformers' streamer interface: put() once for the prompt, then per token."""

    def __init__(self, batch=1):
        self.times, self.calls = [], 0

    def put(self, value):
        self.calls += 1
        if self.calls > 1:
            self.times.append(time.perf_counter())

    def end(self):
        pass


def package_models(repository, transformer, cache_blocks):
    from chorus.package import create_package
    generator = generate.Llama3Generator(transformer)
    os.makedirs(os.path.join(repository, "llm", "1"))
    create_package(os.path.join(repository, "llm", "1", "model.pt"), generator, (["chorus"],),
                   name="llm", batchable=False, input_names=["text_input"],
                   output_names=["text_output"], progress=False)
    with open(os.path.join(repository, "llm", "config.json"), "w") as f:
        json.dump({"generation": {"cache_blocks": cache_blocks, "max_running": 64}}, f)
    os.makedirs(os.path.join(repository, "naive", "1"))
    create_package(os.path.join(repository, "naive", "1", "model.pt"), transformer,
                   (data.encode("chorus trains and serves")[None, :],), name="naive",
                   batchable=True, max_batch_size=16, input_names=["tokens"],
                   output_names=["logits"], dynamic_axes={"tokens": [1], "logits": [1]},
                   progress=False)


def measure(args):
    torch.manual_seed(0)
    max_seq_len = 64 + args.max_tokens + 8
    transformer = debug_transformer(max_seq_len)
    work = tempfile.mkdtemp(prefix="bench-llm-")
    repository = os.path.join(work, "repository")
    # Room for every concurrent sequence at its longest.
    blocks = max(args.concurrency) * -(-max_seq_len // 16)
    package_models(repository, transformer, blocks)
    hf_dir = os.path.join(work, "hf")
    hf_checkpoint.save_checkpoint(transformer, hf_dir)
    import transformers
    hf_model = transformers.LlamaForCausalLM.from_pretrained(hf_dir).eval()

    cells = {"chorus": {}, "naive": {}, "transformers": {}, "transformers_batched": {}}
    agree = {}
    server = ChorusServer(args.bin, repository, args.interpreters,
                          os.path.join(work, "server.log"))
    try:
        from chorus.client import Client
        streams = ChorusStreams(server.address, "llm", args.max_tokens)
        naive_clients = [Client(server.address) for _ in range(max(args.concurrency))]
        for concurrency in args.concurrency:
            key = str(concurrency)
            figures, agree[key] = measure_concurrency(args, concurrency, streams,
                                                      naive_clients, hf_model)
            for name, cell in figures.items():
                cells[name][key] = cell
            print(f"concurrency {key}: " + ", ".join(
                f"{name} {cells[name][key]['tokens_per_s']} tok/s" for name in cells),
                flush=True)
        streams.close()
    finally:
        server.stop()
    return cells, agree


def measure_concurrency(args, concurrency, streams, naive_clients, hf_model):
    """Every way's cell at `concurrency`, and whether chorus' and the naive loop's greedy
    answers to the first prompt agree."""
    # At least 16 requests a cell, so low concurrency is not a handful of samples.
    per_client = max(args.requests_per_client, -(-16 // concurrency))
    texts = prompts(concurrency * per_client, seed=concurrency)
    chorus_out, naive_out, cells = {}, {}, {}

    def chorus_work(_, i):
        start, times, text = streams.generate(f"{concurrency}-{i}", texts[i])
        chorus_out[i] = text
        return start, times

    def naive_work(client_index, i):
        start, times, tokens = naive_generate(naive_clients[client_index], "naive", texts[i],
                                              args.max_tokens)
        naive_out[i] = tokens
        return start, times

    streams.generate(f"warm-{concurrency}", texts[0])
    cells["chorus"] = summarize(*run_clients(concurrency, per_client, chorus_work))
    # Fewer requests: the naive loop is slow, and its rate is steady.
    cells["naive"] = summarize(*run_clients(concurrency, max(1, per_client // 2), naive_work))
    cells["transformers"] = summarize(*run_clients(
        concurrency, per_client,
        lambda _, i: hf_generate(hf_model, texts[i], args.max_tokens)))
    cells["transformers_batched"] = hf_batched(hf_model, texts, concurrency, args.max_tokens)
    # chorus' text is the greedy bytes decoded.
    naive_text = bytes(naive_out[0]).decode("utf-8", errors="replace").encode()
    return cells, chorus_out[0] == naive_text


def package_prefix_models(repository, transformer):
    """The same generator twice: prefix caching on ("prefix_on") and off ("prefix_off")."""
    from chorus.package import create_package
    generator = generate.Llama3Generator(transformer)
    for name, caching in (("prefix_on", True), ("prefix_off", False)):
        os.makedirs(os.path.join(repository, name, "1"))
        create_package(os.path.join(repository, name, "1", "model.pt"), generator,
                       (["chorus"],), name=name, batchable=False,
                       input_names=["text_input"], output_names=["text_output"],
                       progress=False)
        with open(os.path.join(repository, name, "config.json"), "w") as f:
            json.dump({"generation": {"cache_blocks": 256, "prefix_caching": caching}}, f)


def measure_prefix_cache(args):
    """Time to first token of requests sharing a PREFIX_TOKENS-byte prefix, cache on and
    off, one request at a time (each finds the engine idle)."""
    max_seq_len = PREFIX_TOKENS + 64 + args.max_tokens + 8
    transformer = debug_transformer(max_seq_len)
    work = tempfile.mkdtemp(prefix="bench-llm-prefix-")
    repository = os.path.join(work, "repository")
    package_prefix_models(repository, transformer)
    shared = " ".join(prompts(64, seed=98))[:PREFIX_TOKENS]
    assert len(shared) == PREFIX_TOKENS
    texts = [shared + tail for tail in prompts(args.prefix_requests, seed=97)]
    server = ChorusServer(args.bin, repository, 1, os.path.join(work, "server.log"))
    cells, answers = {}, {}
    try:
        for name in ("prefix_on", "prefix_off"):
            streams = ChorusStreams(server.address, name, args.max_tokens)
            streams.generate(f"{name}-warm", shared)  # fills the "on" model's cache
            records, answers[name] = [], []
            for i, text in enumerate(texts):
                start, times, answer = streams.generate(f"{name}-{i}", text)
                records.append((start, times))
                answers[name].append(answer)
            streams.close()
            cells[name] = summarize(records, sum(t[-1] - s for s, t in records))
    finally:
        server.stop()
    speedup = cells["prefix_off"]["ttft_p50_ms"] / cells["prefix_on"]["ttft_p50_ms"]
    return {"ttft_speedup": round(speedup, 2), "prefix_tokens": PREFIX_TOKENS,
            "requests": len(texts), "outputs_identical": answers["prefix_on"] ==
            answers["prefix_off"], "cells": cells,
            "goals": {key: {"goal": goal, "met": speedup >= goal}
                      for key, goal in PREFIX_GOAL.items()}}


def measure_structured(args):
    """Tokens/s of schema-held requests over unconstrained ones, and the unconstrained
    ones' inter-token latency beside schema-held neighbours over alone."""
    from chorus.package import create_package
    work = tempfile.mkdtemp(prefix="bench-llm-structured-")
    repository = os.path.join(work, "repository")
    os.makedirs(os.path.join(repository, "llm", "1"))
    create_package(os.path.join(repository, "llm", "1", "model.pt"),
                   generate.Llama3Generator(debug_transformer(64 + STRUCTURED_TOKENS + 8)),
                   (["chorus"],), name="llm", batchable=False, input_names=["text_input"],
                   output_names=["text_output"], progress=False)
    with open(os.path.join(repository, "llm", "config.json"), "w") as f:
        json.dump({"generation": {"cache_blocks": 256}}, f)
    schema = {"structured_outputs": json.dumps({"json": STRUCTURED_SCHEMA})}
    texts = prompts(32, seed=5)
    server = ChorusServer(args.bin, repository, args.interpreters,
                          os.path.join(work, "server.log"))
    cells = {}
    try:
        streams = ChorusStreams(server.address, "llm", STRUCTURED_TOKENS)
        streams.generate("warm", texts[0], **schema)

        def run(name, constrained):
            """All 32 requests, 16 clients; per request (constrained?, record, text)."""
            done = []

            def work(_, i):
                start, times, text = streams.generate(f"{name}-{i}", texts[i],
                                                      **(schema if constrained(i) else {}))
                done.append((constrained(i), (start, times), text))
                return start, times
            _, wall = run_clients(16, 2, work)
            return done, wall

        for name, constrained in (("unconstrained", lambda i: False),
                                  ("constrained", lambda i: True)):
            done, wall = run(name, constrained)
            cells[name] = summarize([record for _, record, _ in done], wall)
        valid = all(len(text) == STRUCTURED_TOKENS and json.loads(text)["code"] >= 1000
                    for _, _, text in done)
        done, wall = run("mixed", lambda i: i % 2 == 1)
        cells["mixed_unconstrained"] = summarize([r for c, r, _ in done if not c], wall)
        streams.close()
    finally:
        server.stop()
    ratio = cells["constrained"]["tokens_per_s"] / cells["unconstrained"]["tokens_per_s"]
    itl = cells["mixed_unconstrained"]["itl_p50_ms"] / cells["unconstrained"]["itl_p50_ms"]
    return {"tokens_per_s_vs_unconstrained": round(ratio, 3),
            "mixed_unconstrained_itl_ratio": round(itl, 3), "answers_valid": valid,
            "cells": cells,
            "goals": {key: {"goal": goal, "met": ratio >= goal}
                      for key, goal in STRUCTURED_GOAL.items()}}


def hf_generate(model, prompt, max_tokens):
    ids = torch.tensor([data.encode(prompt).tolist()])
    streamer = TimingStreamer()
    start = time.perf_counter()
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                       min_new_tokens=max_tokens, do_sample=False, streamer=streamer,
                       pad_token_id=0)
    return start, streamer.times


def hf_batched(model, texts, concurrency, max_tokens):
    """Static batching: the concurrent requests as one left-padded generate() call, in
    rounds."""
    records, wall = [], 0.0
    for first in range(0, len(texts), concurrency):
        batch = [data.encode(t).tolist() for t in texts[first:first + concurrency]]
        width = max(len(ids) for ids in batch)
        ids = torch.tensor([[0] * (width - len(b)) + b for b in batch])
        mask = torch.tensor([[0] * (width - len(b)) + [1] * len(b) for b in batch])
        streamer = TimingStreamer()
        start = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, attention_mask=mask, max_new_tokens=max_tokens,
                           min_new_tokens=max_tokens, do_sample=False, streamer=streamer,
                           pad_token_id=0)
        wall += time.perf_counter() - start
        records += [(start, streamer.times)] * len(batch)
    return summarize(records, wall)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="chorus' build bin/ directory")
    parser.add_argument("--out", default=None, help="the JSON (default: build/bench/llm.json)")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--requests-per-client", type=int, default=4)
    parser.add_argument("--interpreters", type=int, default=2)
    parser.add_argument("--prefix-requests", type=int, default=12)
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.bin)), "bench",
                                   "llm.json")
    prefix_cache = measure_prefix_cache(args)
    print(f"prefix cache: ttft_speedup {prefix_cache['ttft_speedup']}", flush=True)
    structured = measure_structured(args)
    print("structured: tokens_per_s_vs_unconstrained "
          f"{structured['tokens_per_s_vs_unconstrained']}", flush=True)
    cells, agree = measure(args)
    ratios = {}
    for key in cells["chorus"]:
        chorus = cells["chorus"][key]["tokens_per_s"]
        ratios[key] = {f"tokens_per_s_vs_{peer}": round(chorus / cells[peer][key]["tokens_per_s"],
                                                        2)
                       for peer in ("naive", "transformers", "transformers_batched")}
    goals = {name: {c: {"goal": goal, "met": ratios.get(c, {}).get(name, 0) >= goal}
                    for c, goal in by_concurrency.items() if c in ratios}
             for name, by_concurrency in GOALS.items()}
    result = {"model": "debug Llama 3 (dim 256, 6 layers, byte vocabulary), fp32, CPU",
              "max_tokens": args.max_tokens, "interpreters": args.interpreters,
              "requests_per_client": args.requests_per_client, "torch_threads":
              torch.get_num_threads(), "greedy_outputs_agree": agree, "cells": cells,
              "ratios": ratios, "goals": goals, "prefix_cache": prefix_cache,
              "structured": structured}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({"ratios": ratios, "goals": goals, "prefix_cache": {
        key: prefix_cache[key] for key in ("ttft_speedup", "outputs_identical", "goals")},
        "structured": {key: structured[key] for key in (
            "tokens_per_s_vs_unconstrained", "mixed_unconstrained_itl_ratio", "answers_valid",
            "goals")}}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
