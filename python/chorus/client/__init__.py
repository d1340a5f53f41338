"""chorus.client: a small Python client for chorus-server (and any Open Inference Protocol server).

    from chorus.client import Client
    with Client("localhost:8001") as client:
        outputs = client.infer("mlp", {"x": numpy_array})   # {"output": numpy array}

Command line: ``chorus-client infer|list|load|unload|metadata|ready`` (``--help``).
"""

from chorus.client.client import Client, ClientError

__all__ = ["Client", "ClientError"]
