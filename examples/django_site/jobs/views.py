"""Submit an image job from a form; show its status. The owner of every task is the
logged-in user, and a user sees only their own tasks (another's answers 404, as a
missing one does)."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from rsjobs import ConfigError, PayloadError, TaskInfo, TaskNotFound

from .rsjobs_client import client

#: the queue the image workers serve (`rsjobs worker examples.demo_tasks:tasks -q gpu`)
QUEUE = "gpu"


def _owner(request: HttpRequest) -> str:
    return request.user.get_username()


def _visible(request: HttpRequest, task_id: str) -> TaskInfo:
    try:
        info = client().get(task_id)
    except (TaskNotFound, ConfigError):
        raise Http404("no such job") from None
    if info.owner != _owner(request):
        raise Http404("no such job")
    return info


@login_required
@require_http_methods(["GET", "POST"])
def submit(request: HttpRequest) -> HttpResponse:
    error = ""
    if request.method == "POST":
        prompt = request.POST.get("prompt", "").strip()
        try:
            tid = client().enqueue(
                "image.generate",
                {"prompt": prompt, "steps": int(request.POST.get("steps") or 8)},
                queue=QUEUE,
                owner=_owner(request),
            )
        except (ConfigError, PayloadError, ValueError) as exc:
            error = str(exc)
        else:
            return redirect("jobs:status", task_id=tid)
    return render(request, "jobs/submit.html", {"error": error}, status=400 if error else 200)


@login_required
def status(request: HttpRequest, task_id: str) -> HttpResponse:
    info = _visible(request, task_id)
    if request.method == "POST" and not info.terminal:
        client().cancel(task_id, f"cancelled by {_owner(request)}")
        return redirect("jobs:status", task_id=task_id)
    return render(request, "jobs/status.html", {"task": info})
