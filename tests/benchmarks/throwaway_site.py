"""The Django site on a throwaway SQLite database, for the benchmarks that time pages.

Importing it (before anything imports Django models) points HANDOFF_DATA_DIR at a new
temporary folder that is removed at exit, sets up Django and puts the project root on
``sys.path``; :data:`DATA_DIR` is that folder. A server started from the benchmark in a
subprocess inherits the environment, so it serves the same database.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DATA_DIR = tempfile.mkdtemp(prefix="handoff-bench-")
atexit.register(shutil.rmtree, DATA_DIR, ignore_errors=True)
os.environ["HANDOFF_DATA_DIR"] = DATA_DIR
os.environ.pop("DATABASE_URL", None)  # always the throwaway SQLite file
os.environ["ALLOWED_HOSTS"] = "testserver,127.0.0.1"
os.environ["DJANGO_SETTINGS_MODULE"] = "handoff_site.settings"
os.environ.setdefault("LOG_LEVEL", "WARNING")

import django  # noqa: E402

django.setup()
