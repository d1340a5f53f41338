"""resnet18: torchvision's ResNet-18 on INPUT0 (FP32 [3, 64, 64] per item, up to 8 items a
batch, dynamic batching), its weights read from resnet18.pt beside this file; the batch
the server hands over runs as one forward call, answered per request (OUTPUT0, 1000
logits per item)."""

import json
import os

import numpy as np
import torch
import torchvision
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        torch.set_num_threads(int(parameters["INTRA_OP_THREADS"]["string_value"]))
        net = torchvision.models.resnet18()
        folder = os.path.join(args["model_repository"], args["model_version"])
        net.load_state_dict(torch.load(os.path.join(folder, "resnet18.pt")), assign=True)
        self.net = net.eval()

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                  for request in requests]
        with torch.inference_mode():
            y = self.net(torch.from_numpy(np.concatenate(inputs))).numpy()
        responses, start = [], 0
        for x in inputs:
            rows = y[start:start + len(x)]
            start += len(x)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", rows)]))
        return responses
