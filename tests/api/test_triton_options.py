"""extraArgs may not set what the operator owns by any of tritonserver's options: its table of them
(api/extra_args.py) is the wheel's tritonserver's own, read from `tritonserver --help`, and every alias of an
owned flag and every flag that changes the pod's contract (its ports, addresses and protocols, the model
repository, which models load, the restricted APIs) is refused by validate and by the API server alike.
`--model-store` (Triton's alias of --model-repository) with `--load-model` made a pod serve another
repository, unseen in status."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest

from tests.support.crd_check import crd_errors
from tests.support.resources import server_document
from triton_operator.api.extra_args import OWNED_FLAGS, owned_arg_problem
from triton_operator.api.parse import parse_resources
from triton_operator.api.triton_options import TRITON_ALIASES, TRITON_OPTIONS
from triton_operator.local.tritonserver import find_tritonserver

# What the pod's contract is made of; each of these is refused, whatever else Triton adds.
CONTRACT_FLAGS = [
    "--model-store",
    "--model-repository",
    "--load-model",
    "--model-control-mode",
    "--allow-http",
    "--allow-grpc",
    "--allow-metrics",
    "--http-address",
    "--grpc-address",
    "--metrics-address",
    "--http-port",
    "--grpc-port",
    "--metrics-port",
    "--reuse-http-port",
    "--reuse-grpc-port",
    "--grpc-use-ssl",
    "--grpc-use-ssl-mutual",
    "--allow-sagemaker",
    "--sagemaker-port",
    "--allow-vertex-ai",
    "--vertex-ai-port",
    "--http-restricted-api",
    "--grpc-restricted-protocol",
    "--strict-model-config",
    "--disable-auto-complete-config",
]


def _server(extra_args: list[str]) -> dict[str, Any]:
    return server_document(extraArgs=extra_args)


def _refused(extra_args: list[str]) -> None:
    document = _server(extra_args)
    servers, _, found = parse_resources([document])
    assert servers == [] and [f.path for f in found] == ["spec.extraArgs"], found
    assert "the operator sets these flags" in found[0].message
    assert crd_errors(document), f"the API server's CEL rule would accept {extra_args}"


@pytest.mark.parametrize("flag", CONTRACT_FLAGS)
def test_a_flag_of_the_pods_contract_is_refused_in_either_spelling(flag: str) -> None:
    assert owned_arg_problem(f"{flag}=x")
    _refused([f"{flag}=x"])
    _refused([flag, "x"])


def test_another_repository_and_its_models_are_refused() -> None:
    _refused(["--model-store=s3://elsewhere/models", "--load-model=stolen"])


def _help() -> dict[str, str]:
    """Every option the wheel's tritonserver lists in --help, with its description."""
    install = find_tritonserver()
    printed = subprocess.run(
        [str(install.binary), "--help"], env=install.environment(""), capture_output=True, text=True, timeout=60
    )
    options: dict[str, str] = {}
    current = ""
    for line in (printed.stdout + printed.stderr).splitlines():
        if match := re.match(r"^  (--[a-z0-9-]+)", line):
            current = match.group(1)
            options[current] = ""
        elif current and line.startswith("\t"):
            options[current] += " " + line.strip()
    assert len(options) > 50, printed.stdout + printed.stderr
    return options


@pytest.mark.triton
def test_the_table_holds_every_option_of_the_wheels_tritonserver() -> None:
    assert sorted(_help()) == sorted(TRITON_OPTIONS)


@pytest.mark.triton
def test_every_alias_the_binary_names_is_in_the_table_and_shares_its_flags_owner() -> None:
    """An option whose help says it is another's equivalent (or, deprecated, that another replaces it) is
    listed as that one's alias; an alias of an owned flag is owned."""
    said = {
        option: match.group(1)
        for option, text in _help().items()
        if (match := re.search(r"Equivalent to (--[a-z-]+)", text))
    }
    assert said.items() <= TRITON_ALIASES.items()
    for alias, flag in TRITON_ALIASES.items():
        assert (alias in OWNED_FLAGS) == (flag in OWNED_FLAGS), alias


@pytest.mark.triton
def test_every_option_the_binary_lists_is_refused_or_accepted_as_the_table_says() -> None:
    """Owned ones by any spelling; the others, whole, pass: none of them is a prefix of an owned option."""
    for option in _help():
        if option in OWNED_FLAGS:
            _refused([f"{option}=1"])
        else:
            assert owned_arg_problem(f"{option}=1") == "", option
            assert parse_resources([_server([f"{option}=1"])])[2] == [], option
            assert crd_errors(_server([f"{option}=1"])) == [], option
