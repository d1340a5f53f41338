"""Generates the parts of chorus' Python package that come from elsewhere in
the tree: the package-format constants (from the C++ header that defines
them) and the gRPC/protobuf modules (from proto/). Used by CMake and by
setup.py (pip), so both make the same files.

    python build_support.py constants HEADER OUTPUT
    python build_support.py protos PROTO_ROOT OUTPUT_DIR PROTO...
    python build_support.py private-pool MODULE_PB2.py...
"""

import os
import re
import shutil
import subprocess
import sys

_CONSTANT = re.compile(r"^inline constexpr [a-z_0-9:]+ k([A-Za-z0-9]+)(\[\])? = (.*);")


def constants_module(header: str) -> str:
    """`inline constexpr <type> kSomeName = <value>;` lines -> `SOME_NAME = <value>` lines."""
    lines = [f'"""Generated from {os.path.basename(header)}: do not edit."""', ""]
    with open(header, encoding="utf-8") as f:
        for line in f:
            match = _CONSTANT.match(line)
            if match:
                name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", match.group(1)).upper()
                lines.append(f"{name} = {match.group(3)}")
    return "\n".join(lines) + "\n"


def write_if_changed(path: str, text: str) -> None:
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def generate_protos(proto_root: str, output_dir: str, protos) -> None:
    """protoc with the gRPC Python plugin (Debian's, the ones CMake uses): _pb2.py,
    _pb2.pyi (types for checkers) and _pb2_grpc.py per proto."""
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        raise RuntimeError("generating chorus' gRPC modules needs protoc and grpc_python_plugin "
                           "(Debian: protobuf-compiler, protobuf-compiler-grpc)")
    os.makedirs(output_dir, exist_ok=True)
    subprocess.run([protoc, "-I", proto_root, f"--python_out={output_dir}",
                    f"--pyi_out={output_dir}", f"--grpc_python_out={output_dir}",
                    f"--plugin=protoc-gen-grpc_python={plugin}", *protos], check=True)
    for proto in protos:
        use_private_pool(os.path.join(output_dir, proto[:-len(".proto")] + "_pb2.py"))


_DEFAULT_POOL = "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile("
_PRIVATE_POOL = ("from chorus._proto_pool import POOL as _chorus_pool\n"
                 "DESCRIPTOR = _chorus_pool.AddSerializedFile(")


def use_private_pool(pb2_path: str) -> None:
    """Registers a generated module's messages in chorus' own descriptor pool
    (chorus/_proto_pool.py says why)."""
    with open(pb2_path, encoding="utf-8") as f:
        text = f.read()
    if _PRIVATE_POOL in text:
        return
    if _DEFAULT_POOL not in text:
        raise RuntimeError(f"{pb2_path}: protoc's output changed; adapt use_private_pool")
    write_if_changed(pb2_path, text.replace(_DEFAULT_POOL, _PRIVATE_POOL))


def main(argv) -> int:
    if len(argv) == 3 and argv[0] == "constants":
        write_if_changed(argv[2], constants_module(argv[1]))
        return 0
    if len(argv) >= 2 and argv[0] == "private-pool":
        for path in argv[1:]:
            use_private_pool(path)
        return 0
    if len(argv) >= 4 and argv[0] == "protos":
        generate_protos(argv[1], argv[2], argv[3:])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
