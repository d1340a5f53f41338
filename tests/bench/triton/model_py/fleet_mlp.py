"""One model of the density fleet: imports torch and holds its own weights, an MLP
(INPUT0 FP32 [1, 64] -> WIDTH -> WIDTH -> WIDTH -> 16, ReLU between) read from
weights.pt beside this file with torch.load; every model of the fleet has its own width
and weights."""

import json
import os

import torch
import triton_python_backend_utils as pb_utils

IN, OUT = 64, 16


def build(width):
    return torch.nn.Sequential(
        torch.nn.Linear(IN, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
        torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, OUT))


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        torch.set_num_threads(int(parameters["INTRA_OP_THREADS"]["string_value"]))
        net = build(int(parameters["WIDTH"]["string_value"]))
        folder = os.path.join(args["model_repository"], args["model_version"])
        net.load_state_dict(torch.load(os.path.join(folder, "weights.pt")), assign=True)
        self.net = net.eval()

    def execute(self, requests):
        responses = []
        with torch.inference_mode():
            for request in requests:
                x = torch.from_numpy(pb_utils.get_input_tensor_by_name(request, "INPUT0")
                                     .as_numpy())
                y = self.net(x).numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses
