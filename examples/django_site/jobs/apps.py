from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "examples.django_site.jobs"
    label = "jobs"
