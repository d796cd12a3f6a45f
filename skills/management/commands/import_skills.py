from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from skills.models import SkillSource
from skills.services import ImportReport, skill_import_paths


def write_report(stdout: OutputWrapper, stderr: OutputWrapper, report: ImportReport, *,
                 style: Any, conflicts_fail: bool = True) -> None:
    """The summary both import commands print: what was added, skipped and rejected, why."""
    if report.added:
        stdout.write(style.SUCCESS(f"Added ({len(report.added)}):"))
        for path, skill in report.added:
            stdout.write(f"  + {skill.ref}  ({path})")
    if report.skipped:
        stdout.write(f"Skipped, already in the registry with the same content ({len(report.skipped)}):")
        for path, skill in report.skipped:
            stdout.write(f"  = {skill.ref}  ({path})")
    for path, warning in report.warnings:
        stdout.write(style.WARNING(f"  ! {path}: {warning}"))
    if report.conflicts:
        out = stderr if conflicts_fail else stdout
        out.write((style.ERROR if conflicts_fail else style.WARNING)(
            f"{'Rejected' if conflicts_fail else 'Kept the registry copy'}: same version, "
            f"different content ({len(report.conflicts)}):"))
        for path, message in report.conflicts:
            out.write(f"  x {path}: {message}")
    if report.rejected:
        stderr.write(style.ERROR(f"Rejected ({len(report.rejected)}):"))
        for path, problems in report.rejected:
            stderr.write(f"  x {path}")
            for problem in problems:
                stderr.write(f"      {problem}")
    rejected = len(report.rejected) + (len(report.conflicts) if conflicts_fail else 0)
    stdout.write(f"{len(report.added)} added, {len(report.skipped)} skipped, {rejected} rejected.")


class Command(BaseCommand):
    help = ("Import skills from manifest.json files, bundle folders and .zip bundles (folders "
            "are searched recursively). Prints what was added, skipped and rejected; exits "
            "with status 1 when anything was rejected.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
        parser.add_argument("--user", help="Record this username as the one who added them.")

    def handle(self, *args: Any, paths: list[Path], user: str | None = None,
               **options: Any) -> None:
        created_by = None
        if user:
            created_by = get_user_model().objects.filter(username=user).first()
            if created_by is None:
                raise CommandError(f"No user named {user!r}; leave out --user or create it first.")
        report = skill_import_paths(paths=paths, origin=SkillSource.COMMAND, created_by=created_by)
        write_report(self.stdout, self.stderr, report, style=self.style)
        failed = len(report.rejected) + len(report.conflicts)
        if failed:
            raise CommandError(f"{failed} skill source(s) rejected; nothing of them was imported.",
                               returncode=1)
