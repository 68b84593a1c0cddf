"""Names the operator and its Triton servers agree on: protocol facts, not rendering choices."""

# A parameter in every config the operator loads: a hash of the config and the model files.
# Triton does not reload a model whose config is unchanged even when its files changed, and the
# config Triton reports back is normalized (defaults filled in): this parameter is how a
# replica's loaded model is compared with the desired one, and how a model is known to be ours.
# The same key names the revision a ConfigMap holds (the model's config.pbtxt's annotation, a kept
# revision's label): one name for a model's revision wherever the operator writes it.
REVISION_PARAMETER = "triton-operator.io/revision"

# The header (HTTP) / metadata key (gRPC, where Triton adds its prefix) that unlocks the operator's
# restricted APIs: loading and unloading models, and everything that reads or changes the server's
# insides. Inference, health and metadata stay open to every client.
CONTROL_HEADER = "triton-operator-key"
GRPC_CONTROL_METADATA = f"triton-grpc-protocol-{CONTROL_HEADER}"
CONTROL_PROTOCOLS = ("model-repository", "model-config", "statistics", "trace", "logging")
# Shared-memory registration has a key of its own, for clients in the pod (sidecars): Triton takes each
# API in one restriction only, so the operator's key cannot also unlock it. client/ has its own copy
# of this header name (it imports nothing of the operator); tests hold them equal.
SHM_HEADER = "triton-shm-key"
SHM_PROTOCOLS = ("shared-memory",)

# The memory sidecar's port in each pod, beside Triton's 8000-8002: the Deployment opens it, the operator reads it.
READER_PORT = 8003

# A parameter set only in a reload that restarts a model which reads ready but fails every request
# (its python stub died): Triton reloads a model only when its config changed, and this changes
# nothing else (triton/health.py).
RESTART_PARAMETER = "triton-operator.io/restart"

# A parameter of a model local mode loads from its own repository folder (`local --model-repository DIR`):
# a hash of the folder's files. Triton reloads a model only when its config changed, and reads the
# folder's files again on that reload, so this is what makes an edit of model.py reload it.
FOLDER_FILES_PARAMETER = "triton-operator.io/folder-files"
