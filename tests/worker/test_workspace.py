"""Tests for attempt workspaces: preparing them and collecting what an attempt produced."""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

from shoal.protocol import ExecuteTask, FilePayload, UpstreamResult
from shoal.worker.executor import _save_output
from shoal.worker.workspace import (
    READY_DIR,
    collect_files,
    forget,
    kept,
    prepare_workspace,
    prune_workspaces,
    remove_workspaces,
    snapshot,
)

LIMITS = {"max_files": 100, "max_file_bytes": 1000, "max_total_bytes": 10_000}


def _file(path: str, data: bytes) -> FilePayload:
    return FilePayload(path=path, content_b64=base64.b64encode(data).decode())


def _execute(*files: FilePayload) -> ExecuteTask:
    upstream = UpstreamResult(subtask_id=uuid.uuid4(), name="up", output="", files=list(files))
    return ExecuteTask(
        attempt_id=uuid.uuid4(), fence=1, task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
        role="coder", tool="echo", name="step", instructions="go", upstream=[upstream],
    )


def _workspace(tmp_path: Path) -> Path:
    workspace, _ = prepare_workspace(tmp_path, _execute())
    return workspace


def _decoded(files: list[FilePayload]) -> dict[str, bytes]:
    return {f.path: base64.b64decode(f.content_b64) for f in files}


def test_prepare_writes_upstream_files(tmp_path: Path) -> None:
    """Upstream files land in <root>/<task>/<attempt>/ at their relative paths."""
    msg = _execute(_file("src/app.py", b"print(1)\n"))
    workspace, skipped = prepare_workspace(tmp_path, msg)
    assert workspace == (tmp_path / str(msg.task_id) / str(msg.attempt_id)).resolve()
    assert (workspace / "src" / "app.py").read_bytes() == b"print(1)\n"
    assert skipped == []


def test_prepare_skips_unsafe_upstream_paths(tmp_path: Path) -> None:
    """An upstream path that climbs out of the workspace is skipped and reported."""
    workspace, skipped = prepare_workspace(tmp_path, _execute(_file("../evil.txt", b"x")))
    assert [s.path for s in skipped] == ["../evil.txt"]
    assert "'..'" in skipped[0].reason
    assert not (workspace.parent / "evil.txt").exists()


def test_prepare_starts_clean(tmp_path: Path) -> None:
    """Preparing an attempt again removes what an earlier run of it left behind."""
    msg = _execute()
    workspace, _ = prepare_workspace(tmp_path, msg)
    (workspace / "stale.txt").write_text("old")
    workspace, _ = prepare_workspace(tmp_path, msg)
    assert list(workspace.iterdir()) == []


def test_collect_returns_new_and_changed_files(tmp_path: Path) -> None:
    """Only files created or modified after the snapshot are collected."""
    workspace, _ = prepare_workspace(
        tmp_path, _execute(_file("same.txt", b"1"), _file("edited.txt", b"1"))
    )
    before = snapshot(workspace)
    (workspace / "edited.txt").write_bytes(b"2")
    (workspace / "pkg").mkdir()
    (workspace / "pkg" / "new.py").write_bytes(b"x = 1\n")
    files, rejected = collect_files(workspace, before, **LIMITS)
    assert _decoded(files) == {"edited.txt": b"2", "pkg/new.py": b"x = 1\n"}
    assert rejected == []


def test_collect_skips_tool_folders(tmp_path: Path) -> None:
    """Files under .git, __pycache__, node_modules and the like are not results, nor are the
    answers `shoal mcp literature` keeps in `.literature/`."""
    workspace = _workspace(tmp_path)
    for folder in (".git", "__pycache__", "node_modules", ".venv", ".pytest_cache",
                   ".literature"):
        (workspace / folder).mkdir()
        (workspace / folder / "junk").write_bytes(b"x")
    files, rejected = collect_files(workspace, {}, **LIMITS)
    assert files == []
    assert rejected == []


def test_collect_rejects_oversized_file(tmp_path: Path) -> None:
    """A file over the per-file limit is rejected with its size, not truncated."""
    workspace = _workspace(tmp_path)
    (workspace / "big.bin").write_bytes(b"x" * 1001)
    files, rejected = collect_files(workspace, {}, **LIMITS)
    assert files == []
    assert [r.path for r in rejected] == ["big.bin"]
    assert "1,001 bytes" in rejected[0].reason


def test_collect_rejects_past_file_count(tmp_path: Path) -> None:
    """Files beyond max_files are rejected, the rest are kept."""
    workspace = _workspace(tmp_path)
    for name in ("a", "b", "c"):
        (workspace / name).write_bytes(b"1")
    files, rejected = collect_files(workspace, {}, **{**LIMITS, "max_files": 2})
    assert [f.path for f in files] == ["a", "b"]
    assert [r.path for r in rejected] == ["c"]


def test_collect_rejects_past_total_size(tmp_path: Path) -> None:
    """A file that would push the result past its total size is rejected."""
    workspace = _workspace(tmp_path)
    (workspace / "a").write_bytes(b"x" * 600)
    (workspace / "b").write_bytes(b"x" * 600)
    files, rejected = collect_files(workspace, {}, **{**LIMITS, "max_total_bytes": 1000})
    assert [f.path for f in files] == ["a"]
    assert [r.path for r in rejected] == ["b"]
    assert "total" in rejected[0].reason


def test_collect_rejects_control_characters(tmp_path: Path) -> None:
    """A file name with a control character is rejected, shown escaped."""
    workspace = _workspace(tmp_path)
    (workspace / "bad\x07name").write_bytes(b"x")
    files, rejected = collect_files(workspace, {}, **LIMITS)
    assert files == []
    assert [r.path for r in rejected] == ["bad\\x07name"]


def test_collect_rejects_non_utf8_name(tmp_path: Path) -> None:
    """A file name that is not UTF-8 is rejected, and the reason can still be sent as JSON."""
    workspace = _workspace(tmp_path)
    with open(os.path.join(os.fsencode(workspace), b"caf\xe9"), "wb") as handle:
        handle.write(b"x")
    files, rejected = collect_files(workspace, {}, **LIMITS)
    assert files == []
    assert rejected[0].reason == "file name is not valid UTF-8"
    rejected[0].model_dump_json()


def test_collect_rejects_symlink_leaving_workspace(tmp_path: Path) -> None:
    """A symbolic link to a file outside the workspace is rejected, its target never read."""
    secret = tmp_path / "secret.txt"
    secret.write_text("token")
    workspace = _workspace(tmp_path)
    (workspace / "leak").symlink_to(secret)
    files, rejected = collect_files(workspace, {}, **LIMITS)
    assert files == []
    assert rejected[0].reason == "symbolic link points outside the workspace"


def test_collect_follows_symlink_inside_workspace(tmp_path: Path) -> None:
    """A link to a file inside the workspace is carried with the target's bytes."""
    workspace = _workspace(tmp_path)
    (workspace / "real.txt").write_bytes(b"data")
    before = snapshot(workspace)
    (workspace / "alias.txt").symlink_to("real.txt")
    files, rejected = collect_files(workspace, before, **LIMITS)
    assert _decoded(files) == {"alias.txt": b"data"}
    assert rejected == []


def test_prune_keeps_recent_and_protected_tasks(tmp_path: Path) -> None:
    """Pruning removes the oldest task folders but never a protected one."""
    for task, seconds in {"old": 20, "older": 10, "newest": 30, "busy": 1}.items():
        (tmp_path / task).mkdir()
        os.utime(tmp_path / task, (seconds, seconds))
    removed = prune_workspaces(tmp_path, keep=2, protect={"busy"})
    assert removed == ["older"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "newest", "old"]


def test_prune_leaves_the_ready_folders_alone(tmp_path: Path) -> None:
    """The folders made ahead of need are not a task's, whatever their age."""
    (tmp_path / READY_DIR).mkdir()
    os.utime(tmp_path / READY_DIR, (1, 1))
    (tmp_path / "task").mkdir()
    assert prune_workspaces(tmp_path, keep=0) == ["task"]
    assert [p.name for p in tmp_path.iterdir()] == [READY_DIR]


def test_remove_workspaces_deletes_task_folder(tmp_path: Path) -> None:
    """remove_workspaces deletes every attempt folder of one task."""
    msg = _execute()
    prepare_workspace(tmp_path, msg)
    remove_workspaces(tmp_path, str(msg.task_id))
    assert list(tmp_path.iterdir()) == []


def test_a_steps_answer_replaces_an_upstream_file_of_its_name_unless_the_agent_changed_it(
    tmp_path: Path,
) -> None:
    """A workflow step that writes the result file (`output_file`) after an earlier step wrote
    one — a review revising a report — replaces the copy it was handed; a file the agent itself
    wrote or edited is its own and stays."""
    (tmp_path / "report.md").write_text("# Draft\n", encoding="utf-8")
    handed = snapshot(tmp_path)
    _save_output(tmp_path, "report.md", "# Reviewed", handed.get("report.md"))
    assert (tmp_path / "report.md").read_text(encoding="utf-8") == "# Reviewed\n"
    (tmp_path / "report.md").write_text("# Edited by the agent\n", encoding="utf-8")
    _save_output(tmp_path, "report.md", "# Answer", handed.get("report.md"))
    assert (tmp_path / "report.md").read_text(encoding="utf-8") == "# Edited by the agent\n"
    (tmp_path / "new.md").write_text("# Mine\n", encoding="utf-8")
    _save_output(tmp_path, "new.md", "# Answer", None)  # written by the agent, not handed
    assert (tmp_path / "new.md").read_text(encoding="utf-8") == "# Mine\n"
    _save_output(tmp_path, "fresh.md", "# Answer", None)
    assert (tmp_path / "fresh.md").read_text(encoding="utf-8") == "# Answer\n"


def test_search_indexes_travel_as_a_cache_after_the_work_and_never_as_a_refusal(
    tmp_path: Path,
) -> None:
    """`.index/<sha256>.….sqlite|json` files handed in come back only if changed; new ones
    are sent after the work's files, with what room the limits leave; one that does not fit is
    left out without a refusal (the next worker builds its own); lock files never travel."""
    sha = "a" * 64
    handed = _file(f".index/{sha}.v1.sqlite", b"old index")
    workspace, skipped = prepare_workspace(tmp_path, _execute(handed))
    assert skipped == []  # handed to the worker as the control plane sends them
    before = snapshot(workspace)
    assert f".index/{sha}.v1.sqlite" in before
    (workspace / "report.md").write_bytes(b"r" * 600)
    (workspace / ".index" / f"{sha}.graph.v1.heuristic-0.json").write_bytes(b"{}" * 100)
    other = "b" * 64
    (workspace / ".index" / f"{other}.v1.sqlite").write_bytes(b"i" * 1500)  # past the limit
    (workspace / ".index" / f"{sha}.lock").write_bytes(b"")
    files, rejected = collect_files(workspace, before, **LIMITS)
    assert [f.path for f in files] == ["report.md", f".index/{sha}.graph.v1.heuristic-0.json"]
    assert rejected == []


def test_kept_lists_task_folders_and_index_sources_and_forget_deletes_them(
    tmp_path: Path,
) -> None:
    """`kept` names the tasks with workspaces (not `.ready`) and the sources with index files;
    `forget` deletes the named tasks' folders (not a protected one, still running) and every
    index file of the named sources, and nothing else."""
    root, index = tmp_path / "workspaces", tmp_path / "index"
    gone, running, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    for task in (gone, running, other):
        (root / str(task) / "attempt").mkdir(parents=True)
        (root / str(task) / "attempt" / "out.txt").write_text("x")
    (root / ".ready" / "a").mkdir(parents=True)
    old, kept_one = "a" * 64, "b" * 64
    index.mkdir()
    for name in (f"{old}.v1.sqlite", f"{old}.graph.v1.heuristic-0.json", f"{old}.lock",
                 f"{kept_one}.v1.sqlite", "notes.txt"):
        (index / name).write_bytes(b"i")
    tasks, sources = kept(root, index, most=100)
    assert set(tasks) == {gone, running, other}
    assert sorted(sources) == [old, kept_one]
    assert forget(root, index, [gone, running, uuid.uuid4()], [old],
                  protect={str(running)}) == (1, 3)
    assert sorted(p.name for p in root.iterdir()) == sorted([".ready", str(running), str(other)])
    assert sorted(p.name for p in index.iterdir()) == [f"{kept_one}.v1.sqlite", "notes.txt"]
    assert kept(tmp_path / "none", tmp_path / "none", most=5) == ([], [])
