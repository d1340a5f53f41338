"""decoupled: streams RESPONSES answers per request (model_transaction_policy decoupled),
the i-th INPUT0 + i (FP32 [1, 4]), the last one flagged final."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.responses = int(parameters["RESPONSES"]["string_value"])

    def execute(self, requests):
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender = request.get_response_sender()
            for i in range(self.responses):
                out = (x + np.float32(i)).astype(np.float32)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]),
                            flags=final if i + 1 == self.responses else 0)
        return None
