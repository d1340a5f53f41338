"""TorchServe's handlers inside chorus' interpreters: a `.mar` archive's handler code run
as TorchServe 0.12 runs it, unmodified.

chorus runs TorchServe's own `ts` package (pip `torchserve`, Apache-2.0, pinned in the
venv): a handler's `from ts.torch_handler.base_handler import BaseHandler`, the default
handlers (`image_classifier`...), `ts.context.Context` and `ts.utils.util`'s
PredictionException are TorchServe's code, so they answer as in TorchServe. What chorus
replaces is TorchServe's worker process around them (`ts/model_service_worker.py`,
`ts/model_loader.py`, `ts/service.py`):

- `handlers`: the entry point a manifest's handler names, found as TorchServe finds it,
  in a module namespace of the worker's own (`chorus.model_namespaces`);
- `worker`: one TorchServe worker: its Context, `initialize`, and a batch of requests
  through the entry point to one answer per request.

Where chorus differs from TorchServe, the module concerned says so in its docstring.
"""
