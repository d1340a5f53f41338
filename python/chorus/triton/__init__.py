"""chorus.triton: Triton's Python backend, run inside chorus' interpreters.

A Triton Python-backend model (`<repository>/<model>/config.pbtxt` and
`<version>/model.py` defining `TritonPythonModel`) runs in chorus unmodified. Triton starts a
stub process per model instance and talks to it through shared memory; chorus runs each
instance as one object in one of its own interpreters, in the server's process, and the C++
side calls the entry points of `chorus.triton.backend` with the GIL of that interpreter held.

The package is chorus' own code written from Triton's documented API:

- `utils`: what `import triton_python_backend_utils as pb_utils` gives a model (the
  backend registers it under that name); `c_utils` is the same for `c_python_backend_utils`.
- `tensor`, `requests`, `responses`, `bls`, `model_config`, `errors`, `metrics`, `logger`,
  `model_control`, `datatypes`: the pieces `utils` re-exports, one concept each.
- `chorus.model_namespaces` (not here: TorchServe's handlers use it too) gives each
  model's modules (`model.py`, its `util.py`...) names of their own, so models with the
  same file names share an interpreter.
- `execution`, `instance`, `backend`: the entry points the C++ side calls and what they do
  with a batch of requests.

Where chorus differs from Triton, the module concerned says so in its docstring. The
pieces that need a chorus server (`_chorus`, `torch.classes.chorus.*`) are looked up when
used, so everything else imports and works in plain Python.
"""
