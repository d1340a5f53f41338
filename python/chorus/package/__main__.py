"""chorus-package: make, inspect and check chorus model packages.

  chorus-package create OUT.pt --module mymodel:build --example-inputs mymodel:example_inputs
  chorus-package create OUT.pt --pickle model.pt --example-inputs inputs.pt --name mlp
  chorus-package create OUT.pt --from-package stock.pt --example-inputs inputs.pt
  chorus-package create OUT.pt --from-torchscript model.ts --example-inputs inputs.pt
  chorus-package create OUT.pt --from-export model.pt2 --example-inputs inputs.pt

--from-package takes the archive's one pickle, or --resource PACKAGE/RESOURCE.
  chorus-package inspect OUT.pt      (validates it as the server's reader does, then lists it)
  chorus-package check OUT.pt
  chorus-package keygen NAME         (NAME.key.pem, private; NAME.pub.pem, for --trusted-keys)
  chorus-package sign OUT.pt --key NAME.key.pem

Exit codes: 0 success, 1 check found a difference or a load failure,
2 bad command line, 3 the model or archive is unusable. Every failure is one line
naming the cause; --debug shows the traceback.
"""

import argparse
import importlib
import json
import os
import struct
import subprocess
import sys
import zipfile

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_UNUSABLE = 0, 1, 2, 3


def _load_callable(spec: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ToolError(f"expected MODULE:NAME, got {spec!r}", EXIT_USAGE)
    return getattr(importlib.import_module(module_name), attr)


def _example_inputs(spec: str):
    """The inputs, one value each: a tuple or list of them, or one value alone (a tensor,
    or a string tensor: a list of str is one input, as a model's outputs read)."""
    import torch
    from chorus.package.strings import is_string_tensor
    if spec.endswith((".pt", ".pth")):
        if not os.path.exists(spec):
            raise ToolError(f"the example inputs file {spec} does not exist")
        value = torch.load(spec)
    else:
        value = _load_callable(spec)()
    if isinstance(value, tuple) or (isinstance(value, list) and not is_string_tensor(value)):
        return tuple(value)
    return (value,)


def _split(text):
    return [t for t in (text or "").split(",") if t]



class ToolError(Exception):
    """A failure the user can fix: printed as one line, with an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_UNUSABLE):
        super().__init__(message)
        self.exit_code = exit_code


def _load_model(args):
    """(model, importer or None, source, default name) from the create command's source."""
    import torch
    from chorus.package import converters
    if args.resource and not args.from_package:
        raise ToolError("--resource goes with --from-package", EXIT_USAGE)
    if args.module:
        factory = _load_callable(args.module)
        try:
            kwargs = json.loads(args.factory_kwargs)
        except json.JSONDecodeError as e:
            raise ToolError(f"--factory-kwargs is not JSON: {e}", EXIT_USAGE) from e
        return (factory(**kwargs), None, args.module, args.module.partition(":")[0])
    path = args.pickle or args.from_package or args.from_torchscript or args.from_export
    if not os.path.exists(path):
        raise ToolError(f"{path} does not exist")
    stem = os.path.splitext(os.path.basename(path))[0]
    if args.from_package:
        model, importer = converters.load_stock_package(path, args.resource or "")
        return model, importer, os.path.basename(path), stem
    if args.from_torchscript:
        return converters.load_torchscript(path), None, os.path.basename(path), stem
    if args.from_export:
        return converters.load_export(path), None, os.path.basename(path), stem
    kind = converters.describe_zip(path)
    if kind not in ("torch.save file", "not a zip file"):
        converters.expect_kind(path, "torch.save file", "--pickle")
    # A whole pickled module (the user names the file): full unpickling.
    return torch.load(path, weights_only=False), None, os.path.basename(path), stem


def cmd_create(args) -> int:
    from chorus.package.create import (PackagingError, PackagingRules, create_package,
                                       error_summary)
    from chorus.package.converters import FormatError
    sys.path.insert(0, os.path.abspath(args.path))
    try:
        model, importer, source, default_name = _load_model(args)
    except FormatError as e:
        raise ToolError(str(e)) from e
    try:
        example_inputs = _example_inputs(args.example_inputs)
    except ToolError:
        raise
    except Exception as e:
        raise ToolError(f"cannot read the example inputs {args.example_inputs}: "
                        f"{error_summary(e)}") from e
    rules = PackagingRules(intern=args.intern or ["**"], extern=args.extern or [],
                           mock=args.mock or [])
    try:
        manifest = create_package(
            args.output, model, example_inputs, name=args.name or default_name,
            version=args.model_version, rules=rules, batchable=not args.no_batching,
            batch_dim=args.batch_dim, max_batch_size=args.max_batch_size, device=args.device,
            input_names=_split(args.input_names) or None,
            output_names=_split(args.output_names) or None, source=source,
            progress=not args.quiet, importer=importer)
    except PackagingError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise ToolError("cannot package: " + "; ".join(lines)) from e
    size = os.path.getsize(args.output)
    print(f"wrote {args.output}: model {manifest['model']['name']} "
          f"version {manifest['model']['version']}, {len(manifest['files'])} records, "
          f"{size / (1 << 20):.1f} MiB")
    return EXIT_OK


def _data_offset(archive_file, info: zipfile.ZipInfo) -> int:
    archive_file.seek(info.header_offset + 26)
    name_length, extra_length = struct.unpack("<HH", archive_file.read(4))
    return info.header_offset + 30 + name_length + extra_length


def _validate(path: str, trusted_keys: str = "") -> dict:
    """The C++ archive reader's checks (structure, CRCs, manifest, every record's
    sha256), as the server runs them: its report ({"ok", "kind", "manifest"}), or
    ToolError naming what is wrong."""
    if not os.path.exists(path):
        raise ToolError(f"{path} does not exist")
    try:
        binary = _check_binary()
    except FileNotFoundError as e:
        raise ToolError(str(e)) from e
    command = [binary, path, "--validate-only"]
    if trusted_keys:
        command += ["--trusted-keys", trusted_keys]
    result = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {"ok": False, "error": result.stderr.strip()}
    if not report["ok"]:
        raise ToolError(f"{path} is not a valid archive: {report['error']}")
    return report


def cmd_inspect(args) -> int:
    from chorus.package.manifest import ManifestError, read_manifest
    report = _validate(args.archive, args.trusted_keys)
    try:
        manifest = read_manifest(args.archive)
    except ManifestError as e:
        manifest = None
        note = str(e)
    except (zipfile.BadZipFile, OSError) as e:
        print(f"chorus-package: {args.archive}: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    with zipfile.ZipFile(args.archive) as archive, open(args.archive, "rb") as raw:
        rows = [(i.filename, i.file_size, i.compress_type == zipfile.ZIP_STORED,
                 _data_offset(raw, i)) for i in archive.infolist()]
    if args.json:
        print(json.dumps({"kind": report["kind"], "manifest": manifest, "records": [
            {"name": n, "size": s, "stored": st, "data_offset": o} for n, s, st, o in rows]},
            indent=2))
        return EXIT_OK
    print(f"kind     {report['kind']}")
    if args.trusted_keys:
        print(f"signed   by a key trusted in {args.trusted_keys}")
    if manifest is None:
        print(f"no chorus manifest: {note}")
    else:
        print(f"model    {manifest['model']['name']} version {manifest['model']['version']}")
        print(f"entry    {json.dumps(manifest['entry_point'])}")
        for kind in ("inputs", "outputs"):
            for spec in manifest[kind]:
                print(f"{kind[:-1]:8} {spec['name']}: {spec['dtype']}{spec['shape']}")
        print(f"batching {json.dumps(manifest['batching'])}")
        print(f"device   {manifest['device']}")
    print(f"\n{'size':>12}  {'stored':6}  {'aligned':7}  name")
    for name, size, stored, offset in rows:
        print(f"{size:12d}  {'yes' if stored else 'no':6}  "
              f"{'yes' if offset % 64 == 0 else 'no':7}  {name}")
    print(f"{sum(r[1] for r in rows):12d}  total, {len(rows)} records")
    return EXIT_OK


def _check_binary() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("CHORUS_BIN_DIR", ""),
                  os.path.normpath(os.path.join(here, "..", "..", "..", "..", "..", "bin"))]
    for directory in candidates:
        path = os.path.join(directory, "chorus-package-check")
        if directory and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("chorus-package-check not found (set CHORUS_BIN_DIR)")


def cmd_check(args) -> int:
    try:
        binary = _check_binary()
    except FileNotFoundError as e:
        print(f"chorus-package: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    command = [binary, args.archive, "--atol", str(args.atol), "--rtol", str(args.rtol)]
    result = subprocess.run(command, capture_output=True, text=True)
    report = None
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("{"):
            report = json.loads(line)
            break
    if report is None:
        print(f"chorus-package: check failed to run:\n{result.stderr}", file=sys.stderr)
        return EXIT_CHECK_FAILED
    if report["ok"]:
        print(f"ok: {args.archive} loads in a fresh chorus interpreter and reproduces its "
              f"{report['outputs']} example output(s) (max abs diff {report['max_abs_diff']:.3g})")
        return EXIT_OK
    print(f"FAILED: {args.archive}: {report['error']}", file=sys.stderr)
    return EXIT_CHECK_FAILED


def cmd_keygen(args) -> int:
    from chorus.package import signing
    try:
        private, public, ident = signing.keygen(args.name)
    except signing.SigningError as e:
        raise ToolError(str(e)) from e
    print(f"key {ident}: private {private} (keep it secret), public {public} (copy it into "
          "the servers' --trusted-keys directory)")
    return EXIT_OK


def cmd_sign(args) -> int:
    from chorus.package import signing
    report = _validate(args.archive)
    if not report.get("manifest"):
        raise ToolError(f"{args.archive} is a {report['kind']} without a chorus manifest: only "
                        "chorus packages are signed (convert it first: chorus-package create "
                        "--from-...)")
    try:
        ident = signing.sign(args.archive, args.key, args.output)
    except signing.SigningError as e:
        raise ToolError(str(e)) from e
    print(f"signed {args.output or args.archive} with key {ident}")
    return EXIT_OK


def _add_create(commands) -> argparse.ArgumentParser:
    create = commands.add_parser("create", help="package a model")
    create.add_argument("output", help="archive to write")
    source = create.add_mutually_exclusive_group(required=True)
    source.add_argument("--module", help="MODULE:FACTORY building the model")
    source.add_argument("--pickle", help="an nn.Module saved with torch.save")
    source.add_argument("--from-package", metavar="ARCHIVE",
                        help="a stock torch.package archive (its packed code is kept)")
    source.add_argument("--from-torchscript", metavar="FILE", help="a torch.jit.save file")
    source.add_argument("--from-export", metavar="FILE", help="a torch.export.save program")
    create.add_argument("--resource", help="with --from-package: the model's pickle, "
                                           "PACKAGE/RESOURCE (default: the archive's one)")
    create.add_argument("--factory-kwargs", default="{}", help="JSON keyword arguments")
    create.add_argument("--example-inputs", required=True,
                        help="MODULE:FUNCTION returning the inputs, or a torch.save'd file: "
                             "a tuple or list of tensors and string tensors (nested lists of "
                             "str); a tensor or a list of str alone is one input")
    create.add_argument("--path", default=".", help="directory holding the model's code")
    create.add_argument("--name", help="model name (default: the module or file name)")
    create.add_argument("--model-version", default="1")
    create.add_argument("--intern", action="append", help="module pattern to include")
    create.add_argument("--extern", action="append", help="module pattern to leave outside")
    create.add_argument("--mock", action="append", help="module pattern to replace by a mock")
    create.add_argument("--no-batching", action="store_true", help="the model cannot batch")
    create.add_argument("--batch-dim", type=int, default=0)
    create.add_argument("--max-batch-size", type=int, default=32)
    create.add_argument("--device", default="cpu",
                        help='where the model runs: "cpu", "cuda", "cuda:N" (config.json may '
                             'override it)')
    create.add_argument("--input-names", help="comma-separated input names")
    create.add_argument("--output-names", help="comma-separated output names")
    create.add_argument("--quiet", action="store_true", help="no progress output")
    create.set_defaults(run=cmd_create)
    return create


def _add_archive_commands(commands) -> list:
    """inspect, check, keygen and sign: their parsers, in that order."""
    inspect = commands.add_parser("inspect", help="print manifest, records and sizes")
    inspect.add_argument("archive")
    inspect.add_argument("--json", action="store_true", help="machine-readable output")
    inspect.add_argument("--trusted-keys", default="", metavar="DIR",
                         help="also require a signature by a key in DIR, as the server does")
    inspect.set_defaults(run=cmd_inspect)

    check = commands.add_parser("check", help="load in a fresh chorus interpreter and "
                                              "compare the example outputs")
    check.add_argument("archive")
    check.add_argument("--atol", type=float, default=1e-5)
    check.add_argument("--rtol", type=float, default=1e-4)
    check.set_defaults(run=cmd_check)

    keygen = commands.add_parser("keygen", help="make an Ed25519 key pair for signing")
    keygen.add_argument("name", help="writes NAME.key.pem (private) and NAME.pub.pem")
    keygen.set_defaults(run=cmd_keygen)

    sign = commands.add_parser("sign", help="sign a chorus package (its manifest's digest)")
    sign.add_argument("archive")
    sign.add_argument("--key", required=True, help="the private key (PEM, Ed25519)")
    sign.add_argument("--output", default="", help="write the signed archive here "
                                                   "(default: replace ARCHIVE)")
    sign.set_defaults(run=cmd_sign)
    return [inspect, check, keygen, sign]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chorus-package", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for command in [_add_create(commands), *_add_archive_commands(commands)]:
        command.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except ToolError as e:
        if args.debug:
            raise
        print(f"chorus-package: {e}", file=sys.stderr)
        return e.exit_code
    except Exception as e:  # the model's own code failed: one line, the cause
        if args.debug:
            raise
        from chorus.package.create import error_summary
        print(f"chorus-package: {error_summary(e)} (--debug shows where)", file=sys.stderr)
        return EXIT_UNUSABLE


if __name__ == "__main__":
    sys.exit(main())
