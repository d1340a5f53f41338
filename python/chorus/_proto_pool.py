"""The protobuf descriptor pool of chorus' generated modules (build_support.py points them
here). Not the default pool: chorus' wire messages keep the Open Inference Protocol's
names (inference.ModelInferRequest, ...), which tritonclient, KServe and MLServer also
register there, and two registrations of one name in one pool fail. Only the message
names are private; the RPC paths on the wire are the protocol's."""

from google.protobuf import descriptor_pool

POOL = descriptor_pool.DescriptorPool()
