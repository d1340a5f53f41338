"""bls: a pipeline in Python calling two models of the repository per request with
pb_utils.InferenceRequest.exec (business logic scripting): identity, then mlp on its
answer; answers mlp's OUTPUT0."""

import triton_python_backend_utils as pb_utils


def call(model, x):
    """OUTPUT0 of `model` on INPUT0 = x (a numpy array), through the server."""
    response = pb_utils.InferenceRequest(
        model_name=model, requested_output_names=["OUTPUT0"],
        inputs=[pb_utils.Tensor("INPUT0", x)]).exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            y = call("mlp", call("identity", x))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses
