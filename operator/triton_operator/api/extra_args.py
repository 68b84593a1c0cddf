"""`spec.extraArgs`: the flags the operator sets itself, by every spelling Triton reads as them.

Apart from the server's spec because the rule is Triton's option parsing, not a field: the spec's CEL
rule and its validator both come from here, and the refusal's wording is shared with the tests that
start a real tritonserver with such flags.
"""

import re

from .triton_options import TRITON_OPTIONS
from .types import COMPONENT_NAME_PATTERN, component_name_problem

# Flags the operator owns, by tritonserver's own table: setting them through extraArgs would change what it relies on.
OWNED_FLAGS = {flag: reason for flag, reason in TRITON_OPTIONS.items() if reason is not None}
BACKEND_CONFIG_FLAG = "--backend-config"
# The python backend's shm settings size /dev/shm: they come from spec.pythonBackend only.
OWNED_BACKEND_CONFIG = r"^python,shm-(default|growth)-byte-size="


def _prefixes_pattern(flag: str) -> str:
    """A regex (RE2 and Python alike; no escapes, which CEL's string literals would refuse) of every spelling
    Triton may read as `flag`: `--` and any non-empty prefix of its name, e.g. --m(o(d(e)?)?)? for --mode."""
    name = flag.removeprefix("--")
    assert re.fullmatch("[a-z0-9-]+", name), flag
    pattern = ""
    for character in reversed(name[1:]):
        pattern = f"({character}{pattern})?"
    return f"--{name[0]}{pattern}"


# Triton reads its options with getopt_long: `--flag=value` and `--flag value` alike, and any unambiguous
# prefix of a long option as that option (the wheel's 2.51: `--model-cont=poll` ran in MODE_POLL, `--p=1048576`
# set the pinned pool, `--d` turned auto-complete off). Which prefixes are unambiguous depends on the options
# of the image's Triton, so every prefix of an owned flag is refused: the ambiguous ones Triton refuses itself,
# and none is a whole option of its own (checked against the wheel's options).
OWNED_FLAG_PATTERN = f"^({'|'.join(_prefixes_pattern(flag) for flag in OWNED_FLAGS)})(=|$)"
# The python shm sizes, as `--backend-config=python,shm-...` or as the value after a `--backend-config`.
OWNED_BACKEND_CONFIG_ARG = f"^(({_prefixes_pattern(BACKEND_CONFIG_FLAG)})=)?{OWNED_BACKEND_CONFIG.removeprefix('^')}"


def owned_flags_of(arg: str) -> list[str]:
    """The owned flags an extraArgs item may stand for to Triton (any prefix of one, with or without
    `=value`), in OWNED_FLAGS' order; [] for anything else."""
    flag = arg.partition("=")[0]
    if not flag.startswith("--") or len(flag) < 3:
        return []
    return [owned for owned in OWNED_FLAGS if owned.startswith(flag)]


def owned_arg_problem(arg: str) -> str:
    """Why the operator refuses this extraArgs item, or "": it names (a prefix of) an owned flag, or sets
    the python backend's shm sizes."""
    if owned := owned_flags_of(arg):
        flag = arg.partition("=")[0]
        reasons = "; ".join(dict.fromkeys(OWNED_FLAGS[name] for name in owned))
        if flag in OWNED_FLAGS:
            return f"{flag} ({reasons})"
        return f"{flag} (a prefix of {' or '.join(owned)}, which Triton takes for the whole flag: {reasons})"
    if re.match(OWNED_BACKEND_CONFIG_ARG, arg):
        return f"{arg} (the python shm sizes size /dev/shm: use spec.pythonBackend)"
    return ""


CACHE_CONFIG_FLAG = "--cache-config"
# A `--cache-config=NAME,...` item whose NAME is a cache's name (the API server's copy of cache_name_problems).
NAMED_CACHE_CONFIG_ARG = f"^{CACHE_CONFIG_FLAG}={COMPONENT_NAME_PATTERN.strip('^$')}(,|$)"


def cache_config_names(args: list[str]) -> list[tuple[int, str]]:
    """The caches the `--cache-config NAME,...` flags among `args` name, with the index of the item that holds
    each name (the flag's own with `=`, else the next one)."""
    names = []
    for index, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag != CACHE_CONFIG_FLAG:
            continue
        if not equals:
            index, value = index + 1, args[index + 1] if index + 1 < len(args) else ""
        names.append((index, value.split(",", 1)[0]))
    return names


def cache_name_problems(args: list[str]) -> list[str]:
    """Why the caches `--cache-config` names cannot be caches' names."""
    return [
        f"item {index}: {problem}"
        for index, name in cache_config_names(args)
        if (problem := component_name_problem("cache", name))
    ]
