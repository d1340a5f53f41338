"""TrainingClient: chorus' training service (package chorus.training) over gRPC."""

from typing import Iterator, List, Optional

import numpy as np

from chorus.client.client import Connection, raw_contents, to_numpy, wire_datatype
from chorus.training import training_service_pb2 as pb
from chorus.training import training_service_pb2_grpc as pb_grpc


def tensor_proto(array: np.ndarray) -> pb.Tensor:
    return pb.Tensor(datatype=wire_datatype(array), shape=list(np.shape(array)),
                     raw=raw_contents(array))


class TrainingClient(Connection):
    """Create, step, checkpoint, export and delete training jobs. Thread-safe."""

    def __init__(self, address: str = "localhost:8001", token: Optional[str] = None,
                 root_certificates: Optional[bytes] = None, max_message_bytes: int = 64 << 20):
        super().__init__(pb_grpc.TrainingServiceStub, address, token, root_certificates,
                         max_message_bytes)

    def create_job(self, **spec) -> str:
        """JobSpec fields as keywords (optimizer and lr_schedule as dicts); returns the job id."""
        for key, message in (("optimizer", pb.OptimizerConfig), ("lr_schedule", pb.LrSchedule)):
            if isinstance(spec.get(key), dict):
                spec[key] = message(**spec[key])
        return self._call("CreateJob", pb.CreateJobRequest(spec=pb.JobSpec(**spec))).job_id

    def step(self, job_id: str, steps: int = 1, batch: Optional[np.ndarray] = None,
             timeout: Optional[float] = None) -> List[pb.StepMetrics]:
        request = pb.StepRequest(job_id=job_id, steps=steps)
        if batch is not None:
            request.batch.CopyFrom(tensor_proto(batch))
        return list(self._call("Step", request, timeout).steps)

    def step_future(self, job_id: str, steps: int = 1, timeout: Optional[float] = None):
        """step() in the background: a grpc.Future of the StepResponse. Its cancel()
        stops the job at the next step boundary (the steps taken are kept)."""
        return self._stub.Step.future(pb.StepRequest(job_id=job_id, steps=steps), timeout=timeout,
                                      metadata=self._metadata)

    def save(self, job_id: str, directory: str) -> pb.SaveCheckpointResponse:
        return self._call("SaveCheckpoint",
                          pb.SaveCheckpointRequest(job_id=job_id, directory=directory))

    def load(self, job_id: str, path: str) -> int:
        return self._call("LoadCheckpoint", pb.LoadCheckpointRequest(job_id=job_id, path=path)).step

    def export(self, job_id: str, model_name: str, version: int = 0,
               example_length: int = 8) -> pb.ExportResponse:
        return self._call("Export", pb.ExportRequest(job_id=job_id, model_name=model_name,
                                                     version=version,
                                                     example_length=example_length))

    def evaluate(self, job_id: str, tokens: np.ndarray) -> np.ndarray:
        output = self._call("Evaluate", pb.EvaluateRequest(job_id=job_id,
                                                           tokens=tensor_proto(tokens))).output
        return to_numpy(output.datatype, output.shape, output.raw)

    def stats(self, job_id: str) -> pb.JobStats:
        return self._call("GetStats", pb.GetStatsRequest(job_id=job_id))

    def list_jobs(self) -> List[pb.JobStats]:
        """Every job that exists (created and not yet deleted)."""
        return list(self._call("ListJobs", pb.ListJobsRequest()).jobs)

    def stream_metrics(self, job_id: str, from_step: int = 0) -> Iterator[pb.StepMetrics]:
        return self._stub.StreamMetrics(pb.StreamMetricsRequest(job_id=job_id, from_step=from_step),
                                        metadata=self._metadata)

    def delete(self, job_id: str) -> None:
        self._call("DeleteJob", pb.DeleteJobRequest(job_id=job_id))
