"""pyloop: about a millisecond of branchy pure Python per request (ITERATIONS steps of a
Collatz walk, calibrated by models.py on this machine), seeded by INPUT0 (FP32 [1, 4]);
answers INPUT0 plus the walk's checksum as OUTPUT0."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def walk(seed, iterations):
    """A data-dependent walk: a branch per step, no library calls."""
    x, total = seed, 0
    for i in range(iterations):
        if x % 2:
            x = 3 * x + 1
        else:
            x //= 2
        if x == 1:
            x = seed + i
        total += x & 7
    return total


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.iterations = int(parameters["ITERATIONS"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            seed = 27 + int(abs(float(x.flat[0])) * 1000) % 1000
            total = walk(seed, self.iterations)
            out = (x + np.float32(total % 1000)).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
