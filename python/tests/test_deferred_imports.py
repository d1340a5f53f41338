"""chorus._deferred_imports in plain Python processes (each test a fresh one,
since deferral must be installed before torch is imported): the deferred
modules are not executed by `import torch` or torchvision's imports, each
works on its first use, and deferral keeps Python's import semantics."""

import json
import os
import subprocess
import sys
import textwrap

import numpy
import pytest

PREAMBLE = """
import json, sys
sys.modules["triton"] = None  # as chorus' interpreters on a host without a GPU
sys.modules["cuda.bindings"] = None
import chorus._deferred_imports as deferred
deferred.install()
"""

# A first use of each deferred module, and what it answers.
FIRST_USES = {
    "numpy.random": ("__import__('numpy').random.default_rng(0).integers(0, 100).item()", 85),
    "torch._dynamo": ("torch._dynamo.is_compiling()", False),
    "torch.cuda.tunable": ("torch.cuda.tunable.is_enabled()", False),
    "torch.distributions": (
        "round(torch.distributions.Normal(0.0, 1.0).log_prob(torch.tensor(0.0)).item(), 5)",
        -0.91894),
    "torch.masked": ("torch.masked.sum(torch.tensor([1.0, 2.0, 3.0]), 0, "
                     "mask=torch.tensor([True, False, True])).item()", 4.0),
    "torch.nested": ("torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], "
                     "layout=torch.jagged).values().sum().item()", 5.0),
    "torch.optim": ("step_sgd()", 0.5),
    "torch.profiler": ("type(torch.profiler.record_function('chorus')).__name__",
                       "record_function"),
    "torch.quantization": ("type(torch.quantization.QuantStub()).__name__", "QuantStub"),
    "torch.sparse": ("torch.sparse.mm(torch.eye(2).to_sparse(), torch.ones(2, 2)).sum().item()",
                     4.0),
    "torch.testing": ("torch.testing.assert_close(torch.tensor(1.0), torch.tensor(1.0))", None),
    "torch.utils.data": (
        "[b[0].sum().item() for b in torch.utils.data.DataLoader("
        "torch.utils.data.TensorDataset(torch.arange(4.0)), batch_size=2)]", [1.0, 5.0]),
}


# torchvision's, once a classifier's module (torchvision.models.resnet) is imported.
VISION_FIRST_USES = {
    "torchvision.datasets": ("len(torchvision.datasets.FakeData(size=3))", 3),
    "torchvision.models.detection": ("torchvision.models.detection.fasterrcnn_resnet50_fpn"
                                     ".__name__", "fasterrcnn_resnet50_fpn"),
    "torchvision.models.optical_flow": ("torchvision.models.optical_flow.raft_small.__name__",
                                        "raft_small"),
    "torchvision.models.quantization": ("torchvision.models.quantization.resnet18.__name__",
                                        "resnet18"),
    "torchvision.models.segmentation": ("torchvision.models.segmentation.fcn_resnet50.__name__",
                                        "fcn_resnet50"),
    "torchvision.models.video": ("torchvision.models.video.r3d_18.__name__", "r3d_18"),
}


def run(body, setup=""):
    """Runs PREAMBLE, setup and body in a fresh Python; returns the JSON it printed last."""
    done = subprocess.run([sys.executable, "-c", PREAMBLE + setup + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_each_deferred_module_waits_for_its_first_use_and_then_works():
    uses = json.dumps({name: expression for name, (expression, _) in FIRST_USES.items()})
    result = run(f"""
        import torch
        pending = deferred.pending()
        executed = [name for name in json.loads({uses!r})
                    if name in sys.modules and name not in pending]
        def step_sgd():
            p = torch.nn.Parameter(torch.ones(1))
            p.grad = torch.ones(1)
            torch.optim.SGD([p], lr=0.5).step()
            return p.item()
        answers, kinds = {{}}, {{}}
        for name, expression in json.loads({uses!r}).items():
            answers[name] = eval(expression)
            kinds[name] = type(sys.modules[name]).__name__
        print(json.dumps({{"pending": pending, "executed": executed, "answers": answers,
                          "kinds": kinds, "left": deferred.pending()}}))
    """)
    # torch's own import touches torch.testing (torch 2.14: torch.utils._config_module),
    # and does not import torch._dynamo (torchvision does: the next tests). None of the
    # others has run: each is pending, or not imported at all (numpy 2 imports numpy.random
    # on its first use itself; numpy 1.26 imports it with numpy, and chorus defers it).
    untouched = set(FIRST_USES) - {"torch.testing", "torch._dynamo"}
    assert not untouched & set(result["executed"]), result["executed"]
    numpy_defers_random = int(numpy.__version__.split(".")[0]) >= 2
    assert numpy_defers_random or "numpy.random" in result["pending"], result["pending"]
    assert set(result["pending"]) <= set(deferred_names())
    for name, (_, expected) in FIRST_USES.items():
        assert result["answers"][name] == expected, name
        assert result["kinds"][name] == "module", name
    assert result["left"] == []


def deferred_names():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from chorus import _deferred_imports
    return set(_deferred_imports.DEFERRED) | set(_deferred_imports.DEFERRED_NAMES)


def test_importing_a_submodule_runs_its_deferred_package_first():
    # torch.distributions' package imports normal.py, which imports the package:
    # run in the wrong order, they would fail as a circular import.
    result = run("""
        import torch
        import torch.distributions.normal
        from torch.utils.data.dataloader import DataLoader
        from torch.optim.sgd import SGD
        normal = torch.distributions.normal.Normal(0.0, 1.0)
        print(json.dumps({"normal_is_exported": torch.distributions.Normal is type(normal),
                          "loader": DataLoader.__name__, "sgd": SGD.__name__,
                          "package": type(torch.distributions).__name__}))
    """)
    assert result == {"normal_is_exported": True, "loader": "DataLoader", "sgd": "SGD",
                      "package": "module"}


def test_torchvision_leaves_dynamo_and_sympy_out_until_compiling():
    pytest.importorskip("torchvision")
    uses = json.dumps({name: expression for name, (expression, _) in VISION_FIRST_USES.items()})
    result = run(setup=f"VISION_USES = {uses!r}\n", body="""
        import torch, torchvision
        from torchvision.ops import roi_align
        torch.manual_seed(0)
        x = torch.randn(1, 3, 8, 8)
        pooled = roi_align(x, torch.tensor([[0, 0.0, 0.0, 4.0, 4.0]]), output_size=2)
        before = {"sympy": "sympy" in sys.modules, "dynamo": "torch._dynamo" in deferred.pending()}
        pending = deferred.pending()
        vision = {}
        for name, expression in json.loads(VISION_USES).items():
            answer = eval(expression)
            vision[name] = [name in pending, answer, type(sys.modules[name]).__name__]
        model = torch.nn.Linear(4, 4)
        eager = model(torch.ones(2, 4)).sum().item()
        # (One thread: torch.compile is not thread-safe within one interpreter.)
        compiled = torch.compile(model)(torch.ones(2, 4)).sum().item()
        print(json.dumps({**before, "vision": vision, "pooled": list(pooled.shape), "eager": eager,
                          "compiled": compiled, "dynamo_after": type(torch._dynamo).__name__}))
    """)
    assert result["sympy"] is False and result["dynamo"] is True
    for name, (_, expected) in VISION_FIRST_USES.items():
        assert result["vision"][name] == [True, expected, "module"], name
    assert result["pooled"] == [1, 3, 2, 2]
    assert result["compiled"] == pytest.approx(result["eager"], abs=1e-5)
    assert result["dynamo_after"] == "module"


def test_first_use_from_many_threads_executes_the_module_once(tmp_path):
    package = tmp_path / "slowpkg"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent("""
        import builtins, time
        builtins.slowpkg_runs = getattr(builtins, "slowpkg_runs", 0) + 1
        time.sleep(0.2)
        from slowpkg.part import VALUE
    """))
    (package / "part.py").write_text("VALUE = 42\n")
    result = run(f"""
        import builtins, threading
        sys.path.insert(0, {str(tmp_path)!r})
        deferred.DEFERRED = deferred.DEFERRED | {{"slowpkg"}}
        import slowpkg
        deferred_at_first = type(slowpkg).__name__
        values = []
        threads = [threading.Thread(target=lambda: values.append(slowpkg.VALUE))
                   for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        import slowpkg.part
        print(json.dumps({{"first": deferred_at_first, "values": values,
                          "runs": builtins.slowpkg_runs, "part": slowpkg.part.VALUE}}))
    """)
    assert result == {"first": "DeferredModule", "values": [42] * 8, "runs": 1, "part": 42}
