"""mlp: a torch MLP (4 -> WIDTH -> WIDTH -> 4, ReLU between) on INPUT0 (FP32 [1, 4]); its
weights are read from mlp.pt beside this file with torch.load, as a model ships them."""

import json
import os

import torch
import triton_python_backend_utils as pb_utils


def build(width, layers):
    """The network: `layers` Linear layers 4 -> width ... -> 4 with ReLU between."""
    sizes = [4] + [width] * (layers - 1) + [4]
    modules = []
    for i in range(layers):
        modules.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 1 < layers:
            modules.append(torch.nn.ReLU())
    return torch.nn.Sequential(*modules)


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        torch.set_num_threads(int(parameters["INTRA_OP_THREADS"]["string_value"]))
        net = build(int(parameters["WIDTH"]["string_value"]),
                    int(parameters["LAYERS"]["string_value"]))
        folder = os.path.join(args["model_repository"], args["model_version"])
        # assign=True keeps the loaded tensors instead of copying them into new ones.
        net.load_state_dict(torch.load(os.path.join(folder, "mlp.pt")), assign=True)
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
