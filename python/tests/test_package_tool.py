"""chorus-package, end to end: real archives, real subprocesses, real torch."""

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch
from torch.package import PackageImporter

BIN_DIR = os.environ["CHORUS_BIN_DIR"]
TOOL = os.path.join(BIN_DIR, "chorus-package")

MODEL_SOURCE = textwrap.dedent("""
    import torch

    class TwoLayer(torch.nn.Module):
        def __init__(self, hidden=16):
            super().__init__()
            self.first = torch.nn.Linear(4, hidden)
            self.second = torch.nn.Linear(hidden, 3)

        def forward(self, features):
            return self.second(torch.relu(self.first(features)))

    class Noisy(TwoLayer):
        def forward(self, features):
            return super().forward(features) + torch.randn(1)

    def build(hidden=16):
        torch.manual_seed(0)
        return TwoLayer(hidden)

    def build_noisy():
        torch.manual_seed(0)
        return Noisy()

    def build_big():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 6_000_000 // 4)

    def example_inputs():
        torch.manual_seed(1)
        return (torch.randn(2, 4),)
""")


def run(*args, cwd):
    return subprocess.run([TOOL, *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "mymodel.py").write_text(MODEL_SOURCE)
    return tmp_path


def create(workdir, *extra, name="model.pt", factory="mymodel:build"):
    result = run("create", name, "--module", factory, "--example-inputs",
                 "mymodel:example_inputs", "--quiet", *extra, cwd=workdir)
    assert result.returncode == 0, result.stderr
    return workdir / name


def test_create_writes_manifest_with_signature_and_hashes(workdir):
    path = create(workdir, "--name", "two_layer", "--model-version", "7",
                  "--factory-kwargs", '{"hidden": 8}')
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        manifest = json.loads(archive.read("model/.data/chorus/manifest.json"))
    assert manifest["model"] == {"name": "two_layer", "version": "7"}
    assert manifest["inputs"] == [{"name": "features", "dtype": "float32", "shape": [-1, 4]}]
    assert manifest["outputs"] == [{"name": "output", "dtype": "float32", "shape": [-1, 3]}]
    assert manifest["batching"] == {"batchable": True, "batch_dim": 0, "max_batch_size": 32}
    assert manifest["source"] == "mymodel:build"
    # Every record but the manifest and what torch's zip writer adds itself
    # (.data/version; byteorder and .data/serialization_id on torch 2.x) is hashed.
    hashed = set(manifest["files"])
    assert hashed == {n.split("/", 1)[1] for n in names} - {
        ".data/chorus/manifest.json", ".data/version", "byteorder", ".data/serialization_id"}
    assert "mymodel.py" in hashed  # the user's code is interned
    extern = zipfile.ZipFile(path).read("model/.data/extern_modules").decode().split()
    assert "torch" in extern and "mymodel" not in extern


def test_stock_importer_loads_the_archive_and_reproduces_the_outputs(workdir):
    path = create(workdir)
    sys.modules.pop("mymodel", None)
    manifest = json.loads(zipfile.ZipFile(path).read("model/.data/chorus/manifest.json"))
    entry = manifest["entry_point"]
    model = PackageImporter(str(path)).load_pickle(entry["package"], entry["resource"])
    with zipfile.ZipFile(path) as archive:
        inputs = torch.load(archive.open("model/.data/chorus/example_inputs.pt"))
        outputs = torch.load(archive.open("model/.data/chorus/example_outputs.pt"))
    with torch.no_grad():
        assert torch.equal(model(*inputs), outputs[0])


def test_check_passes_for_a_faithful_package(workdir):
    path = create(workdir)
    result = run("check", str(path), cwd=workdir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reproduces its 1 example output" in result.stdout


def test_check_fails_when_outputs_differ(workdir):
    path = create(workdir, factory="mymodel:build_noisy", name="noisy.pt")
    result = run("check", str(path), cwd=workdir)
    assert result.returncode == 1
    assert "output 0 differs" in result.stderr


def test_check_rejects_a_tampered_archive(workdir):
    path = create(workdir)
    data = bytearray(path.read_bytes())
    at = data.find(b"class TwoLayer")
    data[at:at + 5] = b"klass"  # same length: the zip stays consistent but the CRC breaks
    path.write_bytes(bytes(data))
    result = run("check", str(path), cwd=workdir)
    assert result.returncode == 1
    assert "bad CRC" in result.stderr


def test_pickled_module_input(workdir):
    sys.path.insert(0, str(workdir))
    try:
        import mymodel
        torch.save(mymodel.build(), workdir / "saved.pt")
        torch.save(mymodel.example_inputs(), workdir / "inputs.pt")
    finally:
        sys.path.remove(str(workdir))
    result = run("create", "from_pickle.pt", "--pickle", "saved.pt", "--example-inputs",
                 "inputs.pt", "--quiet", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert run("check", "from_pickle.pt", cwd=workdir).returncode == 0


def test_inspect_lists_manifest_and_aligned_records(workdir):
    path = create(workdir)
    result = run("inspect", str(path), cwd=workdir)
    assert result.returncode == 0
    assert "model    mymodel version 1" in result.stdout
    assert "input    features: float32[-1, 4]" in result.stdout
    report = json.loads(run("inspect", str(path), "--json", cwd=workdir).stdout)
    storages = [r for r in report["records"] if r["name"].endswith(".storage")]
    assert storages and all(r["stored"] and r["data_offset"] % 64 == 0 for r in storages)
    assert report["kind"] == "torch.package archive"


def test_inspect_says_what_a_stock_file_is(workdir):
    model = torch.nn.Linear(4, 2)
    torch.jit.script(model).save(workdir / "script.pt")
    torch.export.save(torch.export.export(model, (torch.zeros(1, 4),)), workdir / "program.pt2")
    for name, kind in (("script.pt", "TorchScript file"), ("program.pt2", "torch.export program")):
        result = run("inspect", name, cwd=workdir)
        assert result.returncode == 0, result.stderr
        assert f"kind     {kind}" in result.stdout
        assert "no chorus manifest" in result.stdout


def test_progress_is_shown_for_large_weights(workdir):
    result = run("create", "big.pt", "--module", "mymodel:build_big", "--example-inputs",
                 "mymodel:example_inputs", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert "MiB" in result.stderr


def test_exit_codes(workdir):
    assert run("--help", cwd=workdir).returncode == 0
    assert run("create", cwd=workdir).returncode == 2  # missing arguments
    (workdir / "localdep.py").write_text("VALUE = 1\n")
    (workdir / "needy.py").write_text(MODEL_SOURCE + "\nimport localdep\n")
    result = run("create", "needy.pt", "--module", "needy:build", "--example-inputs",
                 "needy:example_inputs", "--intern", "needy", "--quiet", cwd=workdir)
    assert result.returncode == 3
    assert "localdep" in result.stderr
    assert run("inspect", "missing.pt", cwd=workdir).returncode == 3
    assert run("check", "missing.pt", cwd=workdir).returncode == 1


STOCK_EXPORTS = os.path.join(os.path.dirname(__file__), "..", "..", "server", "tests",
                             "stock_exports.py")


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    """Files made by stock torch tools in a process that never imports chorus."""
    out = tmp_path_factory.mktemp("stock")
    subprocess.run([sys.executable, STOCK_EXPORTS, str(out)], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    return out


@pytest.mark.parametrize("option,file", [("--from-package", "stock_package.pt"),
                                         ("--from-torchscript", "torchscript.pt"),
                                         ("--from-export", "export.pt2")])
def test_conversions_keep_what_the_exporting_process_computed(stock, option, file):
    out = stock / f"converted-{file}.pt"
    result = run("create", str(out), option, str(stock / file), "--example-inputs",
                 str(stock / "inputs.pt"), "--name", "tiny", "--quiet", cwd=stock)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no warnings, no tracebacks
    check = run("check", str(out), cwd=stock)
    assert check.returncode == 0, check.stderr
    manifest = json.loads(run("inspect", str(out), "--json", cwd=stock).stdout)["manifest"]
    assert manifest["inputs"] == [{"name": "image", "dtype": "float32", "shape": [-1, 3, 8, 8]}]
    # The package alone (its model class, for the stock archive, exists only inside it)
    # reproduces the exporting process's outputs.
    expected = torch.load(stock / "expected.pt")
    importer = PackageImporter(str(out))
    model = importer.load_pickle(manifest["entry_point"]["package"],
                                 manifest["entry_point"]["resource"])
    with torch.no_grad():
        diff = (model(expected["image"]) - expected["logits"]).abs().max().item()
    assert diff <= 1e-5, diff


BAD_INPUTS = [
    (["--from-package", "notzip.pt"], "notzip.pt is not a zip file, not a torch.package archive "
                                      "(--from-package)"),
    (["--from-package", "plain.zip"], "plain.zip is a zip file, not a torch.package archive"),
    (["--from-package", "torchscript.pt"], "torchscript.pt is a TorchScript file, not a "
                                           "torch.package archive (--from-package); use "
                                           "--from-torchscript"),
    (["--pickle", "torchscript.pt"], "use --from-torchscript"),
    (["--from-export", "stock_package.pt"], "use --from-package"),
    (["--from-package", "stock_package.pt", "--resource", "model/nothing.pkl"],
     "stock_package.pt has no pickle model/nothing.pkl (it has: model/model.pkl)"),
    (["--from-package", "missing.pt"], "missing.pt does not exist"),
    (["--from-torchscript", "torchscript.pt", "--example-inputs", "wrong_inputs.pt"],
     "cannot package: the model fails on the example inputs (torch.float32[2, 4]): "
     "RuntimeError: Expected 3D (unbatched) or 4D (batched) input to conv2d"),
    (["--from-export", "export.pt2", "--example-inputs", "wrong_inputs.pt"],
     "the model fails on the example inputs (torch.float32[2, 4]): AssertionError: Guard failed"),
    (["--from-torchscript", "torchscript.pt", "--example-inputs", "nothing.pt"],
     "the example inputs file nothing.pt does not exist"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS, ids=[" ".join(a[:2]) for a, _ in BAD_INPUTS])
def test_every_bad_input_is_one_line_naming_the_cause(stock, args, message):
    (stock / "notzip.pt").write_text("hello\n")
    with zipfile.ZipFile(stock / "plain.zip", "w") as plain:
        plain.writestr("plain/readme.txt", "not a package")
    torch.save([torch.zeros(2, 4)], stock / "wrong_inputs.pt")
    if "--example-inputs" not in args:
        args = [*args, "--example-inputs", "inputs.pt"]
    result = run("create", "out.pt", *args, "--quiet", cwd=stock)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chorus-package: "), result.stderr
    assert message in lines[0], lines[0]
    with_debug = run("create", "out.pt", *args, "--quiet", "--debug", cwd=stock)
    assert with_debug.returncode != 0 and "Traceback" in with_debug.stderr


def test_inspect_validates_what_it_lists(workdir):
    path = create(workdir)
    data = bytearray(path.read_bytes())
    # Flip a byte inside the stored model pickle: the zip stays readable, its CRC does not.
    offset = data.find(b"chorus_model/model.pkl") + 200
    data[offset] ^= 0xFF
    (workdir / "corrupt.pt").write_bytes(bytes(data))
    (workdir / "truncated.pt").write_bytes(path.read_bytes()[:-100])
    for name, message in (("corrupt.pt", "not a valid archive"),
                          ("truncated.pt", "not a valid archive: INVALID_ARGUMENT: truncated")):
        result = run("inspect", name, cwd=workdir)
        assert result.returncode == 3, (name, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (name, result.stderr)
        assert result.stdout == ""
    assert run("inspect", str(path), cwd=workdir).returncode == 0


# String tensors (dtype "string", BYTES on the wire): models take and return nested lists of str.
STRING_MODEL_SOURCE = textwrap.dedent("""
    import torch

    class Upper(torch.nn.Module):
        def forward(self, words):
            return [w.upper() for w in words], torch.tensor([len(w) for w in words])

    class Mangled(torch.nn.Module):
        # Its module's name, which torch.package mangles where the archive is loaded:
        # the check's outputs differ from those recorded when packaging.
        def forward(self, words):
            return [w + " from " + __name__ for w in words]

    def pairs(words, scores):
        return {"joined": [[w + "!", w + "?"] for w in words], "doubled": scores * 2,
                "title": "pairs"}

    def build():
        return Upper()

    def build_mangled():
        return Mangled()

    def example_inputs():
        return ["chorus", "héllo", ""]  # a list of str alone is one input

    def ragged_inputs():
        return ([["a", "b"], ["c"]],)
""")


@pytest.fixture
def string_workdir(tmp_path):
    (tmp_path / "strmodel.py").write_text(STRING_MODEL_SOURCE)
    return tmp_path


def test_string_model_packages_inspects_and_checks(string_workdir):
    result = run("create", "upper.pt", "--module", "strmodel:build", "--example-inputs",
                 "strmodel:example_inputs", "--quiet", cwd=string_workdir)
    assert result.returncode == 0, result.stderr
    path = string_workdir / "upper.pt"
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read("upper/.data/chorus/manifest.json"))
        inputs = torch.load(archive.open("upper/.data/chorus/example_inputs.pt"))
        outputs = torch.load(archive.open("upper/.data/chorus/example_outputs.pt"))
    assert manifest["inputs"] == [{"name": "words", "dtype": "string", "shape": [-1]}]
    assert manifest["outputs"] == [{"name": "output0", "dtype": "string", "shape": [-1]},
                                   {"name": "output1", "dtype": "int64", "shape": [-1]}]
    assert inputs == [["chorus", "héllo", ""]]
    assert outputs[0] == ["CHORUS", "HÉLLO", ""]
    assert outputs[1].tolist() == [6, 5, 0]
    shown = run("inspect", str(path), cwd=string_workdir)
    assert shown.returncode == 0, shown.stderr
    assert "input    words: string[-1]\n" in shown.stdout
    assert "output   output0: string[-1]\noutput   output1: int64[-1]\n" in shown.stdout
    check = run("check", str(path), cwd=string_workdir)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "reproduces its 2 example output(s) (max abs diff 0)" in check.stdout


def test_check_names_the_first_string_that_differs(string_workdir):
    result = run("create", "mangled.pt", "--module", "strmodel:build_mangled",
                 "--example-inputs", "strmodel:example_inputs", "--quiet", cwd=string_workdir)
    assert result.returncode == 0, result.stderr
    check = run("check", "mangled.pt", cwd=string_workdir)
    assert check.returncode == 1
    assert ("output 0 differs at [0]: got b'chorus from <torch_package_0>.strmodel', "
            "recorded b'chorus from strmodel'") in check.stderr, check.stderr


def test_a_ragged_example_input_is_refused_in_one_line(string_workdir):
    result = run("create", "ragged.pt", "--module", "strmodel:build", "--example-inputs",
                 "strmodel:ragged_inputs", "--quiet", cwd=string_workdir)
    assert result.returncode == 3
    assert result.stderr == (
        "chorus-package: cannot package: input 'words' is ragged: [0] has shape [2] but [1] "
        "has shape [1] (a string tensor is a rectangular nested list)\n")
    assert not (string_workdir / "ragged.pt").exists()


def _upper(words):
    return [w.upper() for w in words]


@pytest.mark.parametrize("inputs,message", [
    ([["a", "b"], ["c"]], "input 'words' is ragged: [0] has shape [2] but [1] has shape [1]"),
    ([["a"], "b"], "input 'words' is ragged: [0] has shape [1] but [1] has shape []"),
    (["a", b"b"], "input 'words': element [1] is bytes, not str"),
    ([["a", 1]], "input 'words': element [0][1] is int, not str"),
])
def test_string_example_inputs_must_be_rectangular_lists_of_str(tmp_path, inputs, message):
    from chorus.package.create import PackagingError, create_package
    with pytest.raises(PackagingError) as error:
        create_package(str(tmp_path / "out.pt"), _upper, [inputs], name="upper", progress=False)
    assert message in str(error.value)


@pytest.mark.parametrize("result,message", [
    ([["A", "B"], ["C"]], "output 'output' is ragged: [0] has shape [2] but [1] has shape [1]"),
    ((["A"], ["B", 2]), "output 'output1': element [1] is int, not str or bytes"),
])
def test_string_outputs_must_be_rectangular_lists_of_str_or_bytes(tmp_path, result, message):
    from chorus.package.create import PackagingError, create_package
    with pytest.raises(PackagingError) as error:
        create_package(str(tmp_path / "out.pt"), lambda words: result, [["a"]], name="m",
                       progress=False)
    assert message in str(error.value)


def test_string_tensors_batch_along_dim_zero_only(tmp_path):
    from chorus.package.create import PackagingError, create_package
    with pytest.raises(PackagingError) as error:
        create_package(str(tmp_path / "out.pt"), _upper, [[["a"], ["b"]]], name="upper",
                       batch_dim=1, progress=False)
    assert "input 'words' is a string tensor: it batches along dim 0 only (batch_dim is 1)" in (
        str(error.value))


def test_string_signatures_follow_batching_and_dynamic_axes(string_workdir):
    from chorus.package.create import create_package
    sys.path.insert(0, str(string_workdir))
    try:
        import strmodel
        manifest = create_package(str(string_workdir / "pairs.pt"), strmodel.pairs,
                                  [["x", "y", "z"], torch.ones(3, 2)], name="pairs",
                                  progress=False, dynamic_axes={"joined": [1]})
    finally:
        sys.path.remove(str(string_workdir))
        sys.modules.pop("strmodel", None)
    assert manifest["inputs"] == [{"name": "words", "dtype": "string", "shape": [-1]},
                                  {"name": "scores", "dtype": "float32", "shape": [-1, 2]}]
    assert manifest["outputs"] == [{"name": "joined", "dtype": "string", "shape": [-1, -1]},
                                   {"name": "doubled", "dtype": "float32", "shape": [-1, 2]},
                                   {"name": "title", "dtype": "string", "shape": []}]


def test_outputs_are_one_string_tensor_or_several_values():
    from chorus.package.importer import flatten_outputs
    t = torch.zeros(2)
    assert flatten_outputs("a") == ["a"]
    assert flatten_outputs(["a", b"b"]) == [["a", b"b"]]  # one string tensor of shape [2]
    assert flatten_outputs([["a"], ["b"]]) == [[["a"], ["b"]]]
    assert flatten_outputs([]) == [[]]  # shape [0]
    assert flatten_outputs(("a", "b")) == ["a", "b"]  # a tuple is always several outputs
    assert len(flatten_outputs([t, ["a"]])) == 2
    assert len(flatten_outputs([t, t])) == 2
    assert len(flatten_outputs({"x": ["a"], "y": t})) == 2
    with pytest.raises(TypeError, match=r"\(got tuple of Tensor, int\)"):
        flatten_outputs((t, 3))


def test_string_outputs_compare_exactly():
    from chorus.package.importer import compare_outputs
    t = torch.tensor([1.0, 2.0])
    recorded = [["AB", "\udcff"], t]
    # str and the bytes of its UTF-8 (surrogate escapes for undecodable bytes) are equal.
    assert compare_outputs([[b"AB", b"\xff"], t + 2.0**-20], recorded, 1e-5, 1e-4) == (
        2, 2.0**-20, "")
    assert compare_outputs([["AB", "\udcff"], t], recorded, 0, 0) == (2, 0.0, "")
    assert compare_outputs([["AB", "C"], t], recorded, 0, 0) == (
        2, float("inf"), "output 0 differs at [1]: got b'C', recorded b'\\xff'")
    assert compare_outputs([["AB"], t], recorded, 0, 0) == (
        2, float("inf"), "output 0: got string[1], recorded string[2]")
    assert compare_outputs([t, t], recorded, 0, 0) == (
        2, float("inf"), "output 0: got torch.float32[2], recorded string[2]")
    assert compare_outputs([["AB", "\udcff"], ["1", "2"]], recorded, 0, 0) == (
        2, float("inf"), "output 1: got string[2], recorded torch.float32[2]")
    assert compare_outputs([[["AB"], "x"], t], recorded, 0, 0)[2] == (
        "output 0 is ragged: [0] has shape [1] but [1] has shape [] (a string tensor is a "
        "rectangular nested list)")
    assert compare_outputs(["A", t], ["B", t], 0, 0) == (
        2, float("inf"), "output 0 differs: got b'A', recorded b'B'")


def test_manifests_accept_string_specs():
    from chorus.package import manifest as manifest_lib
    manifest = {
        "format": "chorus-package", "format_version": 1,
        "model": {"name": "upper", "version": "1"},
        "entry_point": {"kind": "pickle", "package": "chorus_model", "resource": "model.pkl"},
        "source": "", "inputs": [{"name": "words", "dtype": "string", "shape": [-1]}],
        "outputs": [{"name": "output", "dtype": "string", "shape": [-1]}],
        "batching": {"batchable": True, "batch_dim": 0, "max_batch_size": 8},
        "device": "cpu", "files": {}}
    assert manifest_lib.validate(manifest) is manifest
    manifest["inputs"][0]["dtype"] = "BYTES"  # the wire name is not a manifest name
    with pytest.raises(manifest_lib.ManifestError, match="inputs: unknown dtype 'BYTES'"):
        manifest_lib.validate(manifest)
