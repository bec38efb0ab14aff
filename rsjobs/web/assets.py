"""Two read-only workflow routes beside those of ``workflows.py``:

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
from pathlib import Path

import msgspec
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route

from ..errors import ConfigError, CorruptWorkflow
from ..names import is_name
from ..workflows.plan import Plan, decode_plan
from ..workflows.schemas import decode_asset
from .auth import Principal
from .bodies import PlanItem, PlanStage, WorkflowPlan
from .handlers import Handlers, not_found
from .http import ApiError, json_response
from .service import Service

__all__ = ["MEDIA_TYPES", "asset_routes", "check_asset_root"]

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


class AssetApi(Handlers):
    """The handlers, bound to the app's :class:`Service` and asset root."""

    def __init__(self, service: Service, asset_root: Path | None) -> None:
        super().__init__(service)
        self.root = asset_root

    async def visible_plan(self, request: Request, who: Principal) -> tuple[str, Plan]:
        """The workflow's id and plan; 404 unless it exists and ``who`` may see it."""
        wf_id = self.workflow_id(request)
        _, _, raw = await self.visible_workflow(who, wf_id)
        if not raw:
            raise not_found("workflow", wf_id)
        try:
            return wf_id, decode_plan(raw)
        except msgspec.DecodeError as exc:
            raise CorruptWorkflow(wf_id, f"its plan does not decode ({exc})") from None

    async def plan(self, request: Request) -> Response:
        who = self.principal(request)
        wf_id, plan = await self.visible_plan(request, who)
        return json_response(plan_view(wf_id, plan))

    async def asset(self, request: Request) -> Response:
        who = self.principal(request, allow_query=True)
        p = request.path_params
        version, stage, item = p["version"], p["stage"], p["item"]
        valid = _VERSION.fullmatch(version) and is_name(stage) and is_name(item)
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
        store = await self.svc.store.at(wf_id)
        raw = await store.workflows.asset(wf_id, f"{version}:{index}:{item}")
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


def asset_routes(service: Service, asset_root: Path | None = None) -> list[BaseRoute]:
    """The plan and asset routes (``asset_root`` from :func:`check_asset_root`)."""
    x = AssetApi(service, asset_root)
    return [
        Route("/workflows/{wf_id}/plan", x.plan, methods=["GET"]),
        Route(
            "/workflows/{wf_id}/assets/{version}/{stage}/{item}",
            x.asset,
            methods=["GET"],
            name="workflow_asset",
        ),
    ]
