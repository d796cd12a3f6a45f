"""The skill registry: every version of every skill, as imported and validated.

A row is one ``skill_name@version``. The manifest is validated by the protocol core
(:mod:`delegations.protocol.manifest`) before a row is written; the row keeps the raw text
as submitted, the normalized manifest, and the fields the catalog filters on, copied out
of it. "Latest" follows semantic-version precedence (1.10.0 beats 1.9.0; a release beats
its prereleases), never upload order: :meth:`SkillQuerySet.refresh_latest` recomputes the
``is_latest`` flag with the protocol's :class:`~delegations.protocol.manifest.SemVer`
whenever a version is added or removed, so the catalog reads it with an indexed filter.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db import models
from django.db.models import Case, Count, F, IntegerField, Value, When, Window
from django.db.models.functions import Lower
from django.urls import reverse

from delegations.protocol.capabilities import CAPABILITY_DESCRIPTIONS, KNOWN_CAPABILITIES
from delegations.protocol.criteria import criterion_reading, parse_criterion
from delegations.protocol.errors import ErrorCode, Issue, ProtocolError
from delegations.protocol.manifest import (
    MANIFEST_NAME,
    SUBAGENT_TYPES,
    EntryPointKind,
    SemVer,
    SkillManifest,
    bundle_path_problem,
    bundle_zip,
    latest_version,
    manifest_json,
    parse_entry_point,
)

from .schema_tables import SchemaRow, schema_rows

if TYPE_CHECKING:
    from delegations.protocol.manifest import SkillBundle

# What listings never need: left out of catalog and version-list queries.
LARGE_FIELDS = ("manifest", "raw_manifest", "instructions", "input_schema", "output_schema")
# Catalog search scans a covering index holding this text (see Skill.Meta.indexes); the
# cap keeps each entry under PostgreSQL's B-tree entry size limit.
SEARCH_TEXT_LIMIT = 500

# /skills/<name>/ would collide with these pages of the catalog.
RESERVED_NAMES = frozenset({"import"})
MAX_PAGE = 1_000_000  # far past any real catalog; keeps offsets inside a 64-bit integer


def content_hash(bundle: SkillBundle) -> str:
    """What "the same content" means for a re-import: the normalized manifest (schemas
    normalized, the entry point's instruction text included) plus every other bundle file.

    Formatting, key order and shorthand-vs-JSON-Schema spelling do not count, so the
    manifest.json exported from a bundle re-imports as identical to that bundle.
    """
    digest = hashlib.sha256()
    digest.update(json.dumps(bundle.manifest.to_dict(), sort_keys=True,
                             separators=(",", ":")).encode())
    for path, data in sorted(extra_files(bundle).items()):
        digest.update(b"\0" + path.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def extra_files(bundle: SkillBundle) -> dict[str, bytes]:
    """Bundle files other than manifest.json and the entry point's instructions, which the
    manifest itself carries."""
    skip = {MANIFEST_NAME}
    entry = bundle.manifest.entry
    if entry.kind is EntryPointKind.INSTRUCTIONS and entry.path:
        skip.add(entry.path)
    return {path: data for path, data in bundle.files.items() if path not in skip}


def search_text_for(manifest: SkillManifest) -> str:
    """What catalog search matches: name, tags, then as much description as fits."""
    text = " ".join([manifest.skill_name, *manifest.tags, manifest.description or ""]).lower()
    return text[:SEARCH_TEXT_LIMIT]


def refusal(issues: list[Issue]) -> ProtocolError:
    """The ERR_INVALID_PACKET that refuses a run of a skill, led by its first issue."""
    first = issues[0]
    return ProtocolError(ErrorCode.INVALID_PACKET, f"{first.field}: {first.message}", issues=issues)


def approval_required_capabilities() -> frozenset[str]:
    return frozenset(settings.HANDOFF_APPROVAL_REQUIRED_CAPABILITIES)



class SkillSource(models.TextChoices):
    UPLOAD = "upload", "browser upload"
    API = "api", "API"
    BUNDLE = "bundle", "bundle"
    COMMAND = "command", "import_skills command"
    BUILTIN = "builtin", "built-in"


# The protocol owns the list of subagent types (coder, researcher, reviewer, executor, planner, critic, verifier).
SUBAGENT_TYPE_CHOICES = [(name, name) for name in SUBAGENT_TYPES]


def _page_number(value: int | str | None) -> int:
    """A page number from a query string; anything unusable means the first page."""
    try:
        return min(max(int(value or 1), 1), MAX_PAGE)
    except (TypeError, ValueError):
        return 1


class _CountedPaginator(Paginator):
    """A paginator told its total instead of counting (the page query counted already)."""

    def __init__(self, count: int, per_page: int) -> None:
        super().__init__([], per_page)
        self.__dict__["count"] = count  # fills the cached_property


class SkillQuerySet(models.QuerySet["Skill"]):
    def latest_versions(self) -> SkillQuerySet:
        """One row per skill name: its latest version (see the module docstring)."""
        return self.filter(is_latest=True)

    def catalog(self, *, q: str = "", capability: str = "", subagent_type: str = "",
                requires_approval: bool | None = None, tag: str = "") -> SkillQuerySet:
        """The catalog's query: latest versions matching every given filter. The catalog
        page and ``GET /api/skills`` both use it, so they answer the same."""
        rows = self.latest_versions()
        if capability:
            rows = rows.with_capability(capability)
        if tag:
            rows = rows.with_tag(tag)
        if subagent_type:
            rows = rows.filter(subagent_type=subagent_type)
        if requires_approval is not None:
            rows = rows.filter(requires_approval=requires_approval)
        return rows.search(q) if q.strip() else rows.order_by(Lower("name"), "name")

    def paginate(self, number: int | str | None, per_page: int, *, clamp: bool = True
                 ) -> Page[Skill]:
        """One page of this query, answered from the indexes as far as possible: first the
        page's ids and the total, then only the page's rows.

        With ``clamp``, a page number out of range gives the nearest page (the browser);
        without it, a page past the end is empty (the API).
        """
        wanted = _page_number(number)
        ids, total = self._page_ids(wanted, per_page)
        paginator = _CountedPaginator(total, per_page)
        if clamp and wanted > paginator.num_pages:
            wanted = paginator.num_pages
            ids, _ = self._page_ids(wanted, per_page)
        rows = self.model._default_manager.defer(*LARGE_FIELDS).in_bulk(ids)
        return Page([rows[pk] for pk in ids if pk in rows], wanted, paginator)

    def _page_ids(self, number: int, per_page: int) -> tuple[list[int], int]:
        offset = (number - 1) * per_page
        ids = self.values_list("pk", flat=True)
        if "relevance" not in self.query.annotations:
            # Ordered by an index: the page stops after per_page rows, and COUNT walks the
            # index alone; both are cheaper than a window count that buffers every row.
            return list(ids[offset:offset + per_page]), self.count()
        # A ranked search reads every match to sort them anyway: count them in the same
        # pass (a window count) instead of scanning the search index a second time.
        found = list(self.annotate(catalog_total=Window(Count("pk")))
                     .values_list("pk", "catalog_total")[offset:offset + per_page])
        if found:
            return [pk for pk, _ in found], found[0][1]
        return [], self.count()  # an empty page says nothing about the total

    def search(self, query: str) -> SkillQuerySet:
        """Rows whose name, description or tags contain every word of ``query``; exact and
        prefix name matches first."""
        words = query.lower().split()
        if not words:
            return self
        matches = self
        for word in words:
            matches = matches.filter(search_text__contains=word)
        phrase = " ".join(words)
        return matches.annotate(relevance=Case(
            When(name__iexact=phrase, then=Value(0)),
            When(name__istartswith=phrase, then=Value(1)),
            When(name__icontains=phrase, then=Value(2)),
            default=Value(3), output_field=IntegerField(),
        )).order_by("relevance", Lower("name"), "name")

    def with_capability(self, capability: str) -> SkillQuerySet:
        return self.filter(capability_rows__name=capability)

    def with_tag(self, tag: str) -> SkillQuerySet:
        return self.filter(tag_rows__name=tag)

    def versions_of(self, name: str) -> list[Skill]:
        """Every version of ``name``, highest precedence first."""
        rows = list(self.filter(name=name).defer(*LARGE_FIELDS))
        return sorted(rows, key=lambda row: row.semver, reverse=True)

    def manifest_for(self, ref: str) -> SkillManifest | None:
        """What the runner's skill resolver needs: ``name@version`` (or ``name`` for the
        latest) as the protocol's SkillManifest, or None when the registry has no such skill.

        Raises ProtocolError(ERR_INVALID_PACKET), as :meth:`for_run` does for a root run,
        when the version's instruction file is missing: a child would run without them."""
        skill = self.resolve(ref)
        if skill is None:
            return None
        missing = skill.missing_instructions_issue
        if missing is not None:
            raise refusal([missing])
        return skill.to_manifest()

    def for_run(self, ref: str, input_data: dict[str, Any]) -> Skill:
        """The skill a run naming ``ref`` executes with (``name@version``, or ``name`` for
        the latest), its ``input_data`` checked against the skill's input_schema.

        Raises ProtocolError(ERR_INVALID_PACKET) naming the skill and listing every problem:
        no such skill or version, an instruction file missing from its bundle, input that
        breaks the input_schema."""
        skill = self.resolve(ref)
        if skill is None:
            message = self._unknown_skill_message(ref.strip())
            raise ProtocolError(ErrorCode.INVALID_PACKET, message, issues=[Issue("skill", message)])
        issues = skill.run_issues(input_data)
        if issues:
            raise refusal(issues)
        return skill

    def _unknown_skill_message(self, ref: str) -> str:
        name, _, version = ref.partition("@")
        known = [row.version for row in self.versions_of(name)]
        if not known:
            return (f"Skill {name!r} is not in the registry; import it first (Skills, \"Import a "
                    "skill\", or POST /api/skills), or name a registered skill as name@version.")
        if not version:
            return (f"Skill {name} has no latest release in the registry (it has "
                    f"{', '.join(known[:10])}); name one of those as {name}@version.")
        return (f"Skill {name} has no version {version!r} in the registry (it has "
                f"{', '.join(known[:10])}); name one of those, or {name} alone for the latest.")

    def resolve(self, ref: str) -> Skill | None:
        """``name@version`` exactly, or ``name`` alone for its latest version."""
        name, _, version = ref.strip().partition("@")
        rows = self.filter(name=name)
        rows = rows.filter(version=version) if version else rows.filter(is_latest=True)
        return rows.first()

    def refresh_latest(self, name: str) -> Skill | None:
        """Mark the latest version of ``name`` by semver precedence; returns it."""
        versions = dict(self.filter(name=name).values_list("version", "pk"))
        chosen = latest_version(versions)
        chosen_pk = versions.get(chosen) if chosen is not None else None
        self.filter(name=name).exclude(pk=chosen_pk).filter(is_latest=True).update(is_latest=False)
        if chosen_pk is None:
            return None
        self.filter(pk=chosen_pk, is_latest=False).update(is_latest=True)
        return self.get(pk=chosen_pk)

    def capability_names(self) -> list[str]:
        """Every capability some skill declares, plus the ones Handoff knows."""
        used = SkillCapability.objects.values_list("name", flat=True).distinct()
        return sorted(KNOWN_CAPABILITIES | set(used))


class Skill(models.Model):
    """One version of a skill. Create rows through :func:`skills.services.skill_import`."""

    name = models.CharField(max_length=100, help_text="skill_name from the manifest.")
    version = models.CharField(max_length=128, help_text="Semantic version, e.g. 1.2.0.")
    # Semver components, so the database can order versions (prerelease precedence beyond
    # "a release beats its prereleases" is settled by SemVer in Python).
    version_major = models.PositiveBigIntegerField(editable=False)
    version_minor = models.PositiveBigIntegerField(editable=False)
    version_patch = models.PositiveBigIntegerField(editable=False)
    version_prerelease = models.CharField(max_length=128, blank=True, editable=False)
    is_prerelease = models.BooleanField(default=False, editable=False)
    is_latest = models.BooleanField(
        default=False, editable=False,
        help_text="The version that `name` alone means: the highest release by semver.")

    subagent_type = models.CharField(max_length=20, blank=True, choices=SUBAGENT_TYPE_CHOICES)
    requires_approval = models.BooleanField(
        default=False, help_text="Uses of approval-required capabilities wait for a person.")
    source = models.CharField(max_length=10, choices=SkillSource.choices)
    # Lower-cased name, tags and description (cut at SEARCH_TEXT_LIMIT): what search matches.
    search_text = models.CharField(max_length=SEARCH_TEXT_LIMIT, editable=False, default="")
    description = models.TextField(blank=True)
    capabilities = models.JSONField(default=list, blank=True)
    tags = models.JSONField(default=list, blank=True)
    entry_point = models.CharField(max_length=255)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="skills_added")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    content_hash = models.CharField(max_length=64, editable=False)
    warnings = models.JSONField(default=list, blank=True,
                                help_text="What validation accepted but flagged.")
    # The large columns come last on purpose: SQLite stores a row's columns in order and
    # moves what does not fit in a page to overflow pages, so the columns that catalog
    # search scans (above) stay on the row's first page and a scan never follows overflow.
    input_schema = models.JSONField(default=dict, help_text="Normalized JSON Schema.")
    output_schema = models.JSONField(default=dict, help_text="Normalized JSON Schema.")
    instructions = models.TextField(blank=True, help_text="The entry point's instruction text.")
    manifest = models.JSONField(help_text="The validated, normalized manifest (what export gives).")
    raw_manifest = models.TextField(help_text="manifest.json exactly as it was submitted.")

    objects = SkillQuerySet.as_manager()

    class Meta:
        ordering = ["name", "-version_major", "-version_minor", "-version_patch", "-is_prerelease"]
        constraints = [models.UniqueConstraint(fields=["name", "version"],
                                               name="skill_name_version_unique")]
        indexes = [
            # The catalog's default order (case-insensitive name) among latest versions.
            models.Index(F("is_latest"), Lower("name"), F("name"), name="skill_latest_name"),
            # Search: a scan of this covering index instead of the table (rows carry the
            # manifest and are much wider); name is here for ranking exact/prefix matches.
            models.Index(fields=["is_latest", "search_text", "name"], name="skill_search"),
            models.Index(fields=["is_latest", "subagent_type", "requires_approval"],
                         name="skill_latest_type"),
            models.Index(fields=["is_latest", "requires_approval"], name="skill_latest_approval"),
            models.Index(fields=["created_at"], name="skill_created"),
        ]

    def __str__(self) -> str:
        return self.ref

    def get_absolute_url(self) -> str:
        return reverse("skills:version", args=[self.name, self.version])

    # -- building ------------------------------------------------------------------------
    @classmethod
    def from_bundle(cls, bundle: SkillBundle, *, raw_manifest: str, source: str,
                    created_by: Any = None, warnings: list[str] | None = None) -> Skill:
        """An unsaved row for a validated bundle (files and labels are added on save by
        :func:`skills.services.skill_import`)."""
        manifest = bundle.manifest
        semver = manifest.semver
        return cls(
            name=manifest.skill_name, version=manifest.version,
            version_major=semver.major, version_minor=semver.minor, version_patch=semver.patch,
            version_prerelease=".".join(semver.prerelease), is_prerelease=bool(semver.prerelease),
            description=manifest.description or "", subagent_type=manifest.subagent_type or "",
            requires_approval=manifest.requires_approval, capabilities=list(manifest.capabilities),
            tags=list(manifest.tags), entry_point=manifest.entry_point,
            input_schema=manifest.input_schema, output_schema=manifest.output_schema,
            instructions=manifest.instructions or "", manifest=manifest.to_dict(),
            raw_manifest=raw_manifest,
            warnings=list(manifest.warnings) if warnings is None else warnings,
            content_hash=content_hash(bundle),
            search_text=search_text_for(manifest),
            source=source, created_by=created_by,
        )

    # -- reading -------------------------------------------------------------------------
    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def semver(self) -> SemVer:
        return SemVer.parse(self.version)

    @property
    def latest_url(self) -> str:
        """The page that always shows the latest version (a skill named like one of the
        catalog's own pages is reached through its versioned address instead)."""
        if self.name in RESERVED_NAMES:
            return self.get_absolute_url()
        return reverse("skills:detail", args=[self.name])

    def to_manifest(self) -> SkillManifest:
        """The protocol's SkillManifest for this row (what the runner consumes and export
        writes), carrying the entry point's instruction text."""
        manifest = SkillManifest.model_validate(self.manifest, context={
            "approval_required": frozenset(settings.HANDOFF_APPROVAL_REQUIRED_CAPABILITIES)})
        if self.instructions and not manifest.instructions:
            manifest = manifest.model_copy(update={"instructions": self.instructions})
        return manifest

    @property
    def missing_instructions_issue(self) -> Issue | None:
        """Why no run may execute this version, if it may not: an instruction-file entry
        point whose file was not part of the import leaves a run nothing to follow."""
        try:
            entry = parse_entry_point(self.entry_point)
        except ValueError:
            return None
        if entry.kind is not EntryPointKind.INSTRUCTIONS or self.instructions.strip():
            return None
        return Issue("skill", (
            f"skill {self.ref}'s instruction file {self.entry_point} is missing from its "
            "bundle (only manifest.json was imported); import the bundle with both files "
            "under a new version, then name that version"))

    def run_issues(self, input_data: dict[str, Any]) -> list[Issue]:
        """Why a run of this version with ``input_data`` cannot start (empty when it can)."""
        missing = self.missing_instructions_issue
        issues: list[Issue] = [missing] if missing is not None else []
        issues.extend(Issue(issue.field, f"{issue.message} (skill {self.ref}'s input_schema)")
                      for issue in self.to_manifest().input_issues(input_data))
        return issues

    @property
    def entry_kind(self) -> str:
        try:
            return str(parse_entry_point(self.entry_point).kind)
        except ValueError:
            return "unknown"

    @property
    def unknown_capabilities(self) -> list[str]:
        return [name for name in self.capabilities if name not in KNOWN_CAPABILITIES]

    @property
    def approval_capabilities(self) -> list[str]:
        required = approval_required_capabilities()
        return [name for name in self.capabilities if name in required]

    def capability_badges(self) -> list[dict[str, Any]]:
        """Each declared capability with what it allows and whether it needs a person."""
        required = approval_required_capabilities()
        return [{"name": name, "description": CAPABILITY_DESCRIPTIONS.get(name, ""),
                 "needs_approval": name in required, "known": name in KNOWN_CAPABILITIES}
                for name in self.capabilities]

    def input_rows(self) -> list[SchemaRow]:
        return schema_rows(self.input_schema)

    def output_rows(self) -> list[SchemaRow]:
        return schema_rows(self.output_schema)

    def criteria_lines(self) -> list[str]:
        """The success criteria every run is checked against, as a person reads them: text
        as its author wrote it, a structured criterion in the words of its kind, and what
        happens when one that a person reviews fails."""
        lines = []
        for raw in self.manifest.get("success_criteria") or []:
            try:
                criterion = parse_criterion(raw)
            except ProtocolError:
                criterion = None
            reviewed = criterion is not None and criterion.review   # a confident criterion always is
            lines.append(criterion_reading(raw, criterion)
                         + ("; otherwise a person confirms or corrects the answer" if reviewed else ""))
        return lines

    # -- export --------------------------------------------------------------------------
    def export_manifest_json(self) -> str:
        return manifest_json(self.to_manifest())

    def export_bundle_zip(self) -> bytes:
        """manifest.json, the entry point's instruction file and every other bundle file."""
        # a file stored before bundle names were checked, under a name refused now (.git/...),
        # is left out rather than handed on
        files: dict[str, bytes | str] = {row.path: bytes(row.content) for row in self.files.all()
                                         if bundle_path_problem(row.path) is None}
        entry = parse_entry_point(self.entry_point)
        if entry.kind is EntryPointKind.INSTRUCTIONS and entry.path and self.instructions:
            files.setdefault(entry.path, self.instructions)
        return bundle_zip(self.to_manifest(), files)

    @property
    def bundle_filename(self) -> str:
        return f"{self.name}-{self.version}.zip"


class SkillFile(models.Model):
    """A file of a skill's bundle other than manifest.json and the instruction file (whose
    text the manifest carries): reference material, examples, scripts kept for export."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=255)
    content = models.BinaryField()
    size = models.PositiveIntegerField()

    class Meta:
        ordering = ["path"]
        constraints = [models.UniqueConstraint(fields=["skill", "path"], name="skill_file_unique")]

    def __str__(self) -> str:
        return f"{self.skill.ref}:{self.path}"


class SkillCapability(models.Model):
    """One capability a skill version declares: an indexed row so the catalog filters on it
    without scanning JSON (SQLite cannot index inside a JSON list)."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="capability_rows")
    name = models.CharField(max_length=100)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "skill"],
                                               name="skill_capability_unique")]

    def __str__(self) -> str:
        return self.name


class SkillTag(models.Model):
    """One tag of a skill version, indexed like :class:`SkillCapability`."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="tag_rows")
    name = models.CharField(max_length=100)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "skill"], name="skill_tag_unique")]

    def __str__(self) -> str:
        return self.name
