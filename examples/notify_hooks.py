"""A notification hook: tell the user when an image task finished.

    rsjobs --namespace images hooks run examples.notify_hooks:hooks

The hook runs in ``rsjobs hooks run``, outside the transition: a slow or failing mail
server never delays a task's state change. It runs at least once per change, so it
deduplicates on ``event.delivery`` (here in memory; a real one would use its mail
provider's idempotency key or a database row).
"""

from __future__ import annotations

import logging

from rsjobs.hooks import HookEvent, Hooks

hooks = Hooks()
log = logging.getLogger("examples.notify")
_sent: set[str] = set()


def send_mail(to: str, subject: str, body: str) -> None:
    """Stands in for a mail client (an SMTP or provider call)."""
    log.info("mail to %s: %s: %s", to, subject, body)


@hooks.hook(on=["SUCCEEDED", "FAILED"], types=["image.*"], max_attempts=6)
def notify(event: HookEvent) -> None:
    if event.delivery in _sent:
        return
    task = event.task
    owner = task.owner if task is not None and task.owner else "someone"
    if event.state == "SUCCEEDED":
        body = f"your image is ready: {task.result if task is not None else '?'}"
    else:
        body = f"your image failed: {task.error if task is not None else '?'}"
    send_mail(owner, f"task {event.task_id} {event.state.lower()}", body)
    _sent.add(event.delivery)
