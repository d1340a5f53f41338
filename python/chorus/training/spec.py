"""A training job's spec: what it trains and how, with its defaults.

The C++ TrainingSpec (training/job/include/chorus/training/job/training_spec.h) is the
same spec with the same defaults, checked by training_spec_test; the service
fills that one from its request and hands its JSON to the trainer, which reads
it with JobSpec.from_dict. Shaped like torchtitan's JobConfig: small nested
dataclasses.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List


@dataclass
class OptimizerSpec:
    name: str = "adamw"
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1


@dataclass
class LrScheduleSpec:
    kind: str = "constant"  # or "warmup_cosine"
    warmup_steps: int = 0
    total_steps: int = 1000
    min_lr_ratio: float = 0.1


@dataclass
class JobSpec:
    model_factory: str = ""  # "module:function" in the archive (required)
    model_config: Dict[str, Any] = field(default_factory=dict)
    loss: str = "cross_entropy"  # or "mse"
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    lr_schedule: LrScheduleSpec = field(default_factory=LrScheduleSpec)
    seed: int = 0
    parallelize: str = ""  # "module:function" in the archive ("" = FSDP by default)
    data_loader: str = ""  # "module:function" in the archive ("" = batches are sent)
    global_batch: int = 0
    seq_len: int = 0
    param_dtype: str = ""  # "" (fp32) or "bfloat16"
    devices: List[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, values: Dict[str, Any]) -> "JobSpec":
        """The spec from a dict; missing keys keep their defaults, unknown ones are an error."""
        return _build(cls, values, "spec")

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


_NESTED = {"optimizer": OptimizerSpec, "lr_schedule": LrScheduleSpec}


def _build(cls, values, where):
    if not isinstance(values, dict):
        raise ValueError(f"{where} must be an object, not {type(values).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}")
    kwargs = {}
    for key, value in values.items():
        nested = _NESTED.get(key) if cls is JobSpec else None
        kwargs[key] = _build(nested, value, f"{where}.{key}") if nested else value
    return cls(**kwargs)
