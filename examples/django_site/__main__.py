"""``python -m examples.django_site <command>``: Django's manage.py for the recipe."""

import os
import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_site.settings")
    execute_from_command_line(["manage.py", *sys.argv[1:]])
