"""The words of a model's config that name something outside the config: its backend and its repository
agents, each a folder of Triton's install and a word of the Dockerfile `triton-operator image` writes, and
the files Triton reads from the model's folder (the model file, one per GPU's compute capability, and the
warm-up inputs), each a path inside its folder.

Apart from the config's other checks because the CRD holds the same rules as patterns
(config_schema.py), so the API server refuses what `validate` refuses.
"""

from __future__ import annotations

from ..protocol.triton_proto import model_config_pb2 as pb
from .findings import Findings
from .types import (
    COMPONENT_NAME_PATTERN,
    RELATIVE_PATH_PATTERN,
    component_name_problem,
    relative_path_problem,
)

# The string fields of Triton's ModelConfig with a pattern in the CRD, by their full protobuf name. A backend
# may be left empty (the platform names it); a file is a path inside the model's folder (its warmup's).
FIELD_PATTERNS = {
    "inference.ModelConfig.backend": f"^({COMPONENT_NAME_PATTERN.strip('^$')})?$",
    "inference.ModelRepositoryAgents.Agent.name": COMPONENT_NAME_PATTERN,
    "inference.ModelConfig.default_model_filename": RELATIVE_PATH_PATTERN,
    "inference.ModelConfig.CcModelFilenamesEntry.value": RELATIVE_PATH_PATTERN,
    "inference.ModelWarmup.Input.input_data_file": RELATIVE_PATH_PATTERN,
}


def check_config_strings(config: pb.ModelConfig, path: str, found: Findings) -> None:
    """A finding for each name in the config that cannot be one."""
    if config.backend and (problem := component_name_problem("backend", config.backend)):
        found.error(f"{path}.backend", problem)
    for index, agent in enumerate(config.model_repository_agents.agents):
        if problem := component_name_problem("repository agent", agent.name):
            found.error(f"{path}.modelRepositoryAgents.agents[{index}].name", problem)
    files = [(f"{path}.defaultModelFilename", config.default_model_filename)]
    files += [(f"{path}.ccModelFilenames.{key}", name) for key, name in sorted(config.cc_model_filenames.items())]
    files += [
        (f"{path}.modelWarmup[{index}].inputs.{name}.inputDataFile", data.input_data_file)
        for index, sample in enumerate(config.model_warmup)
        for name, data in sorted(sample.inputs.items())
        if data.WhichOneof("input_data_type") == "input_data_file"
    ]
    for where, file in files:
        if file and (problem := relative_path_problem(file)):
            found.error(where, f"{problem} (Triton reads it from the model's folder)")
