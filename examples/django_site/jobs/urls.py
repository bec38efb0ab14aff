from django.urls import path

from . import views

app_name = "jobs"
urlpatterns = [
    path("", views.submit, name="submit"),
    path("<str:task_id>/", views.status, name="status"),
]
