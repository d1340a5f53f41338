"""chorus-client: call a chorus server (any Open Inference Protocol server) from the shell.

  chorus-client infer mlp --input x=inputs.npy            # numpy file
  chorus-client infer mlp --input 'x=[[1, 2, 3, 4]]' --dtype x=FP32   # JSON
  chorus-client infer upper --input 'words=["a", "b"]'          # JSON strings: BYTES
  chorus-client list | load NAME | unload NAME | metadata NAME | ready [NAME] | stats [NAME]

Server address: --server HOST:PORT (default localhost:8001); --token for
bearer authentication. Exit codes: 0 success, 1 the server refused the call,
2 bad command line.
"""

import argparse
import json
import sys

import numpy as np

from chorus.client.client import BYTES, Client, ClientError, numpy_dtype, wire_datatype


def _holds_str(value) -> bool:
    if isinstance(value, list):
        return any(_holds_str(item) for item in value)
    return isinstance(value, str)


def _parse_json_input(value: str, datatype):
    """A JSON input as an array of `datatype`; by default BYTES where it holds strings,
    else FP32."""
    data = json.loads(value)
    if datatype is None:
        datatype = BYTES if _holds_str(data) else "FP32"
    if datatype != BYTES:
        return np.array(data, dtype=numpy_dtype(datatype))
    # numpy makes a ragged list an object array of lists: every element must be a str.
    array = np.array(data, dtype=object)
    if not all(isinstance(element, str) for element in array.flat):
        raise SystemExit("chorus-client: a BYTES input is a string or rectangular nested "
                         f"lists of strings, got {value!r}")
    return array


def _output_json(name: str, array: np.ndarray) -> str:
    """One output as a JSON line; BYTES elements as text (UTF-8, undecodable bytes as
    U+FFFD)."""
    if wire_datatype(array) == BYTES:
        data, datatype = _as_text(array.tolist()), BYTES
    else:
        data, datatype = array.tolist(), str(array.dtype)
    return json.dumps({"name": name, "datatype": datatype, "shape": list(array.shape),
                       "data": data})


def _as_text(value):
    if isinstance(value, list):
        return [_as_text(item) for item in value]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _parse_inputs(specs, dtypes):
    dtype_of = dict(spec.split("=", 1) for spec in dtypes or [])
    inputs = {}
    for spec in specs or []:
        if "=" not in spec:
            raise SystemExit("chorus-client: --input wants NAME=FILE.npy or NAME=JSON, "
                             f"got {spec!r}")
        name, value = spec.split("=", 1)
        if value.endswith(".npy"):
            array = np.load(value)
        else:
            array = _parse_json_input(value, dtype_of.get(name))
        inputs[name] = array
    return inputs


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chorus-client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="localhost:8001")
    parser.add_argument("--token", help="bearer token")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds")
    commands = parser.add_subparsers(dest="command", required=True)
    infer = commands.add_parser("infer", help="run a model")
    infer.add_argument("model")
    infer.add_argument("--input", action="append", help="NAME=FILE.npy or NAME=JSON")
    infer.add_argument("--dtype", action="append",
                       help="NAME=DATATYPE for JSON inputs (default FP32, BYTES for strings)")
    infer.add_argument("--version", default="")
    infer.add_argument("--output", action="append", help="save NAME=FILE.npy")
    commands.add_parser("list", help="the repository's models")
    for name in ("load", "unload", "metadata"):
        commands.add_parser(name).add_argument("model")
    ready = commands.add_parser("ready", help="server (or model) readiness")
    ready.add_argument("model", nargs="?")
    stats = commands.add_parser("stats", help="model statistics")
    stats.add_argument("model", nargs="?", default="")
    return parser


def _infer(client: Client, args) -> None:
    outputs = client.infer(args.model, _parse_inputs(args.input, args.dtype),
                           version=args.version, timeout=args.timeout)
    saves = dict(spec.split("=", 1) for spec in args.output or [])
    for name, array in outputs.items():
        if name in saves:
            np.save(saves[name], array)
        print(_output_json(name, array))


def _metadata_json(client: Client, model: str) -> str:
    meta = client.metadata(model)
    return json.dumps({
        "name": meta.name, "versions": list(meta.versions), "platform": meta.platform,
        "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                   for t in meta.inputs],
        "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                    for t in meta.outputs]}, indent=2)


def _run(client: Client, args) -> int:
    """The command's call; its exit code (ClientError propagates)."""
    if args.command == "infer":
        _infer(client, args)
    elif args.command == "list":
        for model in client.models():
            print(f"{model.name:24} {model.version or '-':8} {model.state:12} "
                  f"{model.reason}")
    elif args.command == "load":
        client.load(args.model)
        print(f"loaded {args.model}")
    elif args.command == "unload":
        client.unload(args.model)
        print(f"unloaded {args.model}")
    elif args.command == "metadata":
        print(_metadata_json(client, args.model))
    elif args.command == "ready":
        ok = client.ready(args.model)
        print("ready" if ok else "not ready")
        return 0 if ok else 1
    elif args.command == "stats":
        print(client.statistics(args.model))
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    with Client(args.server, token=args.token) as client:
        try:
            return _run(client, args)
        except ClientError as e:
            print(f"chorus-client: {e}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
