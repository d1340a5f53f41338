#!/usr/bin/env python3
"""The same TorchServe archives on the real TorchServe 0.12 and on chorus, the same
requests to both: the status, the content type and the body must agree
(`make torchserve-compare`).

    make torchserve-compare                     # or, by hand:
    PYTHON=$(make -s print-python)
    $PYTHON tests/torchserve_compare/compare.py [--build build] [--shared ../shared/torchserve]

The archives: TorchServe's frontend's own test archives in `../shared/torchserve/` (read
where they are, never copied into the project), its examples and pytest archives made
with torch-model-archiver as their READMEs and tests make them (seeded random stand-ins
for the weights they download), and archives of chorus' own tests
(server/tests/torchserve_archives.py: a function handler, an eager model with its state
dict under BaseHandler). Both servers
serve one model store of them (`--model-store` with `--models name=archive`, TorchServe's
form), TorchServe with token authorization off and one worker per model, chorus with its
TorchServe inference API on a free port.

A case agrees when the statuses are equal, the Content-Type headers are equal (absent on
both counts), and the bodies are equal: as JSON values where both parse (floats within
1e-5), byte for byte otherwise. A difference chorus keeps on purpose is listed in
KNOWN_DIFFERENCES with its reason; any other fails the run.

Skips (prints why, exits 0) when `../shared/torchserve` or Java (TorchServe's frontend) is
absent. Writes build/torchserve_compare.json: {"cases", "agree", "known_differences",
"differences": [...]} and a table on stdout; the servers' logs are in
build/torchserve_compare/. Exits 1 on a difference not known, or a server that does not
start.
"""

import argparse
import http.client
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench" / "peers"))
sys.path.insert(0, str(ROOT / "server" / "tests"))

from servers import torchserve_environment, write_torchserve_config  # noqa: E402
from stacks import Stack, free_ports  # noqa: E402
from torchserve_archives import multipart  # noqa: E402

START_TIMEOUT_S = 240
EXAMPLES_ROOT = Path()  # <shared>/serve/examples, set by main

# TorchServe's frontend test archives served here: model name -> archive file.
FRONTEND_ARCHIVES = {
    "noop": "noop.mar",
    "echo": "echo.mar",
    "respheader-test": "respheader-test.mar",
    "pred-custom-return-code": "pred-custom-return-code.mar",
    "error_batch": "error_batch.mar",
    "prediction-memory-error": "prediction-memory-error.mar",
    "noop_entrypntfunc": "noop_entrypntfunc.mar",
    "noop_handlername": "noop_handlername.mar",
    "noop-customized": "noop-customized.mar",
    "noop_no_archive": "noop_no_archive",
}

# Where chorus answers differently, on purpose: (what differs) -> why.
NO_CONTENT_TYPE = ("chorus' HTTP server (cpp-httplib) labels a body the handler gave no "
                   "content type 'text/plain'; TorchServe sends no Content-Type")

# Answer fields that differ by nature (the process, the worker object), left out of the
# comparison of own_echo's answers.
VARYING_FIELDS = ("pid", "worker")

JSON = {"Content-Type": "application/json"}


Case = Tuple[str, str, str, bytes, Dict[str, str]]  # model, label, path, body, headers


def frontend_cases() -> List[Case]:
    """Two requests to each of TorchServe's frontend test archives."""
    listed = []
    for model in FRONTEND_ARCHIVES:
        listed += [
            (model, "form data", f"/predictions/{model}", b"data=hello",
             {"Content-Type": "application/x-www-form-urlencoded"}),
            (model, "raw text", f"/predictions/{model}", b"some text",
             {"Content-Type": "text/plain"}),
        ]
    return listed


def image_cases() -> List[Case]:
    """The examples' images to their classifiers and detector, as their READMEs send them."""
    examples = EXAMPLES_ROOT
    classifiers = examples / "image_classifier"
    mnist_digit = (classifiers / "mnist/test_data/0.png").read_bytes()
    kitten = (classifiers / "kitten.jpg").read_bytes()
    listed = []
    for model, image in (("mnist", mnist_digit), ("custom_metrics_mnist", mnist_digit),
                         ("resnet-18", kitten), ("resnet-18_mb", kitten)):
        listed += [
            (model, "raw image", f"/predictions/{model}", image, {}),
            (model, "multipart image", f"/predictions/{model}",
             *multipart({"data": ("image", image, "image/png")})),
        ]
    for model in ("resnet-18_ts", "squeezenet1_1", "alexnet", "densenet161", "vgg16",
                  "resnet-152-batch"):
        listed.append((model, "raw image", f"/predictions/{model}", kitten, {}))
    for image in ("croco.jpg", "dog.jpg"):
        listed.append(("resnet-152-batch", f"raw image {image}", "/predictions/resnet-152-batch",
                       (classifiers / "resnet_152_batch/images" / image).read_bytes(), {}))
    listed.append(("mnist_custom_dependencies", "raw image",
                   "/predictions/mnist_custom_dependencies", mnist_digit, {}))
    persons = (examples / "object_detector/persons.jpg").read_bytes()
    listed.append(("maskrcnn", "raw image", "/predictions/maskrcnn", persons, {}))
    return listed


def other_example_cases() -> List[Case]:
    """BERT's sample text, the stateful example's sequences, torch.compile's JSON."""
    examples = EXAMPLES_ROOT
    listed = []
    bert_text = (examples / "Huggingface_Transformers/Seq_classification_artifacts/"
                 "sample_text_captum_input.txt").read_bytes()
    for kind in ("predictions", "explanations"):
        listed.append(("BERTSeqClassification", f"text ({kind})",
                       f"/{kind}/BERTSeqClassification", bert_text, {}))
    samples = [(examples / f"stateful/sample/sample{i}.txt").read_bytes() for i in (1, 2, 3)]
    for sequence, sample in (("seq_0", 0), ("seq_1", 2), ("seq_0", 1), ("seq_1", 1),
                             ("seq_0", 2), ("seq_1", 0)):
        listed.append(("stateful", f"{sequence} sample{sample + 1}", "/predictions/stateful",
                       samples[sample], {"ts_request_sequence_id": sequence}))
    listed.append(("stateful", "no sequence", "/predictions/stateful", samples[2], {}))
    for model in ("half_plus_two_str", "half_plus_two_dict"):
        listed.append((model, "json instances", f"/predictions/{model}",
                       b'{"instances": [[1.0], [2.0], [3.0]]}', JSON))
    return listed


def own_cases() -> List[Case]:
    """chorus' own test archives: forms, statuses, headers, failures, an eager model."""
    return [
        ("own_echo", "multipart files", "/predictions/own_echo",
         *multipart({"data": ("a.bin", bytes(range(256)), "application/octet-stream"),
                     "meta": (None, b'{"k": 1}', "application/json")})),
        ("own_echo", "explanation", "/explanations/own_echo", b"x", {}),
        ("echo", "json body", "/predictions/echo", b'{"data": [1, 2]}', JSON),
        ("own_echo", "json body", "/predictions/own_echo", b'{"x": [1.5, 2]}', JSON),
        ("own_echo", "status and header", "/predictions/own_echo", b"x",
         {"x-status": "201", "x-echo": "yes"}),
        ("own_echo", "prediction exception", "/predictions/own_echo", b"x",
         {"x-fail": "prediction"}),
        ("own_echo", "handler error", "/predictions/own_echo", b"x", {"x-fail": "error"}),
        ("net", "json rows", "/predictions/net", b"[0.5, -1.0, 2.0, 0.25]", JSON),
        ("nothing", "unknown model", "/predictions/nothing", b"x", {}),
    ]


def cases() -> List[Case]:
    """Every request sent to both servers, in order."""
    return frontend_cases() + image_cases() + other_example_cases() + own_cases()


def call(port: int, path: str, body: bytes, headers: Dict[str, str]):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), response.read()
    finally:
        connection.close()


def close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-5)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b


def bodies_agree(a: bytes, b: bytes) -> bool:
    try:
        return close(json.loads(a), json.loads(b))
    except ValueError:
        return a == b


def without_varying(body: bytes) -> bytes:
    try:
        value = json.loads(body)
    except ValueError:
        return body
    if isinstance(value, dict):
        for field in VARYING_FIELDS:
            value.pop(field, None)
    return json.dumps(value).encode()


def difference(torchserve, chorus) -> Tuple[Optional[str], Optional[str]]:
    """(what differs between two answers (status, content type, body), why if on
    purpose); (None, None) when they agree."""
    (ts_status, ts_type, ts_body), (ch_status, ch_type, ch_body) = torchserve, chorus
    if ts_status != ch_status:
        return f"status {ts_status} vs {ch_status}", None
    if not bodies_agree(without_varying(ts_body), without_varying(ch_body)):
        return f"body {ts_body[:200]!r} vs {ch_body[:200]!r}", None
    if ts_type != ch_type:
        known = ts_type is None and ch_type == "text/plain"
        return f"content type {ts_type!r} vs {ch_type!r}", NO_CONTENT_TYPE if known else None
    return None, None


def make_store(store: Path, shared: Path) -> Dict[str, str]:
    """The model store both servers serve: the frontend's archives linked in, ours made.
    Returns model -> store entry."""
    import torchserve_archives

    store.mkdir(parents=True)
    resources = shared / "serve/frontend/archive/src/test/resources/models"
    entries = {}
    for model, archive in FRONTEND_ARCHIVES.items():
        os.symlink(resources / archive, store / archive)
        entries[model] = archive
    torchserve_archives.echo_archive(str(store), "own_echo")
    torchserve_archives.net_archive(str(store), "net")
    entries.update({"own_echo": "own_echo.mar", "net": "net.mar"})
    entries.update(example_archives(store, store.parent / "examples"))
    return entries


def random_state_dict(module_file: Path, class_name: str, path: Path, seed: int) -> Path:
    """A state dict of `class_name` (defined in `module_file`) with seeded random
    weights: the examples' stand-in for their downloaded checkpoints."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(seed)
    torch.save(getattr(module, class_name)().state_dict(), path)
    return path


def archive_example(work: Path, store: Path, name: str, *options: str) -> str:
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "torch-model-archiver"),
                    "--model-name", name, "--version", "1.0", "--export-path", str(store),
                    *options], check=True, capture_output=True, cwd=work)
    return f"{name}.mar"


def scripted_state_dict(module_file: Path, class_name: str, path: Path, seed: int) -> Path:
    """`class_name` with seeded random weights as TorchScript (the README's
    `torch.jit.script(model).save(...)`)."""
    import torch

    state = random_state_dict(module_file, class_name, path.with_suffix(".state.pt"), seed)
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"scripted_{path.stem.replace('-', '_')}",
                                                  module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = getattr(module, class_name)()
    model.load_state_dict(torch.load(state))
    torch.jit.script(model.eval()).save(str(path))
    return path


def tiny_bert(folder: Path, artifacts: Path, seed: int) -> List[Path]:
    """A two-layer BERT sequence classifier with seeded random weights and a vocabulary
    of the example's sample texts, saved as Download_Transformer_models.py saves
    bert-base-uncased (config.json, model.safetensors, tokenizer files); the files the
    README's offline archive carries."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    folder.mkdir()
    words = set()
    for sample in sorted(artifacts.glob("*.txt")):
        words.update(w.strip('.,"{}:').lower() for w in sample.read_text().split())
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(w for w in words if w)
    (folder / "vocab.txt").write_text("\n".join(vocabulary) + "\n")
    BertTokenizer(str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(str(folder))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocabulary), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=37, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(str(folder))
    return sorted(folder.iterdir())


def classifier_archives(store: Path, work: Path) -> Dict[str, str]:
    """The image classifiers' archives."""
    examples = EXAMPLES_ROOT
    classifiers = examples / "image_classifier"
    labels = str(classifiers / "index_to_name.json")
    mnist_py = classifiers / "mnist/mnist.py"
    resnet_py = classifiers / "resnet_18/model.py"
    mnist_pt = random_state_dict(mnist_py, "Net", work / "mnist_cnn.pt", 1)
    resnet_pt = random_state_dict(resnet_py, "ImageClassifier", work / "resnet18.pth", 2)
    archives = {
        "mnist": archive_example(
            work, store, "mnist", "--model-file", str(mnist_py), "--serialized-file",
            str(mnist_pt), "--handler", str(classifiers / "mnist/mnist_handler.py")),
        "custom_metrics_mnist": archive_example(
            work, store, "custom_metrics_mnist", "--model-file", str(mnist_py),
            "--serialized-file", str(mnist_pt), "--handler",
            str(examples / "custom_metrics/mnist_handler.py")),
        "resnet-18": archive_example(
            work, store, "resnet-18", "--model-file", str(resnet_py), "--serialized-file",
            str(resnet_pt), "--handler", "image_classifier", "--extra-files", labels),
        "resnet-18_mb": archive_example(
            work, store, "resnet-18_mb", "--model-file", str(resnet_py), "--serialized-file",
            str(resnet_pt), "--handler", str(examples / "micro_batching/micro_batching_handler.py"),
            "--extra-files", labels, "--config-file", str(examples / "micro_batching/config.yaml")),
        "resnet-18_ts": archive_example(
            work, store, "resnet-18_ts", "--serialized-file",
            str(scripted_state_dict(resnet_py, "ImageClassifier", work / "resnet-18.pt", 2)),
            "--handler", "image_classifier", "--extra-files", labels),
    }
    # The other classifiers under the default handler (VGG-16 under its own), each with
    # its README's files.
    for seed, (name, folder, class_name, handler, config) in enumerate([
            ("squeezenet1_1", "squeezenet", "ImageClassifier", "image_classifier", None),
            ("alexnet", "alexnet", "ImageClassifier", "image_classifier", None),
            ("densenet161", "densenet_161", "ImageClassifier", "image_classifier",
             "model-config.yaml"),
            ("vgg16", "vgg_16", "ImageClassifier", "vgg_16/vgg_handler.py", None),
            ("resnet-152-batch", "resnet_152_batch", "ResNet152ImageClassifier",
             "image_classifier", None)], start=10):
        model_py = classifiers / folder / "model.py"
        weights = random_state_dict(model_py, class_name, work / f"{name}.pth", seed)
        options = ["--model-file", str(model_py), "--serialized-file", str(weights),
                   "--handler", handler if "/" not in handler else str(classifiers / handler),
                   "--extra-files", labels]
        if config:
            options += ["--config-file", str(classifiers / folder / config)]
        archives[name] = archive_example(work, store, name, *options)
    return archives


def other_example_archives(store: Path, work: Path) -> Dict[str, str]:
    """The detector's, BERT's, torch.compile's, the stateful and the custom dependencies'
    archives."""
    examples = EXAMPLES_ROOT
    tests = EXAMPLES_ROOT.parent / "test/pytest/test_data"
    mnist_py = examples / "image_classifier/mnist/mnist.py"
    mnist_pt = random_state_dict(mnist_py, "Net", work / "mnist_cnn.pt", 1)
    archives = {}
    detector = examples / "object_detector"
    archives["maskrcnn"] = archive_example(
        work, store, "maskrcnn", "--model-file", str(detector / "maskrcnn/model.py"),
        "--serialized-file", str(random_state_dict(
            detector / "maskrcnn/model.py", "MASKRCNNObjectDetector", work / "maskrcnn.pth", 3)),
        "--handler", "object_detector", "--extra-files", str(detector / "index_to_name.json"))
    bert = examples / "Huggingface_Transformers"
    bert_files = tiny_bert(work / "Transformer_model", bert / "Seq_classification_artifacts", 5)
    archives["BERTSeqClassification"] = archive_example(
        work, store, "BERTSeqClassification", "--serialized-file",
        str(work / "Transformer_model/model.safetensors"), "--handler",
        str(bert / "Transformer_handler_generalized.py"), "--config-file",
        str(bert / "model-config.yaml"), "--extra-files", ",".join(
            [str(f) for f in bert_files if f.name != "model.safetensors"]
            + [str(bert / "Seq_classification_artifacts/index_to_name.json")]))
    compiled = tests / "torch_compile"
    half_plus_two = random_state_dict(compiled / "model.py", "HalfPlusTwoModel",
                                      work / "half_plus_two.pt", 0)
    for name, config in (("half_plus_two_str", "pt2.yaml"), ("half_plus_two_dict",
                                                             "pt2_dict.yaml")):
        archives[name] = archive_example(
            work, store, name, "--model-file", str(compiled / "model.py"), "--serialized-file",
            str(half_plus_two), "--config-file", str(compiled / config), "--handler",
            str(compiled / "compile_handler.py"))
    stateful = examples / "stateful"
    import yaml

    config = yaml.safe_load((stateful / "sequence_batching/model-config.yaml").read_text())
    # The copy's sequenceMaxIdleMSec is 10 ms, which ends a sequence between two requests
    # (its next one then lands on either worker, with or without the state): its
    # Readme.md's 60000 keeps the answers deterministic on both servers.
    config["sequenceMaxIdleMSec"] = 60000
    (work / "stateful-config.yaml").write_text(yaml.safe_dump(config))
    archives["stateful"] = archive_example(
        work, store, "stateful", "--model-file", str(stateful / "model.py"), "--serialized-file",
        str(random_state_dict(stateful / "model.py", "Net", work / "model_cnn.pt", 6)),
        "--handler", str(stateful / "sequence_batching/stateful_handler.py"), "-r",
        str(stateful / "requirements.txt"), "--config-file", str(work / "stateful-config.yaml"))
    dependencies = tests / "custom_dependencies"
    archives["mnist_custom_dependencies"] = archive_example(
        work, store, "mnist_custom_dependencies", "--model-file", str(mnist_py),
        "--serialized-file", str(mnist_pt), "--handler",
        str(dependencies / "mnist_custom_dependencies_handler.py"), "--requirements-file",
        str(dependencies / "requirements.txt"))
    return archives


def example_archives(store: Path, work: Path) -> Dict[str, str]:
    """TorchServe's examples and pytest archives made as their READMEs and tests make
    them (../shared/torchserve/local/archive_all.sh lists the commands), with seeded
    random stand-ins for the weights they download."""
    work.mkdir()
    return {**classifier_archives(store, work), **other_example_archives(store, work)}


def wait_ready(port: int, stack: Stack, what: str) -> None:
    """Until `/ping` answers Healthy: on both servers, every model has its workers."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if not stack.alive():
            raise RuntimeError(f"{what} stopped before it served")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", "/ping")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} was not healthy within {START_TIMEOUT_S} s")
        time.sleep(0.2)


def start_torchserve(python: str, store: Path, entries: Dict[str, str],
                     logs: Path) -> Tuple[Stack, int]:
    home = Path(tempfile.mkdtemp(prefix="torchserve-home-", dir=logs))
    ports = free_ports(5)
    config = write_torchserve_config(str(home), ports, 1)
    models = ",".join(f"{name}={entry}" for name, entry in entries.items())
    command = [os.path.join(os.path.dirname(python), "torchserve"), "--start", "--foreground",
               "--ncs", "--disable-token-auth", "--model-store", str(store), "--models", models,
               "--ts-config", config]
    stack = Stack(command, torchserve_environment(str(home), 1), str(home),
                  str(logs / "torchserve.log"))
    return stack, ports[0]


def start_chorus(build: Path, store: Path, entries: Dict[str, str],
                 logs: Path) -> Tuple[Stack, int]:
    port = free_ports(1)[0]
    models = ",".join(f"{name}={entry}" for name, entry in entries.items())
    command = [str(build / "bin" / "chorus-server"), "--model-store", str(store), "--models",
               models, "--interpreters", "2", "--host", "127.0.0.1", "--port", "0",
               "--http-port", "-1", "--metrics-port", "-1",
               "--torchserve-inference-port", str(port), "--torchserve-default-workers", "1"]
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + ":" + os.environ["PATH"])
    stack = Stack(command, env, str(logs), str(logs / "chorus.log"))
    return stack, port


def compare(torchserve_port: int, chorus_port: int) -> Dict[str, Any]:
    rows, differences, known = [], [], []
    for model, label, path, body, headers in cases():
        torchserve = call(torchserve_port, path, body, headers)
        chorus = call(chorus_port, path, body, headers)
        differs, reason = difference(torchserve, chorus)
        verdict = "agree" if differs is None else ("known" if reason else "DIFFER")
        rows.append((model, label, verdict, torchserve[0], chorus[0]))
        if differs and reason:
            known.append({"model": model, "case": label, "difference": differs, "why": reason})
        elif differs:
            differences.append({"model": model, "case": label, "difference": differs})
    for row in rows:
        print(f"{row[0]:<26} {row[1]:<22} {row[2]:<7} TorchServe {row[3]}  chorus {row[4]}")
    return {"cases": len(rows), "agree": sum(r[2] == "agree" for r in rows),
            "known_differences": known, "differences": differences}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--shared", default=str(ROOT.parent / "shared" / "torchserve"))
    args = parser.parse_args()
    build, shared = Path(args.build).resolve(), Path(args.shared)
    if not (shared / "serve").is_dir():
        print(f"torchserve-compare: skipped: {shared} is absent")
        return 0
    if shutil.which("java") is None:
        print("torchserve-compare: skipped: no java (TorchServe's frontend); "
              "tools/install-torchserve.sh PYTHON --frontend installs it")
        return 0
    global EXAMPLES_ROOT
    EXAMPLES_ROOT = shared / "serve" / "examples"
    logs = build / "torchserve_compare"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    store = logs / "store"
    entries = make_store(store, shared)
    stacks = []
    try:
        torchserve, torchserve_port = start_torchserve(sys.executable, store, entries, logs)
        stacks.append(torchserve)
        chorus, chorus_port = start_chorus(build, store, entries, logs)
        stacks.append(chorus)
        wait_ready(torchserve_port, torchserve, "TorchServe")
        wait_ready(chorus_port, chorus, "chorus-server")
        result = compare(torchserve_port, chorus_port)
    finally:
        for stack in stacks:
            stack.stop()
    (build / "torchserve_compare.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"torchserve-compare: {result['agree']} of {result['cases']} cases agree, "
          f"{len(result['known_differences'])} known differences, "
          f"{len(result['differences'])} unexpected")
    for item in result["differences"]:
        print(f"  DIFFER {item['model']} / {item['case']}: {item['difference']}")
    return 1 if result["differences"] else 0


if __name__ == "__main__":
    sys.exit(main())
