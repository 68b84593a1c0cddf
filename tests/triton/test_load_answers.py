"""What a load's answer means, as tables: an ensemble answered POLL_FAILURE counts as loaded only where it runs
every parameter its load sent."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from triton_operator.protocol.names import REVISION_PARAMETER
from triton_operator.protocol.triton_proto import model_config_pb2
from triton_operator.triton.load_answers import POLL_FAILURE, ensemble_poll_failure, runs_as_sent

ENSEMBLE = {"platform": "ensemble", "ensemble_scheduling": {"step": [{"model_name": "step"}]}}


def _sent(parameters: dict[str, str], config: dict[str, object] = ENSEMBLE) -> model_config_pb2.ModelConfig:
    document = {**config, "parameters": {key: {"string_value": value} for key, value in parameters.items()}}
    return json_format.ParseDict(document, model_config_pb2.ModelConfig())


def _running(parameters: dict[str, str]) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig(name="chain")
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config


def test_only_an_ensemble_s_poll_failure_may_have_loaded() -> None:
    message = f"failed to load 'chain', {POLL_FAILURE}"
    assert ensemble_poll_failure(message, _sent({}))
    assert not ensemble_poll_failure(message, _sent({}, {"backend": "python"}))
    assert not ensemble_poll_failure("ensemble chain contains models that are not available", _sent({}))


@pytest.mark.parametrize(
    ("sent", "running", "loaded"),
    [
        ({REVISION_PARAMETER: "new"}, {REVISION_PARAMETER: "new"}, True),
        ({REVISION_PARAMETER: "new", "extra": "1"}, {REVISION_PARAMETER: "new", "extra": "1", "more": "x"}, True),
        ({REVISION_PARAMETER: "new"}, {REVISION_PARAMETER: "old"}, False),  # the version before still runs
        ({REVISION_PARAMETER: "new", "restart": "2"}, {REVISION_PARAMETER: "new", "restart": "1"}, False),
        ({}, {}, False),  # no revision: the version before cannot be told from it
    ],
)
def test_an_ensemble_loaded_when_it_runs_every_parameter_sent(
    sent: dict[str, str], running: dict[str, str], loaded: bool
) -> None:
    assert runs_as_sent(_sent(sent), _running(running)) is loaded
