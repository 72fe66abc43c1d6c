"""SQLAlchemy models: the only place table shapes are declared (Alembic mirrors them).

Every row belongs to a user (directly or through its task). Rows that change carry a `version`
for optimistic updates. JSON columns are JSONB on PostgreSQL.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from shoal.states import LIVE_ATTEMPT_VALUES, TERMINAL_TASK

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
SeqType = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LIVE_ATTEMPTS = f"status IN ({', '.join(repr(v) for v in LIVE_ATTEMPT_VALUES)})"
"""The condition of the partial index of live attempts (`Attempt`), as SQL."""


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python, whatever the database."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Declarative base with naming conventions Alembic can diff against."""

    metadata = sa.MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class User(Base):
    """A person who submits tasks."""

    __tablename__ = "users"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    username: Mapped[str] = mapped_column(sa.String(50), unique=True)
    email: Mapped[str | None] = mapped_column(sa.String(255), unique=True)
    password_hash: Mapped[str] = mapped_column(sa.String(255))
    is_admin: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_login: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # An admin's limits for this user; None: the server's settings apply.
    max_active_tasks: Mapped[int | None] = mapped_column(sa.Integer)
    daily_budget: Mapped[dict[str, Any] | None] = mapped_column(JSONType)


class ApiToken(Base):
    """An opaque, revocable token: a worker's credential or a one-time login link."""

    __tablename__ = "api_tokens"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.Uuid, sa.ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(sa.String(20))  # worker | login
    name: Mapped[str] = mapped_column(sa.String(100))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class RefreshFamily(Base):
    """One sign-in (a password login or a login link) and the refresh tokens that descend from
    it: each refresh uses up one token of the family and issues the next. `revoked_at` set
    (a used token presented again, `revoked_reason` "reuse") ends every token of the family.
    `expires_at` is the newest token's expiry: past it, the family is deleted."""

    __tablename__ = "refresh_families"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_reason: Mapped[str | None] = mapped_column(sa.String(20))


class RefreshToken(Base):
    """A refresh token issued, by its JWT `jti` (the token itself is not kept: only its
    signature makes it usable). `used_at` set: traded for the next token, never again."""

    __tablename__ = "refresh_tokens"
    jti: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    family_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("refresh_families.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)  # the family's; checked against `sub`
    issued_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Worker(Base):
    """A worker process on some machine, as last seen."""

    __tablename__ = "workers"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    machine_id: Mapped[str] = mapped_column(sa.String(100), unique=True)
    machine_name: Mapped[str] = mapped_column(sa.String(100))
    status: Mapped[str] = mapped_column(sa.String(20), default="offline", index=True)
    system_info: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    tools: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    slots: Mapped[int] = mapped_column(sa.Integer, default=1)
    cpu_percent: Mapped[float | None] = mapped_column(sa.Float)
    memory_percent: Mapped[float | None] = mapped_column(sa.Float)
    disk_percent: Mapped[float | None] = mapped_column(sa.Float)
    token_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.Uuid, sa.ForeignKey("api_tokens.id", ondelete="SET NULL")
    )
    version_string: Mapped[str | None] = mapped_column(sa.String(50))
    last_heartbeat: Mapped[datetime | None] = mapped_column(UTCDateTime)
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# Unfinished tasks, spelled out as literals so that PostgreSQL can match a query's condition to
# the partial index below even in a generic (parameter-blind) plan.
UNFINISHED_TASK = sa.text(
    "status NOT IN (" + ", ".join(f"'{s.value}'" for s in sorted(TERMINAL_TASK)) + ")"
)


# Tasks waiting for one of their user's slots, spelled as a literal for the partial index below
# (a query names it so too, or the index is not used).
QUEUED_TASK = sa.text("status = 'queued'")


class Task(Base):
    """One user request and its settings.

    `owner_id` is the control-plane copy that drives the task while `owner_expires_at` lies in
    the future (store/claims.py); claims change no `version`, since they change no state.
    """

    __tablename__ = "tasks"
    # The claim and renewal queries look only at unfinished tasks: a few, among all tasks ever.
    __table_args__ = (
        sa.Index("ix_tasks_unfinished_owner", "owner_id", "owner_expires_at",
                 postgresql_where=UNFINISHED_TASK, sqlite_where=UNFINISHED_TASK),
        # A running task holds one of its user's numbered slots: the database, not a copy's
        # memory, keeps a user to their limit of active tasks (two copies taking the same
        # slot: one commit fails).
        sa.UniqueConstraint("user_id", "slot"),
        # A user's tasks in the order their list shows them, newest first: a page is read
        # from it without sorting every task the user ever made (migration 0013). It serves
        # every other lookup by user too.
        sa.Index("ix_tasks_user_id_created_at", "user_id", "created_at"),
        # A user's running tasks (no `completed_at`) and those that ended since a moment: what
        # the daily budget's check reads, whatever the user's history.
        sa.Index("ix_tasks_user_id_completed_at", "user_id", "completed_at"),
        # A user's queue, oldest first: the few queued tasks, which a submission reads (through
        # the index above it would walk all the user's tasks to find them); with their status,
        # so that the queue's counts read the index alone.
        sa.Index("ix_tasks_queued", "user_id", "created_at", "id", "status",
                 postgresql_where=QUEUED_TASK, sqlite_where=QUEUED_TASK),
    )
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("users.id", ondelete="CASCADE")
    )
    description: Mapped[str] = mapped_column(sa.Text)
    workflow: Mapped[str] = mapped_column(sa.String(50), default="dag")
    status: Mapped[str] = mapped_column(sa.String(20), index=True)
    progress: Mapped[int] = mapped_column(sa.Integer, default=0)
    checkpoint_frequency: Mapped[str] = mapped_column(sa.String(20), default="medium")
    privacy_level: Mapped[str] = mapped_column(sa.String(20), default="normal")
    tool_preferences: Mapped[list[str]] = mapped_column(JSONType, default=list)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)
    error: Mapped[str | None] = mapped_column(sa.Text)
    input_tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    cost_usd: Mapped[float] = mapped_column(sa.Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    version: Mapped[int] = mapped_column(sa.Integer, default=1)
    owner_id: Mapped[str | None] = mapped_column(sa.String(255))
    owner_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    slot: Mapped[int | None] = mapped_column(sa.Integer)  # None: queued or ended


class Subtask(Base):
    """One node of a task's runtime graph."""

    __tablename__ = "subtasks"
    __table_args__ = (sa.UniqueConstraint("task_id", "key"),)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    # No index of its own: the unique (task_id, key) index leads with it (migration 0004).
    task_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("tasks.id", ondelete="CASCADE")
    )
    key: Mapped[str] = mapped_column(sa.String(64))
    role: Mapped[str] = mapped_column(sa.String(50))
    kind: Mapped[str] = mapped_column(sa.String(20), default="agent")
    name: Mapped[str] = mapped_column(sa.String(255))
    description: Mapped[str] = mapped_column(sa.Text)
    status: Mapped[str] = mapped_column(sa.String(20))  # not searched on: no index
    progress: Mapped[int] = mapped_column(sa.Integer, default=0)
    dependencies: Mapped[list[str]] = mapped_column(JSONType, default=list)
    recommended_tool: Mapped[str | None] = mapped_column(sa.String(50))
    pinned_tool: Mapped[str | None] = mapped_column(sa.String(50))
    assigned_worker: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)  # not searched on
    assigned_tool: Mapped[str | None] = mapped_column(sa.String(50))
    complexity: Mapped[int] = mapped_column(sa.Integer, default=3)
    priority: Mapped[float] = mapped_column(sa.Float, default=0.0)
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    declines: Mapped[int] = mapped_column(sa.Integer, default=0, server_default="0")
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime)
    current_attempt_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    options: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    output: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    target_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid, index=True)
    evaluation: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    review: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    review_cycles: Mapped[int] = mapped_column(sa.Integer, default=0, server_default="0")
    version: Mapped[int] = mapped_column(sa.Integer, default=1)


class Checkpoint(Base):
    """A pause for a person (seed 004 §3.7, §4.1.3)."""

    __tablename__ = "checkpoints"
    # A user's checkpoints newest first, as their list shows them: a page reads its own rows,
    # not every task the user ever made (migration 0014).
    __table_args__ = (sa.Index("ix_checkpoints_user_id_created_at", "user_id", "created_at"),)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    task_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("tasks.id", ondelete="CASCADE"), index=True
    )
    # Its task's user, written with the checkpoint (never changed): null only in a row a
    # migration could not match to a task.
    user_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    subtask_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    reason: Mapped[str] = mapped_column(sa.String(40))
    status: Mapped[str] = mapped_column(sa.String(20), index=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    deadline_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    deadline_action: Mapped[str | None] = mapped_column(sa.String(20))
    decided_by: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    decision: Mapped[str | None] = mapped_column(sa.String(30))
    notes: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    version: Mapped[int] = mapped_column(sa.Integer, default=1)


class Correction(Base):
    """A person's correction of a subtask at a checkpoint."""

    __tablename__ = "corrections"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    checkpoint_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("checkpoints.id", ondelete="CASCADE"), index=True
    )
    subtask_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, index=True)
    correction_subtask_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    correction_type: Mapped[str] = mapped_column(sa.String(20))
    guidance: Mapped[str] = mapped_column(sa.Text)
    reference_files: Mapped[list[str]] = mapped_column(JSONType, default=list)
    apply_to_future: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    created_by: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Guidance(Base):
    """Guidance a user asked to apply to their future subtasks (`apply_to_future`)."""

    __tablename__ = "guidance"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    correction_type: Mapped[str] = mapped_column(sa.String(20))
    guidance: Mapped[str] = mapped_column(sa.Text)
    checkpoint_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    active: Mapped[bool] = mapped_column(sa.Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Review(Base):
    """One peer review of a subtask (seed 004 §3.5.2)."""

    __tablename__ = "reviews"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    task_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("tasks.id", ondelete="CASCADE"), index=True
    )
    subtask_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, index=True)
    review_subtask_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    reviewer_worker_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    author_worker_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    cycle: Mapped[int] = mapped_column(sa.Integer)
    score: Mapped[float] = mapped_column(sa.Float)
    decision: Mapped[str] = mapped_column(sa.String(20))
    outcome: Mapped[str] = mapped_column(sa.String(20))
    issues: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    severity_counts: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class AuditEntry(Base):
    """Who did what, when: every checkpoint decision and other decisions that matter."""

    __tablename__ = "audit_log"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid, index=True)
    task_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid, index=True)
    action: Mapped[str] = mapped_column(sa.String(40))
    object_type: Mapped[str] = mapped_column(sa.String(20))
    object_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Attempt(Base):
    """One try of a subtask on one worker, fenced by `fence`."""

    __tablename__ = "attempts"
    __table_args__ = (
        sa.UniqueConstraint("subtask_id", "fence"),
        # The live attempts alone (migration 0012): a step adds one and takes one out on the
        # same small page, where an index of every attempt ever made moved it to another.
        sa.Index("ix_attempts_live", "status", sqlite_where=sa.text(LIVE_ATTEMPTS),
                 postgresql_where=sa.text(LIVE_ATTEMPTS)),
    )
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    # No index of its own: the unique (subtask_id, fence) index leads with it (migration 0004).
    subtask_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("subtasks.id", ondelete="CASCADE")
    )
    task_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("tasks.id", ondelete="CASCADE"), index=True
    )
    worker_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid, index=True)
    fence: Mapped[int] = mapped_column(sa.Integer)
    tool: Mapped[str] = mapped_column(sa.String(50))
    status: Mapped[str] = mapped_column(sa.String(20))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    dispatched_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(sa.Text)
    usage: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    version: Mapped[int] = mapped_column(sa.Integer, default=1)


class EventRow(Base):
    """The append-only event log; `seq` is the global sequence number."""

    __tablename__ = "events"
    # AUTOINCREMENT on SQLite: a deleted task's events may be the newest, and without it
    # SQLite would hand their numbers out again, behind readers that passed them already.
    __table_args__ = (sa.Index("ix_events_task_seq", "task_id", "seq"),
                      {"sqlite_autoincrement": True})
    seq: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(sa.String(40))
    task_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    user_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid, index=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Artifact(Base):
    """A file an attempt produced: its path in the subtask's manifest and its content hash."""

    __tablename__ = "artifacts"
    __table_args__ = (sa.UniqueConstraint("attempt_id", "path"),)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    task_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("tasks.id", ondelete="CASCADE"), index=True
    )
    subtask_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("subtasks.id", ondelete="CASCADE"), index=True
    )
    attempt_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    path: Mapped[str] = mapped_column(sa.String(512))
    size: Mapped[int] = mapped_column(sa.BigInteger)
    sha256: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class UserWorkflow(Base):
    """A workflow document a user added (`POST /api/v1/workflows`): each version kept, so a
    task that pinned one keeps it; only its owner sees it."""

    __tablename__ = "user_workflows"
    __table_args__ = (sa.UniqueConstraint("user_id", "name", "version"),)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(40))
    version: Mapped[int] = mapped_column(sa.Integer)
    text: Mapped[str] = mapped_column(sa.Text)  # the YAML, as sent
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Upload(Base):
    """A file a user uploaded to give their tasks (a source): its kind, sniffed from its
    content, its bytes and its extracted text, both content-addressed."""

    __tablename__ = "uploads"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(sa.String(255))
    kind: Mapped[str] = mapped_column(sa.String(20))
    size: Mapped[int] = mapped_column(sa.BigInteger)
    sha256: Mapped[str] = mapped_column(sa.String(64))
    text_sha256: Mapped[str | None] = mapped_column(sa.String(64))
    text_chars: Mapped[int] = mapped_column(sa.Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TaskSource(Base):
    """An upload a task reads, under `sources/<name>` of its workspaces."""

    __tablename__ = "task_sources"
    task_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True)
    upload_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("uploads.id", ondelete="CASCADE"), primary_key=True, index=True)
    name: Mapped[str] = mapped_column(sa.String(255))


class Share(Base):
    """A public, read-only link to a task's report; only the token's hash is kept."""

    __tablename__ = "shares"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    task_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class FileSweep(Base):
    """A stored file that may no longer be referenced (its task was deleted): the sweeper
    deletes it once no row refers to it, and removes this row; a crash half-way leaves the
    row for the next sweep."""

    __tablename__ = "file_sweep"
    sha256: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    queued_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Webhook(Base):
    """A URL a user asked Shoal to POST notifications to, signed with `secret` (which the API
    never shows again); `events` are the notification types it wants (notify/delivery.py)."""

    __tablename__ = "webhooks"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(sa.String(2048))
    secret: Mapped[str] = mapped_column(sa.String(255))  # kept: every delivery is signed with it
    events: Mapped[list[str]] = mapped_column(JSONType, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # None: enabled


class EmailSetting(Base):
    """Where a user wants notifications by email, and which ones."""

    __tablename__ = "email_settings"
    user_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    address: Mapped[str] = mapped_column(sa.String(254))
    events: Mapped[list[str]] = mapped_column(JSONType, default=list)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class NotifierCursor(Base):
    """The one row (`id` 1) saying how far the notifier has read the event log: every event
    up to `seq` has had its deliveries enqueued, in the transaction that moved `seq`.

    `seq_created_at` is when the event at `seq` was created: SQLite hands the seqs of deleted
    events (the log's tail, when a task is deleted) out again, and the time tells such a new
    event from the one the cursor passed.
    """

    __tablename__ = "notifier_cursor"
    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(sa.BigInteger)
    seq_created_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# Deliveries still to try, spelled as a literal for the partial index (see UNFINISHED_TASK).
PENDING_DELIVERY = sa.text("status = 'pending'")


class Delivery(Base):
    """One notification to one target (a webhook or an email address): its payload, and how
    trying to deliver it went. `next_attempt_at` is also the lease of a try in flight."""

    __tablename__ = "deliveries"
    __table_args__ = (
        sa.Index("ix_deliveries_due", "next_attempt_at",
                 postgresql_where=PENDING_DELIVERY, sqlite_where=PENDING_DELIVERY),
        sa.Index("ix_deliveries_user_id_created_at", "user_id", "created_at"),
    )
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        sa.Uuid, sa.ForeignKey("users.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(sa.String(10))  # webhook | email
    webhook_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.Uuid, sa.ForeignKey("webhooks.id", ondelete="CASCADE"), index=True)
    target: Mapped[str] = mapped_column(sa.String(2048))  # the URL or the address, as shown
    event_seq: Mapped[int | None] = mapped_column(sa.BigInteger)  # None: a test ping
    event_type: Mapped[str] = mapped_column(sa.String(40))
    task_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)  # no key: outlives its task
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    status: Mapped[str] = mapped_column(sa.String(20))  # pending | delivered | failed
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_status_code: Mapped[int | None] = mapped_column(sa.Integer)
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


def table_of(model: type[Base]) -> sa.Table:
    """The Core table behind a model, typed for statements."""
    table = model.__table__
    assert isinstance(table, sa.Table)
    return table
