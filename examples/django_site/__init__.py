"""Recipe: rsjobs in a Django site: a view submits a task with :class:`rsjobs.SyncClient`
(safe under Django's threaded servers), the task's owner is the logged-in user, and a
template shows its state, progress and result.

Run it (with ``rsjobs dev examples.demo_tasks:tasks -q gpu`` in another shell)::

    export RSJOBS_URL=redis://127.0.0.1:PORT/0     # the line rsjobs dev printed
    python -m examples.django_site migrate
    python -m examples.django_site createsuperuser
    python -m examples.django_site runserver 8002  # log in at /admin/, then open /jobs/
"""
