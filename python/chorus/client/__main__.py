"""chorus-client: call a chorus server (any Open Inference Protocol server) from the shell.

  chorus-client infer mlp --input x=inputs.npy            # numpy file
  chorus-client infer mlp --input 'x=[[1, 2, 3, 4]]' --dtype x=FP32   # JSON
  chorus-client list | load NAME | unload NAME | metadata NAME | ready [NAME] | stats [NAME]

Server address: --server HOST:PORT (default localhost:8001); --token for
bearer authentication. Exit codes: 0 success, 1 the server refused the call,
2 bad command line.
"""

import argparse
import json
import sys

import numpy as np

from chorus.client.client import Client, ClientError, numpy_dtype


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
            array = np.array(json.loads(value), dtype=numpy_dtype(dtype_of.get(name, "FP32")))
        inputs[name] = array
    return inputs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="chorus-client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="localhost:8001")
    parser.add_argument("--token", help="bearer token")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds")
    commands = parser.add_subparsers(dest="command", required=True)
    infer = commands.add_parser("infer", help="run a model")
    infer.add_argument("model")
    infer.add_argument("--input", action="append", help="NAME=FILE.npy or NAME=JSON")
    infer.add_argument("--dtype", action="append", help="NAME=DATATYPE for JSON inputs (FP32)")
    infer.add_argument("--version", default="")
    infer.add_argument("--output", action="append", help="save NAME=FILE.npy")
    commands.add_parser("list", help="the repository's models")
    for name in ("load", "unload", "metadata"):
        commands.add_parser(name).add_argument("model")
    ready = commands.add_parser("ready", help="server (or model) readiness")
    ready.add_argument("model", nargs="?")
    stats = commands.add_parser("stats", help="model statistics")
    stats.add_argument("model", nargs="?", default="")
    args = parser.parse_args(argv)

    with Client(args.server, token=args.token) as client:
        try:
            if args.command == "infer":
                outputs = client.infer(args.model, _parse_inputs(args.input, args.dtype),
                                       version=args.version, timeout=args.timeout)
                saves = dict(spec.split("=", 1) for spec in args.output or [])
                for name, array in outputs.items():
                    if name in saves:
                        np.save(saves[name], array)
                    print(json.dumps({"name": name, "datatype": str(array.dtype),
                                      "shape": list(array.shape), "data": array.tolist()}))
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
                meta = client.metadata(args.model)
                print(json.dumps({
                    "name": meta.name, "versions": list(meta.versions), "platform": meta.platform,
                    "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                               for t in meta.inputs],
                    "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                                for t in meta.outputs]}, indent=2))
            elif args.command == "ready":
                ok = client.ready(args.model)
                print("ready" if ok else "not ready")
                return 0 if ok else 1
            elif args.command == "stats":
                print(client.statistics(args.model))
        except ClientError as e:
            print(f"chorus-client: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
