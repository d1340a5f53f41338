"""Triton's custom metrics (pb_utils.MetricFamily and Metric) of a Python-backend model on
chorus-server's /metrics page: one family per name in the whole process, shared by the
model's two instances on two interpreters, rendered as Triton renders them."""

import textwrap

import numpy as np
import pytest

import tritonclient.http as httpclient
from conftest import ServerProcess

MODEL = "metrics_probe"

CONFIG = f"""
name: "{MODEL}"
backend: "python"
input [ {{ name: "VALUE" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "COUNT" data_type: TYPE_FP64 dims: [ 1 ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
"""

# Each instance counts itself in a shared gauge, marks the interpreter it runs in (the
# first instance there names it), and makes the family "t_conflict" with a kind of its
# own: the second to try, in the other interpreter, is refused by the server's registry.
# Each request adds its value to a counter and a histogram, sets a gauge to it, and
# answers the request counter's value (shared by both instances).
MODEL_PY = """
import builtins

import numpy as np
import triton_python_backend_utils as pb_utils

LABELS = {"model": "metrics_probe"}


class TritonPythonModel:
    def initialize(self, args):
        name = args["model_instance_name"]
        Family = pb_utils.MetricFamily
        instances = Family("t_instances", "Instances initialized", Family.GAUGE)
        instances.Metric(labels=LABELS).increment(1)
        interpreter = builtins.__dict__.setdefault("_metrics_probe_interpreter", name)
        interpreters = Family("t_interpreters", "Interpreters with an instance", Family.GAUGE)
        interpreters.Metric(labels={"interpreter": interpreter}).set(1)
        kind = Family.GAUGE if name.endswith("1") else Family.COUNTER
        try:
            Family("t_conflict", "Made with two kinds", kind)
        except pb_utils.TritonModelException as e:
            refused = Family("t_refused", "Families refused", Family.COUNTER)
            refused.Metric(labels={"message": e.message()}).increment(1)

        # A Metric works while its family's object lives (Triton's rule): both kept.
        self.families = [Family("t_requests", "Requests executed", Family.COUNTER),
                         Family("t_value_total", "Sum of the values", Family.COUNTER),
                         Family("t_last_value", "The last value", Family.GAUGE),
                         Family("t_values", "The values", Family.HISTOGRAM)]
        self.requests = self.families[0].Metric(labels=LABELS)
        self.total = self.families[1].Metric(labels=LABELS)
        self.last = self.families[2].Metric(labels={"z": "last", "a": "first"})
        self.values = self.families[3].Metric(labels=LABELS, buckets=[1.0, 2.5, 5.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = float(pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()[0])
            self.requests.increment(1)
            self.total.increment(value)
            self.last.set(value)
            self.values.observe(value)
            count = np.array([self.requests.value()], dtype=np.float64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("COUNT", count)]))
        return responses
"""


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton_metrics")
    repository = root / "repository"
    (repository / MODEL / "1").mkdir(parents=True)
    (repository / MODEL / "config.pbtxt").write_text(textwrap.dedent(CONFIG))
    (repository / MODEL / "1" / "model.py").write_text(MODEL_PY)
    process = ServerProcess(repository, interpreters=2)
    yield process
    assert process.stop() == 0


def infer(client, value):
    data = np.array([value], dtype=np.float32)
    request = httpclient.InferInput("VALUE", list(data.shape), "FP32")
    request.set_data_from_numpy(data)
    return float(client.infer(MODEL, [request]).as_numpy("COUNT")[0])


def test_custom_metrics_are_shared_across_interpreters_and_rendered_as_triton(metrics_server):
    values = [0.5, 1.0, 2.0, 3.0, 10.0]
    with httpclient.InferenceServerClient(f"127.0.0.1:{metrics_server.http_port}") as client:
        counts = [infer(client, value) for value in values]
    # Whichever instance ran a request, it read the one counter both increment.
    assert counts == [1.0, 2.0, 3.0, 4.0, 5.0]

    page = metrics_server.metrics()
    lines = page.splitlines()
    expected = [
        "# HELP t_instances Instances initialized",
        "# TYPE t_instances gauge",
        't_instances{model="metrics_probe"} 2',
        "# HELP t_interpreters Interpreters with an instance",
        "# TYPE t_interpreters gauge",
        't_interpreters{interpreter="metrics_probe_0_0"} 1',
        't_interpreters{interpreter="metrics_probe_0_1"} 1',
        "# HELP t_refused Families refused",
        "# TYPE t_refused counter",
        't_refused{message="Error when creating MetricFamily: Family name already exists with '
        'different type"} 1',
        "# HELP t_requests Requests executed",
        "# TYPE t_requests counter",
        't_requests{model="metrics_probe"} 5',
        "# HELP t_value_total Sum of the values",
        "# TYPE t_value_total counter",
        't_value_total{model="metrics_probe"} 16.5',
        "# HELP t_last_value The last value",
        "# TYPE t_last_value gauge",
        't_last_value{a="first",z="last"} 10',
        "# HELP t_values The values",
        "# TYPE t_values histogram",
        't_values_count{model="metrics_probe"} 5',
        't_values_sum{model="metrics_probe"} 16.5',
        't_values_bucket{model="metrics_probe",le="1"} 2',
        't_values_bucket{model="metrics_probe",le="2.5"} 3',
        't_values_bucket{model="metrics_probe",le="5"} 4',
        't_values_bucket{model="metrics_probe",le="+Inf"} 5',
    ]
    missing = [line for line in expected if line not in lines]
    assert not missing, f"missing from /metrics: {missing}\n{page}"
    # Each family once; the refused one (no metric) not at all.
    for family in ("t_instances", "t_interpreters", "t_refused", "t_requests", "t_values"):
        assert page.count(f"# TYPE {family} ") == 1, page
    assert "t_conflict" not in page
    # A family's series follow its header lines.
    assert lines.index('t_values_count{model="metrics_probe"} 5') == \
        lines.index("# TYPE t_values histogram") + 1
