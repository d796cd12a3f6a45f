from django.urls import path

from . import views

app_name = "skills"

urlpatterns = [
    path("", views.catalog, name="catalog"),
    path("import/", views.import_skill, name="import"),
    # one skill: its latest version, a given version, and their exports
    path("<str:name>/", views.detail, name="detail"),
    path("<str:name>/<str:version>/", views.detail, name="version"),
    path("<str:name>/<str:version>/manifest.json", views.manifest_download, name="manifest"),
    path("<str:name>/<str:version>/bundle.zip", views.bundle_download, name="bundle"),
]
