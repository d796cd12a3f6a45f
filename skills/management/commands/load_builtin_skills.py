from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from skills.models import SkillSource
from skills.services import BUILTIN_DIR, skill_import_paths

from .import_skills import write_report


class Command(BaseCommand):
    help = ("Load the built-in skill catalog (skills/builtin/): one skill per subagent type, "
            "the hand-off protocol's examples and one per approval-required capability. Safe to run again: "
            "versions already there are skipped.")

    def handle(self, *args: Any, **options: Any) -> None:
        report = skill_import_paths(paths=[BUILTIN_DIR], origin=SkillSource.BUILTIN)
        # A built-in whose version is already there with other content (an edited copy, or
        # an older Handoff's) is kept as it is: published versions never change.
        write_report(self.stdout, self.stderr, report, style=self.style, conflicts_fail=False)
        if report.rejected:
            raise CommandError("Some built-in skills are invalid; this is a bug in Handoff.",
                               returncode=1)
