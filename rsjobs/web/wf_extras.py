"""Two read-only workflow routes the web app adds to those of ``rsjobs.workflows.http``:

- ``GET /workflows/{wf_id}/plan``: the stages the workflow was started with (labels,
  queues, gates, items), so a frontend can draw the stage list with its gates;
- ``GET /workflows/{wf_id}/assets/{version}/{stage}/{item}``: the file of one recorded
  asset, served only when the app has an **asset root** (``create_app(asset_root=...)``,
  ``rsjobs web --asset-root DIR``) and only if the asset's reference, resolved (``..`` and
  symbolic links included), is a regular file under that root.

The asset route takes no path from the client: it looks the asset up by its slot in the
workflow's asset hash, so a client can only fetch files that a task of a workflow it may
see recorded. Relative references are resolved against the web process's working
directory. Access follows the other workflow routes (another owner's workflow is a 404);
``?access_token=`` is accepted because ``<img src>`` cannot send headers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route

from ..errors import ConfigError
from ..workflows.client import WorkflowClient, validate_workflow_id
from ..workflows.plan import Plan, decode_plan
from ..workflows.schemas import decode_asset
from .auth import Auth, Principal, require_principal
from .http import ApiError, answering, json_response

__all__ = [
    "MEDIA_TYPES",
    "PlanItem",
    "PlanStage",
    "WorkflowPlan",
    "check_asset_root",
    "workflow_extra_routes",
]

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_VERSION = re.compile(r"[1-9][0-9]{0,6}")

#: media types served by suffix; anything else is sent as an attachment
MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".mp4": "video/mp4",
    ".webm": "video/webm",
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
}
_FILE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    # a generated file must never run as a page of this origin
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "private, max-age=300",
}


class PlanItem(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a stage: its item name and the kind of asset it makes."""

    item: str
    kind: str = ""


class PlanStage(msgspec.Struct, frozen=True, kw_only=True):
    """One stage: ``gate`` = the user confirms it before the next stage starts."""

    name: str
    label: str
    queue: str
    gate: bool
    max_retries: int
    items: list[PlanItem]


class WorkflowPlan(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /workflows/{id}/plan``: the stages the workflow was started with, in order."""

    id: str
    definition: str
    revision: int
    max_versions: int
    stages: list[PlanStage]


def plan_view(wf_id: str, plan: Plan) -> WorkflowPlan:
    return WorkflowPlan(
        id=wf_id,
        definition=plan.definition,
        revision=plan.revision,
        max_versions=plan.max_versions,
        stages=[
            PlanStage(
                name=s.name,
                label=s.label or s.name,
                queue=s.queue,
                gate=s.gate,
                max_retries=s.max_retries,
                items=[PlanItem(item=t.item, kind=t.kind) for t in s.tasks],
            )
            for s in plan.stages
        ],
    )


def check_asset_root(root: str | os.PathLike[str] | None) -> Path | None:
    """The asset root, resolved; :class:`rsjobs.ConfigError` unless it is a directory."""
    if root is None:
        return None
    path = Path(root).expanduser()
    if not path.is_dir():
        raise ConfigError(f"asset root {str(root)!r} is not a directory")
    return path.resolve(strict=True)


Handler = Callable[[Request], Awaitable[Response]]


class WorkflowExtras:
    """The handlers, bound to the app's workflow client, token table and asset root."""

    def __init__(self, client: WorkflowClient, auth: Auth, asset_root: Path | None) -> None:
        self.client = client
        self.auth = auth
        self.root = asset_root

    def principal(
        self, request: Request, *, allow_query: bool = False, params: tuple[str, ...] = ()
    ) -> Principal:
        return require_principal(self.auth, request, allow_query=allow_query, params=params)

    async def visible_plan(self, request: Request, who: Principal) -> tuple[str, Plan]:
        """The workflow's id and plan; 404 unless it exists and ``who`` may see it."""
        try:
            wf_id = validate_workflow_id(request.path_params["wf_id"])
        except ConfigError:
            raise ApiError(
                400, "invalid_id", "a workflow id is 32 lowercase hexadecimal characters"
            ) from None
        status, owner, raw = await self.client.redis.hmget(
            self.client.keys.workflow(wf_id), ["status", "owner", "plan"]
        )
        if status is None or raw is None or not who.may_see(owner or ""):
            raise ApiError(404, "not_found", f"no such workflow: {wf_id}")
        return wf_id, decode_plan(raw)

    async def plan(self, request: Request) -> Response:
        who = self.principal(request)
        wf_id, plan = await self.visible_plan(request, who)
        return json_response(plan_view(wf_id, plan))

    async def asset(self, request: Request) -> Response:
        who = self.principal(request, allow_query=True)
        p = request.path_params
        version, stage, item = p["version"], p["stage"], p["item"]
        valid = _VERSION.fullmatch(version) and _NAME.fullmatch(stage) and _NAME.fullmatch(item)
        if not valid:
            raise ApiError(
                400,
                "invalid_asset",
                "an asset is named by its version (a positive integer), stage and item "
                "(1-64 letters, digits, '_', '.', '-')",
            )
        wf_id, plan = await self.visible_plan(request, who)
        if self.root is None:
            raise ApiError(404, "not_found", "this server serves no asset files (no asset root)")
        try:
            index = plan.stage_index(stage)
        except ValueError:
            raise ApiError(404, "not_found", f"no stage {stage!r} in this workflow") from None
        raw = await self.client.redis.hget(
            self.client.keys.workflow_assets(wf_id), f"{version}:{index}:{item}"
        )
        if raw is None:
            raise ApiError(404, "not_found", f"no asset {stage}/{item} in version {version}")
        path = self.file_of(decode_asset(raw).ref)
        media = MEDIA_TYPES.get(path.suffix.lower())
        headers = dict(_FILE_HEADERS)
        if media is None:
            media = "application/octet-stream"
            headers["Content-Disposition"] = "attachment"
        return FileResponse(path, media_type=media, headers=headers)

    def file_of(self, ref: str) -> Path:
        """The file of an asset reference: a regular file under the asset root, else 4xx."""
        assert self.root is not None
        if not ref or "\x00" in ref or "://" in ref:
            raise ApiError(404, "not_found", "this asset is not a file this server serves")
        # non-strict resolve: '..' and symbolic links (of the part that exists) are resolved
        path = Path(os.path.abspath(ref)).resolve()
        if not path.is_relative_to(self.root):
            raise ApiError(403, "forbidden", "this asset's file is outside the asset root")
        if not path.is_file():
            raise ApiError(404, "not_found", "this asset's file does not exist (any more)")
        return path


def workflow_extra_routes(
    client: WorkflowClient, auth: Auth, *, asset_root: Path | None = None
) -> list[BaseRoute]:
    """The plan and asset routes (``asset_root`` from :func:`check_asset_root`)."""
    x = WorkflowExtras(client, auth, asset_root)
    return [
        Route("/workflows/{wf_id}/plan", answering(x.plan), methods=["GET"]),
        Route(
            "/workflows/{wf_id}/assets/{version}/{stage}/{item}",
            answering(x.asset),
            methods=["GET"],
            name="workflow_asset",
        ),
    ]
