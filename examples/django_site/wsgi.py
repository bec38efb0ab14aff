"""The WSGI entry point (``gunicorn --threads 8 examples.django_site.wsgi``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_site.settings")
application = get_wsgi_application()
