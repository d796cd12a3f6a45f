"""File edits, applied all or nothing: unified diffs and Targeted Replace Blocks.

Both forms are the hand-off protocol's File Edit Format.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegations.protocol.edits import (
    EditOutcome,
    FileDiff,
    ReplaceBlock,
    apply_edits,
    parse_edits,
)
from delegations.protocol.edits import files as edit_files
from delegations.protocol.errors import ErrorCode, ProtocolError

AUTH = "def login(user):\n    return check(user)\n\n\ndef logout(user):\n    return True\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "src").mkdir(parents=True)
    (root / "src" / "auth.py").write_text(AUTH)
    (root / "src" / "utils.py").write_text("A = 1\nB = 2\n")
    return root


def refused(root: Path, text: str) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        apply_edits(root, parse_edits(text))
    assert caught.value.code == ErrorCode.INVALID_EDIT
    return caught.value


def snapshot(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


# -- parsing unified diffs ------------------------------------------------------------------

TWO_FILE_DIFF = """I changed two files:

```diff
diff --git a/src/auth.py b/src/auth.py
index 1234567..89abcde 100644
--- a/src/auth.py
+++ b/src/auth.py
@@ -1,2 +1,2 @@
 def login(user):
-    return check(user)
+    return check(user, strict=True)
@@ -5,2 +5,3 @@ def logout(user):
 def logout(user):
-    return True
+    forget(user)
+    return True
--- a/src/utils.py
+++ b/src/utils.py
@@ -1,2 +1,2 @@
-A = 1
+A = 10
 B = 2
```

Both are small.
"""


def test_it_parses_a_git_diff_with_several_files_and_hunks() -> None:
    parsed = parse_edits(TWO_FILE_DIFF)
    assert [edit.path for edit in parsed] == ["src/auth.py", "src/utils.py"]
    auth = parsed[0]
    assert isinstance(auth, FileDiff)
    assert [(hunk.old_start, hunk.old_count, hunk.new_start, hunk.new_count)
            for hunk in auth.hunks] == [(1, 2, 1, 2), (5, 2, 5, 3)]
    assert auth.hunks[1].lines[-1] == ("+", "    return True")


def test_it_parses_creation_and_deletion_against_dev_null() -> None:
    parsed = parse_edits(
        "--- /dev/null\n+++ b/docs/new.md\n@@ -0,0 +1,2 @@\n+# Title\n+text\n"
        "--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n")
    created, deleted = parsed
    assert isinstance(created, FileDiff) and created.creates and created.path == "docs/new.md"
    assert isinstance(deleted, FileDiff) and deleted.deletes and deleted.path == "old.txt"


def test_it_reads_the_no_newline_marker_and_tab_separated_timestamps() -> None:
    (diff,) = parse_edits(
        "--- notes.txt\t2024-01-01 10:00:00\n+++ notes.txt\t2024-01-02 10:00:00\n"
        "@@ -1 +1 @@\n-old\n\\ No newline at end of file\n+new\n\\ No newline at end of file\n")
    assert isinstance(diff, FileDiff)
    assert diff.path == "notes.txt"
    hunk = diff.hunks[0]
    assert hunk.old_no_newline and hunk.new_no_newline


def test_a_text_without_edits_gives_no_edits() -> None:
    assert parse_edits("All done, no changes were needed.\n- a bullet\n+ another") == []


def test_a_hunk_without_file_headers_is_refused() -> None:
    with pytest.raises(ProtocolError, match="no '--- a/path'"):
        parse_edits("@@ -1,2 +1,2 @@\n-a\n+b\n")


# -- parsing replace blocks -----------------------------------------------------------------

REPLACE_BLOCKS = """FILE: src/auth.py
REPLACE_START
    return check(user)
REPLACE_WITH
    return check(user, strict=True)
REPLACE_END

FILE: [src/utils.py]
REPLACE_START
A = 1
REPLACE_WITH
A = 100
REPLACE_END
REPLACE_START
B = 2
REPLACE_WITH
B = 200
REPLACE_END
"""


def test_it_parses_several_targeted_replace_blocks() -> None:
    parsed = parse_edits(REPLACE_BLOCKS)
    assert parsed == [
        ReplaceBlock("src/auth.py", "    return check(user)",
                     "    return check(user, strict=True)"),
        ReplaceBlock("src/utils.py", "A = 1", "A = 100"),
        ReplaceBlock("src/utils.py", "B = 2", "B = 200"),  # same FILE: carries over
    ]


def test_a_replace_block_keeps_multi_line_snippets_and_drops_code_fences() -> None:
    (block,) = parse_edits(
        "FILE: a.py\nREPLACE_START\n```python\nx = 1\ny = 2\n```\nREPLACE_WITH\nx = 3\n\n"
        "y = 4\nREPLACE_END\n")
    assert block == ReplaceBlock("a.py", "x = 1\ny = 2", "x = 3\n\ny = 4")


@pytest.mark.parametrize(("text", "missing"), [
    ("FILE: a.py\nREPLACE_START\nx\nREPLACE_END\n", "REPLACE_WITH"),
    ("FILE: a.py\nREPLACE_START\nx\nREPLACE_WITH\ny\n", "REPLACE_END"),
])
def test_an_unfinished_replace_block_is_refused_naming_the_missing_marker(
        text: str, missing: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_edits(text)
    assert caught.value.code == ErrorCode.INVALID_EDIT
    assert missing in caught.value.message and "a.py" in caught.value.message


def test_a_replace_block_without_a_file_line_is_refused() -> None:
    with pytest.raises(ProtocolError, match="FILE: path"):
        parse_edits("REPLACE_START\nx\nREPLACE_WITH\ny\nREPLACE_END\n")


# -- applying -------------------------------------------------------------------------------


def test_it_applies_a_multi_file_diff_and_reports_each_files_change(workspace: Path) -> None:
    outcomes = apply_edits(workspace, parse_edits(TWO_FILE_DIFF))
    assert (workspace / "src/auth.py").read_text() == (
        "def login(user):\n    return check(user, strict=True)\n\n\n"
        "def logout(user):\n    forget(user)\n    return True\n")
    assert (workspace / "src/utils.py").read_text() == "A = 10\nB = 2\n"
    assert [outcome.path for outcome in outcomes] == ["src/auth.py", "src/utils.py"]
    assert "+    forget(user)" in outcomes[0].diff
    assert outcomes[0].diff.startswith("--- a/src/auth.py\n+++ b/src/auth.py\n")
    assert not outcomes[0].created and not outcomes[0].deleted


def test_it_applies_replace_blocks_in_order(workspace: Path) -> None:
    outcomes = apply_edits(workspace, parse_edits(REPLACE_BLOCKS))
    assert (workspace / "src/utils.py").read_text() == "A = 100\nB = 200\n"
    assert "strict=True" in (workspace / "src/auth.py").read_text()
    assert len(outcomes) == 2  # one outcome per file, however many blocks


def test_it_accepts_the_protocols_absolute_path_when_it_lies_inside_the_workspace(
        workspace: Path) -> None:
    absolute = (workspace / "src" / "utils.py").resolve()
    outcomes = apply_edits(
        workspace, f"FILE: {absolute}\nREPLACE_START\nB = 2\nREPLACE_WITH\nB = 3\nREPLACE_END\n")
    assert outcomes[0].path == "src/utils.py"
    assert (workspace / "src/utils.py").read_text() == "A = 1\nB = 3\n"


def test_a_dry_run_returns_the_diffs_and_writes_nothing(workspace: Path) -> None:
    before = snapshot(workspace)
    outcomes = apply_edits(workspace, parse_edits(TWO_FILE_DIFF + REPLACE_BLOCKS.replace(
        "src/auth.py", "src/new.py").replace("    return check(user)", "")), dry_run=True)
    assert snapshot(workspace) == before
    assert {outcome.path: outcome.created for outcome in outcomes} == {
        "src/auth.py": False, "src/utils.py": False, "src/new.py": True}
    assert all(outcome.diff for outcome in outcomes)


def test_it_creates_a_file_and_its_folders_from_dev_null(workspace: Path) -> None:
    outcomes = apply_edits(workspace, "--- /dev/null\n+++ b/docs/guide/intro.md\n"
                                      "@@ -0,0 +1,2 @@\n+# Intro\n+Hello\n")
    assert (workspace / "docs/guide/intro.md").read_text() == "# Intro\nHello\n"
    assert outcomes == [EditOutcome("docs/guide/intro.md", outcomes[0].diff, created=True)]
    assert outcomes[0].diff.startswith("--- /dev/null\n+++ b/docs/guide/intro.md\n")


def test_a_replace_block_with_an_empty_original_creates_a_new_file(workspace: Path) -> None:
    apply_edits(workspace, "FILE: new.txt\nREPLACE_START\nREPLACE_WITH\nhello\nREPLACE_END\n")
    assert (workspace / "new.txt").read_text() == "hello\n"


def test_it_deletes_a_file_whose_every_line_the_diff_removes(workspace: Path) -> None:
    outcomes = apply_edits(workspace, "--- a/src/utils.py\n+++ /dev/null\n"
                                      "@@ -1,2 +0,0 @@\n-A = 1\n-B = 2\n")
    assert not (workspace / "src/utils.py").exists()
    assert outcomes[0].deleted and outcomes[0].diff.endswith("-B = 2\n")


def test_a_deletion_is_refused_when_deleting_is_not_allowed(workspace: Path) -> None:
    with pytest.raises(ProtocolError) as caught:
        apply_edits(workspace, "--- a/src/utils.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-A = 1\n"
                               "-B = 2\n", allow_delete=False)
    assert caught.value.code == ErrorCode.CONSTRAINT_VIOLATION
    assert "file_delete" in caught.value.message
    assert (workspace / "src/utils.py").exists()


def test_a_deletion_that_does_not_remove_the_whole_file_is_refused(workspace: Path) -> None:
    error = refused(workspace, "--- a/src/utils.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-A = 1\n")
    assert "does not remove all" in error.message


def test_it_finds_a_hunk_that_moved_a_few_lines(workspace: Path) -> None:
    (workspace / "src/utils.py").write_text("# header\n# more\nA = 1\nB = 2\n")
    apply_edits(workspace, "--- a/src/utils.py\n+++ b/src/utils.py\n@@ -1,2 +1,2 @@\n-A = 1\n"
                           "+A = 5\n B = 2\n")
    assert (workspace / "src/utils.py").read_text() == "# header\n# more\nA = 5\nB = 2\n"


def test_it_tolerates_wrong_hunk_counts_and_stripped_blank_context(workspace: Path) -> None:
    diff = ("--- a/src/auth.py\n+++ b/src/auth.py\n@@ -1,9 +1,9 @@\n def login(user):\n"
            "     return check(user)\n\n\n def logout(user):\n-    return True\n"
            "+    return False\n")
    apply_edits(workspace, diff)
    assert (workspace / "src/auth.py").read_text().endswith("    return False\n")


def test_it_places_a_bare_hunk_header_by_its_context(workspace: Path) -> None:
    apply_edits(workspace, "--- a/src/auth.py\n+++ b/src/auth.py\n@@\n def logout(user):\n"
                           "-    return True\n+    return None\n")
    assert (workspace / "src/auth.py").read_text().endswith("    return None\n")


def test_it_matches_context_that_differs_only_in_trailing_whitespace(workspace: Path) -> None:
    (workspace / "src/utils.py").write_text("A = 1   \nB = 2\n")
    apply_edits(workspace, "--- a/src/utils.py\n+++ b/src/utils.py\n@@ -1,2 +1,2 @@\n A = 1\n"
                           "-B = 2\n+B = 3\n")
    # the file's own context line is kept as it was
    assert (workspace / "src/utils.py").read_text() == "A = 1   \nB = 3\n"


def test_it_honours_no_newline_at_end_of_file(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("one\ntwo")
    apply_edits(workspace, "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1,3 @@\n one\n-two\n"
                           "\\ No newline at end of file\n+two\n+three\n")
    assert (workspace / "notes.txt").read_text() == "one\ntwo\nthree\n"
    outcome = apply_edits(workspace, "--- a/notes.txt\n+++ b/notes.txt\n@@ -3 +3 @@\n-three\n"
                                     "+four\n\\ No newline at end of file\n")[0]
    assert (workspace / "notes.txt").read_text() == "one\ntwo\nfour"
    assert outcome.diff.endswith("+four\n\\ No newline at end of file\n")


def test_it_keeps_windows_line_endings(workspace: Path) -> None:
    (workspace / "win.txt").write_bytes(b"a\r\nb\r\n")
    apply_edits(workspace, "--- a/win.txt\n+++ b/win.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n")
    assert (workspace / "win.txt").read_bytes() == b"a\r\nc\r\n"


def test_it_keeps_the_files_permissions(workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("echo hi\n")
    script.chmod(0o755)
    apply_edits(workspace, "FILE: run.sh\nREPLACE_START\necho hi\nREPLACE_WITH\necho bye\n"
                           "REPLACE_END\n")
    assert script.stat().st_mode & 0o777 == 0o755


# -- refusals -------------------------------------------------------------------------------


def test_a_diff_whose_context_does_not_match_names_the_hunk_and_line(workspace: Path) -> None:
    error = refused(workspace, "--- a/src/auth.py\n+++ b/src/auth.py\n@@ -1,2 +1,2 @@\n"
                               " def login(user):\n-    return verify(user)\n+    return 1\n")
    assert "src/auth.py" in error.message
    assert "hunk 1 (@@ -1,2 +1,2 @@)" in error.message
    assert "line 2" in error.message and "verify(user)" in error.message
    assert error.issues[0].field == "edits[0]"


def test_a_missing_replace_snippet_is_refused_naming_the_path(workspace: Path) -> None:
    error = refused(workspace, "FILE: src/auth.py\nREPLACE_START\ndef login(user):\n"
                               "    return nope(user)\nREPLACE_WITH\nx\nREPLACE_END\n")
    assert "src/auth.py" in error.message and "not found" in error.message
    assert "line 2" in error.message  # where the snippet stops matching


def test_an_ambiguous_replace_snippet_says_how_many_times_it_appears(workspace: Path) -> None:
    error = refused(workspace, "FILE: src/auth.py\nREPLACE_START\n(user)\nREPLACE_WITH\n(u)\n"
                               "REPLACE_END\n")
    assert "appears 3 times" in error.message


def test_editing_a_missing_file_is_refused(workspace: Path) -> None:
    error = refused(workspace, "FILE: src/ghost.py\nREPLACE_START\nx\nREPLACE_WITH\ny\n"
                               "REPLACE_END\n")
    assert "src/ghost.py" in error.message and "does not exist" in error.message
    error = refused(workspace, "--- a/ghost.py\n+++ b/ghost.py\n@@ -1 +1 @@\n-x\n+y\n")
    assert "ghost.py" in error.message and "/dev/null" in error.message


def test_creating_a_file_that_exists_is_refused(workspace: Path) -> None:
    error = refused(workspace, "--- /dev/null\n+++ b/src/utils.py\n@@ -0,0 +1 @@\n+x\n")
    assert "already exists" in error.message


@pytest.mark.parametrize("path", ["../escape.txt", "src/../../escape.txt"])
def test_it_refuses_a_path_that_climbs_out_of_the_workspace(workspace: Path, path: str) -> None:
    error = refused(workspace, f"FILE: {path}\nREPLACE_START\nREPLACE_WITH\nx\nREPLACE_END\n")
    assert "outside the workspace" in error.message
    assert not (workspace.parent / "escape.txt").exists()


def test_it_refuses_an_absolute_path_outside_the_workspace(workspace: Path,
                                                           tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    error = refused(workspace, f"--- {outside}\n+++ {outside}\n@@ -1 +1 @@\n-secret\n+pwned\n")
    assert "absolute path outside the workspace" in error.message
    assert outside.read_text() == "secret\n"


def test_it_refuses_a_symlinked_folder_that_points_outside(workspace: Path,
                                                           tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.py").write_text("SECRET = 1\n")
    (workspace / "linked").symlink_to(elsewhere, target_is_directory=True)
    error = refused(workspace, "FILE: linked/config.py\nREPLACE_START\nSECRET = 1\n"
                               "REPLACE_WITH\nSECRET = 2\nREPLACE_END\n")
    assert "symlink" in error.message
    assert (elsewhere / "config.py").read_text() == "SECRET = 1\n"


def test_it_refuses_a_symlinked_file_or_dangling_link_that_points_outside(
        workspace: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("x\n")
    (workspace / "link.txt").symlink_to(target)
    (workspace / "dangling.txt").symlink_to(tmp_path / "not-yet.txt")
    refused(workspace, "FILE: link.txt\nREPLACE_START\nx\nREPLACE_WITH\ny\nREPLACE_END\n")
    refused(workspace, "FILE: dangling.txt\nREPLACE_START\nREPLACE_WITH\ny\nREPLACE_END\n")
    assert target.read_text() == "x\n"
    assert not (tmp_path / "not-yet.txt").exists()


def test_a_symlink_that_stays_inside_the_workspace_edits_its_target(workspace: Path) -> None:
    (workspace / "alias.py").symlink_to(workspace / "src" / "utils.py")
    outcomes = apply_edits(workspace, "FILE: alias.py\nREPLACE_START\nA = 1\nREPLACE_WITH\nA = 7\n"
                                      "REPLACE_END\n")
    assert outcomes[0].path == "src/utils.py"
    assert (workspace / "src/utils.py").read_text() == "A = 7\nB = 2\n"
    assert (workspace / "alias.py").is_symlink()


def test_it_refuses_to_edit_a_folder_or_a_binary_file(workspace: Path) -> None:
    (workspace / "blob.bin").write_bytes(b"\xff\xfe\x00binary")
    assert "not a regular file" in refused(
        workspace, "FILE: src\nREPLACE_START\nx\nREPLACE_WITH\ny\nREPLACE_END\n").message
    assert "not UTF-8" in refused(
        workspace, "FILE: blob.bin\nREPLACE_START\nx\nREPLACE_WITH\ny\nREPLACE_END\n").message


# -- all or nothing -------------------------------------------------------------------------


def test_nothing_changes_when_a_later_edit_is_invalid(workspace: Path) -> None:
    before = snapshot(workspace)
    text = ("FILE: src/utils.py\nREPLACE_START\nA = 1\nREPLACE_WITH\nA = 2\nREPLACE_END\n"
            "--- /dev/null\n+++ b/brand/new.py\n@@ -0,0 +1 @@\n+x = 1\n"
            "FILE: src/auth.py\nREPLACE_START\nnot in the file\nREPLACE_WITH\nx\nREPLACE_END\n")
    error = refused(workspace, text)
    assert snapshot(workspace) == before
    assert not (workspace / "brand").exists()
    assert "nothing was changed" in error.message


def test_every_invalid_edit_is_reported_at_once(workspace: Path) -> None:
    error = refused(workspace, "FILE: a.py\nREPLACE_START\nx\nREPLACE_WITH\ny\nREPLACE_END\n"
                               "FILE: ../b.py\nREPLACE_START\nx\nREPLACE_WITH\ny\nREPLACE_END\n")
    assert [issue.field for issue in error.issues] == ["edits[0]", "edits[1]"]
    assert error.message.startswith("2 edits cannot be applied")


def test_a_failed_write_restores_the_files_already_written(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = snapshot(workspace)
    real_replace = os.replace
    calls = {"count": 0}

    def flaky_replace(source: str | Path, target: str | Path) -> None:
        calls["count"] += 1
        if calls["count"] == 3:  # the third file's move fails, after two succeeded
            raise OSError(28, "No space left on device")
        real_replace(source, target)

    monkeypatch.setattr(edit_files.os, "replace", flaky_replace)
    text = TWO_FILE_DIFF + "--- /dev/null\n+++ b/pkg/created.py\n@@ -0,0 +1 @@\n+x = 1\n"
    with pytest.raises(ProtocolError) as caught:
        apply_edits(workspace, text)
    monkeypatch.setattr(edit_files.os, "replace", real_replace)
    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert "restored" in caught.value.message
    assert snapshot(workspace) == before
    assert not (workspace / "pkg").exists()
    assert not list(workspace.rglob("*.tmp"))


# -- properties -----------------------------------------------------------------------------

file_lines = st.lists(
    st.sampled_from(["a", "b", "", "  x = 1", "-- dash", "++ plus", "\tt", "form\x0cfeed"]),
    max_size=12)


def with_line_ends(text: str) -> list[str]:
    return [line + "\n" for line in text.split("\n")[:-1]] + (
        [text.split("\n")[-1]] if not text.endswith("\n") and text else [])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=80)
@given(old=file_lines, new=file_lines, old_eol=st.booleans(), new_eol=st.booleans(),
       context=st.integers(0, 3))
def test_any_unified_diff_of_a_file_applies_back_to_the_new_content(
        tmp_path: Path, old: list[str], new: list[str], old_eol: bool, new_eol: bool,
        context: int) -> None:
    old_text = "\n".join(old) + ("\n" if old and old_eol else "")
    new_text = "\n".join(new) + ("\n" if new and new_eol else "")
    root = tmp_path / "prop"
    root.mkdir(exist_ok=True)
    (root / "f.txt").write_text(old_text)
    patch = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        for line in difflib.unified_diff(with_line_ends(old_text), with_line_ends(new_text),
                                         "a/f.txt", "b/f.txt", n=context))
    if patch:
        outcome = apply_edits(root, patch)[0]
        assert (root / "f.txt").read_text() == new_text
        # and the reported diff applies to the old content too
        (root / "f.txt").write_text(old_text)
        apply_edits(root, outcome.diff)
    assert (root / "f.txt").read_text() == new_text


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
@given(name=st.text(alphabet="abc./", min_size=1, max_size=12))
def test_no_path_ever_writes_outside_the_workspace(tmp_path: Path, name: str) -> None:
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    before = set(tmp_path.rglob("*"))
    with contextlib.suppress(ProtocolError):
        apply_edits(root, [ReplaceBlock(name, "", "data")])
    created = set(tmp_path.rglob("*")) - before
    assert all(path.resolve().is_relative_to(root.resolve()) for path in created)


def test_a_replace_snippet_prefers_the_whole_line_it_names(workspace: Path) -> None:
    (workspace / "src/utils.py").write_text("AA = 10\nA = 1\nB = 2\n")
    apply_edits(workspace, "FILE: src/utils.py\nREPLACE_START\nA = 1\nREPLACE_WITH\nA = 5\n"
                           "REPLACE_END\n")
    assert (workspace / "src/utils.py").read_text() == "AA = 10\nA = 5\nB = 2\n"


def test_an_empty_replacement_removes_the_whole_lines(workspace: Path) -> None:
    apply_edits(workspace, "FILE: src/utils.py\nREPLACE_START\nA = 1\nREPLACE_WITH\nREPLACE_END\n")
    assert (workspace / "src/utils.py").read_text() == "B = 2\n"


def test_a_replace_snippet_may_be_part_of_a_line(workspace: Path) -> None:
    apply_edits(workspace, "FILE: src/auth.py\nREPLACE_START\ncheck(user)\nREPLACE_WITH\n"
                           "check(user, strict=True)\nREPLACE_END\n")
    assert "return check(user, strict=True)\n" in (workspace / "src/auth.py").read_text()


def test_a_replace_snippet_matches_despite_trailing_whitespace_differences(
        workspace: Path) -> None:
    (workspace / "src/utils.py").write_text("A = 1  \nB = 2\n")
    apply_edits(workspace, "FILE: src/utils.py\nREPLACE_START\nA = 1\nB = 2\nREPLACE_WITH\n"
                           "C = 3\nREPLACE_END\n")
    assert (workspace / "src/utils.py").read_text() == "C = 3\n"
