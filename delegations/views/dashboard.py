from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from ..models import WorkerHeartbeat


def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "delegations/dashboard.html", {
        "workers_alive": WorkerHeartbeat.alive().count(),
    })
