"""Triton's rules on a config's batchers: the dynamic batcher (preferred sizes, priority levels, queue
policies) and the sequence batcher (control inputs, the oldest and direct strategies).

Apart from the rest of the config's checks because the batchers' settings are a world of their own:
Triton checks them in ValidateModelConfig's scheduler branch, and each is only read with its batcher.
"""

from __future__ import annotations

from collections import Counter

from ..protocol.triton_proto import model_config_pb2 as pb
from .findings import Findings

CORRID_TYPES = {pb.TYPE_UINT64, pb.TYPE_INT64, pb.TYPE_UINT32, pb.TYPE_INT32, pb.TYPE_STRING}
BOOLEAN_CONTROLS = (
    pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START,
    pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_END,
    pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_READY,
)
CONTROL_VALUE_LISTS = ("int32_false_true", "fp32_false_true", "bool_false_true")
CONTROL_VALUE_JSON = {
    "int32_false_true": "int32FalseTrue",
    "fp32_false_true": "fp32FalseTrue",
    "bool_false_true": "boolFalseTrue",
}


def check_dynamic_batching(config: pb.ModelConfig, path: str, found: Findings) -> None:
    batching = config.dynamic_batching
    for index, size in enumerate(batching.preferred_batch_size):
        if size <= 0:
            found.error(f"{path}.preferredBatchSize[{index}]", f"is {size}; preferred batch sizes must be >= 1")
        elif size > config.max_batch_size:
            found.error(
                f"{path}.preferredBatchSize[{index}]",
                f"is {size}, above maxBatchSize {config.max_batch_size}; lower it or raise maxBatchSize",
            )
    levels = batching.priority_levels
    if levels:
        if not 1 <= batching.default_priority_level <= levels:
            found.error(f"{path}.defaultPriorityLevel", f"must be in 1..{levels} (priorityLevels)")
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                found.error(
                    f"{path}.priorityQueuePolicy.{level}", f"priority level must be in 1..{levels} (priorityLevels)"
                )
    if batching.preserve_ordering:
        if levels > 1:
            found.error(f"{path}.preserveOrdering", "allows only one priority level: set priorityLevels to 0 or 1")
        policies = [("defaultQueuePolicy", batching.default_queue_policy)] + [
            (f"priorityQueuePolicy.{level}", policy) for level, policy in sorted(batching.priority_queue_policy.items())
        ]
        for name, policy in policies:
            if policy.default_timeout_microseconds and policy.timeout_action == pb.ModelQueuePolicy.DELAY:
                found.error(f"{path}.{name}.timeoutAction", "DELAY cannot be used with preserveOrdering; use REJECT")


def check_sequence_batching(config: pb.ModelConfig, path: str, found: Findings) -> None:
    batching = config.sequence_batching
    if config.response_cache.enable:
        found.error(
            f"{path.rsplit('.', 1)[0]}.responseCache.enable", "the response cache does not work with sequence batching"
        )
    names = Counter(control.name for control in batching.control_input)
    kinds: set[int] = set()
    for index, control_input in enumerate(batching.control_input):
        item = f"{path}.controlInput[{index}]"
        if not control_input.name:
            found.error(f"{item}.name", "every control input needs the name of its tensor")
        elif names[control_input.name] > 1:
            found.error(
                f"{item}.name", f"tensor '{control_input.name}' is listed in more than one controlInput; list it once"
            )
        for control_index, control in enumerate(control_input.control):
            _check_control(control, f"{item}.control[{control_index}]", kinds, found)
    if batching.HasField("oldest"):
        for index, size in enumerate(batching.oldest.preferred_batch_size):
            if not 1 <= size <= config.max_batch_size:
                found.error(
                    f"{path}.oldest.preferredBatchSize[{index}]",
                    f"is {size}; must be in 1..maxBatchSize ({config.max_batch_size})",
                )
    if batching.HasField("direct") and not 0.0 <= batching.direct.minimum_slot_utilization <= 1.0:
        found.error(f"{path}.direct.minimumSlotUtilization", "must be between 0 and 1")


def _check_control(control: pb.ModelSequenceBatching.Control, path: str, kinds: set[int], found: Findings) -> None:
    kind_name = pb.ModelSequenceBatching.Control.Kind.Name(control.kind)
    if control.kind in kinds:
        found.error(f"{path}.kind", f"{kind_name} is given more than once; each control kind goes to one tensor")
    kinds.add(control.kind)
    lists = [name for name in CONTROL_VALUE_LISTS if getattr(control, name)]
    if control.kind in BOOLEAN_CONTROLS:
        if len(lists) != 1:
            found.error(
                path,
                f"{kind_name} needs exactly one of int32FalseTrue, fp32FalseTrue or boolFalseTrue (the false and true "
                "values)",
            )
        elif len(getattr(control, lists[0])) != 2:
            found.error(
                f"{path}.{CONTROL_VALUE_JSON[lists[0]]}", "must hold exactly 2 values: [false value, true value]"
            )
    elif control.kind == pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID:
        if lists:
            found.error(
                path, "CONTROL_SEQUENCE_CORRID takes a dataType, not int32FalseTrue/fp32FalseTrue/boolFalseTrue"
            )
        if control.data_type not in CORRID_TYPES:
            found.error(
                f"{path}.dataType",
                "set TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING for the correlation id",
            )
