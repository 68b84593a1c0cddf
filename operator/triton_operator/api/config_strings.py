"""The words of a model's config that name something outside the config: its backend and its repository
agents, each a folder of Triton's install and a word of the Dockerfile `triton-operator image` writes.

Apart from the config's other checks because the CRD holds the same rules as patterns (config_schema.py),
so the API server refuses what `validate` refuses.
"""

from __future__ import annotations

from ..protocol.model_config import model_config_pb2 as pb
from .findings import Findings
from .types import COMPONENT_NAME_PATTERN, component_name_problem

# The string fields of Triton's ModelConfig with a pattern in the CRD, by their full protobuf name. A backend
# may be left empty (the platform names it).
FIELD_PATTERNS = {
    "inference.ModelConfig.backend": f"^({COMPONENT_NAME_PATTERN.strip('^$')})?$",
    "inference.ModelRepositoryAgents.Agent.name": COMPONENT_NAME_PATTERN,
}


def check_config_strings(config: pb.ModelConfig, path: str, found: Findings) -> None:
    """A finding for each name in the config that cannot be one."""
    if config.backend and (problem := component_name_problem("backend", config.backend)):
        found.error(f"{path}.backend", problem)
    for index, agent in enumerate(config.model_repository_agents.agents):
        if problem := component_name_problem("repository agent", agent.name):
            found.error(f"{path}.modelRepositoryAgents.agents[{index}].name", problem)
