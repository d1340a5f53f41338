"""Custom metrics: `pb_utils.MetricFamily` and its `Metric`s, exported on the server's
/metrics like chorus' own.

The metrics live in the server (`torch.classes.chorus.MetricFamily` and `.Metric`): a
family is one per name in the process, shared by every interpreter and instance, and
`family.Metric(labels)` with the same labels is the same metric. These wrappers check
what Triton checks, with its messages, before calling them: label and bucket arguments,
what each kind of metric allows, and a family of the same name made with another kind.
A Metric outlived by the MetricFamily object it came from refuses to work, as in Triton.
"""

import enum
import numbers
import threading
import weakref
from typing import Any, Dict, List, Optional

from .errors import TritonModelException
from .native import torch_class

__all__ = ["MetricKind", "MetricFamily", "Metric", "operation_error", "checked_labels",
           "checked_buckets"]


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


# The kind of each family name made in this interpreter (the server checks across them).
_kinds_by_name: Dict[str, MetricKind] = {}
_kinds_lock = threading.Lock()

_UNSUPPORTED = {
    (MetricKind.COUNTER, "set"), (MetricKind.COUNTER, "observe"),
    (MetricKind.GAUGE, "observe"),
    (MetricKind.HISTOGRAM, "increment"), (MetricKind.HISTOGRAM, "set"),
    (MetricKind.HISTOGRAM, "value"),
}
_FAILED = {"increment": "Failed to increment metric value", "set": "Failed to set metric value",
           "observe": "Failed to observe metric value", "value": "Failed to get metric value"}


def operation_error(kind: MetricKind, operation: str, value: float = 0.0) -> Optional[str]:
    """Triton's message when a metric of `kind` cannot do `operation` ("increment", "set",
    "observe", "value") with `value`; None when it can."""
    kind_name = f"TRITONSERVER_METRIC_KIND_{kind.name}"
    if (kind, operation) in _UNSUPPORTED:
        reason = f"{kind_name} does not support {operation.capitalize()}"
    elif kind == MetricKind.COUNTER and operation == "increment" and value < 0:
        reason = f"{kind_name} can only be incremented monotonically by non-negative values."
    else:
        return None
    return f"{_FAILED[operation]}: {reason}"


def checked_labels(labels: Any) -> Dict[str, str]:
    """A metric's labels as Triton accepts them (None: no labels)."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TritonModelException(f"Error when creating Metric: Parameter [{key}] must have "
                                       "a type of TRITONSERVER_PARAMETER_STRING to be added as "
                                       "a label.")
    return dict(labels)


def checked_buckets(kind: MetricKind, buckets: Any) -> List[float]:
    """A histogram's bucket boundaries as Triton accepts them; [] for other kinds."""
    if buckets is None:
        if kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        return []
    if not isinstance(buckets, list):
        raise TritonModelException("Failed to create metric. Buckets must be a list.")
    if kind != MetricKind.HISTOGRAM:
        raise TritonModelException("Failed to create metric. Unexpected buckets found.")
    bounds = [_number(bound, "bucket boundaries") for bound in buckets]
    if any(later <= earlier for earlier, later in zip(bounds, bounds[1:])):
        raise TritonModelException("Error when creating Metric: Bucket Boundaries must be "
                                   "strictly sorted")
    return bounds


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be numbers, got {type(value)}")
    return float(value)


def _checked_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"MetricFamily(): '{what}' must be a str, got {type(value)}")
    return value


class Metric:
    """One metric of a family (`family.Metric(labels=..., buckets=...)`)."""

    def __init__(self, kind: MetricKind, native: Any):
        self._kind = kind
        self._native = native
        self._family_deleted = False

    def _check(self, operation: str, value: float = 0.0) -> None:
        if self._family_deleted:
            raise TritonModelException(
                "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. "
                "The 'MetricFamily' object should be deleted AFTER its corresponding 'Metric' "
                "objects have been deleted.")
        message = operation_error(self._kind, operation, value)
        if message is not None:
            raise TritonModelException(message)

    def increment(self, value: float) -> None:
        value = _number(value, "metric values")
        self._check("increment", value)
        self._native.increment(value)

    def set(self, value: float) -> None:
        value = _number(value, "metric values")
        self._check("set", value)
        self._native.set(value)

    def observe(self, value: float) -> None:
        value = _number(value, "metric values")
        self._check("observe", value)
        self._native.observe(value)

    def value(self) -> float:
        self._check("value")
        return float(self._native.value())


class MetricFamily:
    """`MetricFamily(name, description, kind)`, kind MetricFamily.COUNTER, GAUGE or
    HISTOGRAM. A second family of the same name and kind is the first one (its
    description kept)."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind):
        _checked_str(name, "name")
        _checked_str(description, "description")
        if not isinstance(kind, MetricKind):
            raise TypeError(f"MetricFamily(): 'kind' must be a MetricFamily kind, got {type(kind)}")
        with _kinds_lock:
            known = _kinds_by_name.get(name, kind)
        if known != kind:
            raise TritonModelException(f"Error when creating MetricFamily: a metric family "
                                       f"named '{name}' already exists with kind {known.name}")
        native_family = torch_class("MetricFamily", "MetricFamily")
        try:
            self._native = native_family(name, description, int(kind))
        except RuntimeError as e:
            raise TritonModelException(f"Error when creating MetricFamily: {e}") from None
        with _kinds_lock:
            _kinds_by_name.setdefault(name, kind)
        self._kind = kind
        self._metrics: "weakref.WeakSet[Metric]" = weakref.WeakSet()

    def Metric(self, labels: Optional[Dict[str, str]] = None,
               buckets: Optional[List[float]] = None) -> Metric:
        label_map = checked_labels(labels)
        bounds = checked_buckets(self._kind, buckets)
        try:
            native = self._native.metric(label_map, bounds)
        except RuntimeError as e:
            raise TritonModelException(f"Error when creating Metric: {e}") from None
        metric = Metric(self._kind, native)
        self._metrics.add(metric)
        return metric

    def __del__(self) -> None:
        for metric in list(getattr(self, "_metrics", ())):
            metric._family_deleted = True
