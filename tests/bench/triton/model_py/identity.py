"""identity: answers INPUT0 (FP32 [1, 4]) as OUTPUT0, nothing else: the server's own cost."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())])
            for request in requests]
