"""The character workflow's definition: four stages, each on its own queue (so images
and videos can have their own worker pools), gates after the params and the images."""

from __future__ import annotations

import msgspec

from rsjobs.workflows import Stage, WorkflowDefinition, fan_out

__all__ = ["EMOTIONS", "QUEUES", "CharacterInput", "character", "character_pipeline"]

EMOTIONS = ("happy", "sad", "angry", "surprised", "afraid", "shy", "calm", "excited")

#: the queue of each stage
QUEUES = {"params": "params", "images": "images", "actions": "actions", "emotions": "emotions"}


class CharacterInput(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the user types in."""

    name: str
    background: str = ""
    description: str = ""


def character_pipeline(
    *, fail_rate: float = 0.1, flaky: tuple[str, ...] = ("angry",), speed: float = 1.0
) -> WorkflowDefinition:
    """``fail_rate``: chance that one attempt of a task hits a transient error (retried
    by the task's own policy); ``flaky``: emotions whose first run fails for good (the
    user retries them); ``speed``: latency multiplier of the stand-in generators."""

    def knobs(item: str) -> dict[str, object]:
        return {"item": item, "fail_rate": fail_rate, "flaky": item in flaky, "speed": speed}

    opts = {"max_attempts": 3, "backoff_base_ms": 200, "backoff_max_ms": 1000}
    return WorkflowDefinition(
        "character",
        [
            Stage(
                "params",
                fan_out("character.params", ["params"], kind="json", params=knobs, **opts),
                queue=QUEUES["params"],
                gate=True,
                label="generating parameters",
            ),
            Stage(
                "images",
                fan_out("character.image", ["front", "side"], kind="image", params=knobs, **opts),
                queue=QUEUES["images"],
                gate=True,
                label="generating images",
            ),
            Stage(
                "actions",
                fan_out("character.video", ["enter", "leave"], kind="video", params=knobs, **opts),
                queue=QUEUES["actions"],
                label="generating action videos",
            ),
            Stage(
                "emotions",
                fan_out("character.video", EMOTIONS, kind="video", params=knobs, **opts),
                queue=QUEUES["emotions"],
                max_retries=3,
                label="generating emotion videos",
            ),
        ],
        input_type=CharacterInput,
    )


#: the definition with its default knobs (``rsjobs workflows start
#: examples.character.pipeline:character --input '{"name": "Mei"}'``)
character = character_pipeline()
