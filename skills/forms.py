from __future__ import annotations

from typing import Any

from django import forms
from django.core.files.uploadedfile import UploadedFile
from django.http import QueryDict

from delegations.protocol.manifest import SUBAGENT_TYPES

from .models import SkillSource
from .services import RegistryError, check_upload_size

# Django refuses form fields over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) before any view
# runs; the textarea stops the browser short of that, files go through the upload limit.
PASTE_LIMIT = 2_000_000


class CatalogFilterForm(forms.Form):
    """The catalog's query string. A value that does not fit is dropped, not an error:
    a stale bookmark still shows the catalog."""

    APPROVAL_CHOICES = [("", "any"), ("yes", "needs approval"), ("no", "no approval needed")]

    q = forms.CharField(required=False, max_length=200, strip=True)
    capability = forms.CharField(required=False, max_length=100, strip=True)
    subagent_type = forms.ChoiceField(required=False,
                                      choices=[("", "any type")] + [(t, t) for t in SUBAGENT_TYPES])
    requires_approval = forms.ChoiceField(required=False, choices=APPROVAL_CHOICES)
    tag = forms.CharField(required=False, max_length=100, strip=True)

    def filters(self) -> dict[str, Any]:
        """Keyword arguments for ``Skill.objects.catalog`` from the valid fields."""
        self.is_valid()
        data = self.cleaned_data
        approval = {"yes": True, "no": False}.get(data.get("requires_approval") or "")
        return {"q": data.get("q") or "", "capability": data.get("capability") or "",
                "subagent_type": data.get("subagent_type") or "", "tag": data.get("tag") or "",
                "requires_approval": approval}

    def query_string(self, **changes: Any) -> str:
        """The canonical query string of these filters (empty values left out)."""
        self.is_valid()
        values = {name: self.cleaned_data.get(name) or "" for name in self.fields}
        values.update(changes)
        query = QueryDict(mutable=True)
        for name, value in values.items():
            if value not in ("", None):
                query[name] = str(value)
        return query.urlencode()


ZIP_SIGNATURE = b"PK"


def _wrong_kind(upload: UploadedFile, *, bundle: bool) -> str:
    """Why ``upload`` is not what its field takes, or "": a bundle is a zip; a manifest is
    JSON text (or a zip after all, read as a bundle)."""
    content = upload.read()
    upload.seek(0)
    name = upload.name or "The file"
    if content.startswith(ZIP_SIGNATURE):
        return ""
    if bundle:
        return (f"{name} is not a zip file. A bundle is a .zip with manifest.json and the entry point's "
                "instruction file; to import a manifest.json alone, upload it as the manifest.")
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return (f"{name} is neither a manifest.json (JSON text) nor a bundle (.zip). Upload the skill's "
                "manifest.json, or a zip of its folder.")
    return ""


class SkillImportForm(forms.Form):
    """Three ways to hand over one skill; exactly one must be used."""

    manifest_text = forms.CharField(
        required=False, strip=True, label="Paste manifest.json",
        widget=forms.Textarea(attrs={"rows": 14, "maxlength": PASTE_LIMIT, "spellcheck": "false",
                                     "placeholder": '{\n  "skill_name": "my-skill",\n  "version": '
                                                    '"1.0.0",\n  ...\n}'}))
    manifest_file = forms.FileField(
        required=False, label="Upload manifest.json",
        widget=forms.ClearableFileInput(attrs={"accept": ".json,application/json"}))
    bundle_file = forms.FileField(
        required=False, label="Upload a bundle (.zip)",
        help_text="A zip with manifest.json at its root (or in one folder) and the entry "
                  "point's instruction file.",
        widget=forms.ClearableFileInput(attrs={"accept": ".zip,application/zip"}))

    SOURCES = ("manifest_text", "manifest_file", "bundle_file")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        given = [name for name in self.SOURCES if data.get(name)]
        if not given:
            raise forms.ValidationError(
                "Nothing to import: paste a manifest, or choose a manifest.json or a bundle "
                ".zip to upload.")
        if len(given) > 1:
            raise forms.ValidationError(
                "Import one skill at a time: paste a manifest or upload one file, not several.")
        for name in ("manifest_file", "bundle_file"):
            upload: UploadedFile | None = data.get(name)
            if upload is None:
                continue
            try:
                check_upload_size(upload.size or 0, upload.name or "the file")
            except RegistryError as error:
                self.add_error(name, error.message)
                continue
            wrong = _wrong_kind(upload, bundle=name == "bundle_file")
            if wrong:
                self.add_error(name, wrong)
        return data

    def source(self) -> tuple[str | bytes, str]:
        """What to hand to ``skill_import`` and the origin to record. Only after is_valid()."""
        data = self.cleaned_data
        if data.get("manifest_text"):
            return data["manifest_text"], SkillSource.UPLOAD
        upload: UploadedFile = data.get("bundle_file") or data["manifest_file"]
        content = upload.read()
        is_bundle = bool(data.get("bundle_file")) or content.startswith(ZIP_SIGNATURE)  # a zip, whichever field
        return content, SkillSource.BUNDLE if is_bundle else SkillSource.UPLOAD
