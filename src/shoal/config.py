"""Settings: one object, read from `SHOAL_*` environment variables and `.env`, built once.

`create_app(settings)`, the worker and the CLI receive a `Settings`; nothing reads the
environment at import time.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import socket
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEV_SECRET = "shoal-dev-secret-change-me"


def folder_instance_id(data_dir: Path) -> str:
    """A name that stays the same across restarts, for the one copy that uses `data_dir` on
    this host (the default `instance_id`)."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return f"{socket.gethostname()[:64]}-{digest}"


class Settings(BaseSettings):
    """Everything Shoal can be configured with. Defaults run the embedded mode."""

    model_config = SettingsConfigDict(
        env_prefix="SHOAL_", env_file=".env", env_file_encoding="utf-8", extra="ignore",
        populate_by_name=True,
    )

    mode: Literal["dev", "production"] = "production"
    data_dir: Path = Path(".shoal")
    database_url: str | None = None  # default: SQLite file in data_dir
    redis_url: str | None = None  # default: in-process bus
    # Start of every Redis key and channel name: deployments sharing one Redis set their own.
    redis_namespace: str = Field("shoal", min_length=1, max_length=64,
                                 pattern=r"^[A-Za-z0-9_.-]+$")
    secret_key: str = DEV_SECRET
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str | None = None  # how users reach this server; default http://host:port
    # The proxies whose X-Forwarded-For and X-Forwarded-Proto this copy believes (addresses or
    # networks, comma-separated): from them, the client's address (the per-address sign-in
    # limit) and scheme. Only the load balancer, which must set X-Forwarded-For to the address
    # it sees rather than append to the client's own (docs/guides/deploy.md); empty: believe none.
    trusted_proxies: str = "127.0.0.1"

    # Leases and retries (DESIGN §3).
    heartbeat_interval: float = Field(10.0, gt=0)
    lease_seconds: float = Field(30.0, gt=0)
    sweep_interval: float = Field(1.0, gt=0)
    max_attempts: int = Field(3, ge=1, le=20)
    retry_delays: list[float] = Field(default_factory=lambda: [10.0, 30.0, 60.0])
    retry_jitter: float = Field(0.1, ge=0, le=1)

    # Task ownership among control-plane copies sharing one database (store/claims.py): each
    # copy renews its claims every `claim_interval`; a copy silent for `claim_ttl` loses them.
    # Unset, `instance_id` is derived from the host name and the data folder, so a copy
    # restarted after a crash takes its tasks back at once instead of after `claim_ttl`; two
    # copies on one host with one data folder need an id each (PostgreSQL refuses a duplicate).
    instance_id: str = Field("", max_length=255)
    claim_ttl: float = Field(30.0, gt=0)
    claim_interval: float = Field(10.0, gt=0)

    # What one user may run at once: more tasks wait `queued`, in the order they came (an admin
    # sets a user's own limit: PATCH /api/v1/users/{id}).
    max_active_tasks: int = Field(3, ge=1, le=10_000)
    # What one user may spend in a day (UTC), across their tasks; None: no limit. Past it, a
    # submission is refused with 429 until midnight UTC (an admin sets a user's own).
    daily_tokens: int | None = Field(None, ge=1)
    daily_cost_usd: float | None = Field(None, gt=0)

    # Stored files no row refers to any more (a deleted task's) are removed by a sweeper every
    # `file_sweep_interval` seconds, but only once `file_sweep_grace` seconds have passed since
    # they were last stored (another task may be storing the same bytes at that moment).
    file_sweep_interval: float = Field(60.0, gt=0)
    file_sweep_grace: float = Field(3600.0, ge=0)

    # Limits.
    subtask_timeout: float = Field(900.0, gt=0)
    planner_timeout: float = Field(300.0, gt=0)
    max_subtasks: int = Field(500, ge=1)
    max_result_bytes: int = Field(20 * 1024 * 1024, ge=1024)
    # permessage-deflate on WebSockets (workers' and clients'). Off: a compressor per socket
    # costs memory for as long as it is open and the CPU of compressing every frame for every
    # socket, where events and heartbeats are small; on for clients on slow links.
    ws_compression: bool = False
    max_file_bytes: int = Field(5 * 1024 * 1024, ge=1)
    max_files_per_result: int = Field(500, ge=1)
    batch_max: int = Field(256, ge=1)  # decisions per group commit
    # How long a batch holding only bookkeeping (task_accepted, agent_log) waits for more work
    # before it commits, so that it shares a commit with the result that follows.
    batch_linger: float = Field(0.005, ge=0, le=1)
    # How long the acknowledgement of a stored result waits to travel in one message with the
    # next ones to the same worker (0: sent right after the commit). The worker keeps each
    # result until acknowledged (on disk if the ack is late, ADR 0022); nothing else waits on
    # the ack (ADR 0020).
    ack_linger: float = Field(0.02, ge=0, le=1)

    # Quality loop: when no other worker can review a subtask, skip the review, run it on
    # the author's worker, or ask a person.
    review_without_peer: Literal["skip", "same_worker", "checkpoint"] = "skip"

    # Readiness: `/readyz` answers 200 only once this many workers are connected to this copy
    # (`shoal up` waits for its own worker; a shared control plane needs none to be ready).
    ready_workers: int = Field(0, ge=0, le=10_000)

    # Auth.
    bcrypt_rounds: int = Field(12, ge=4, le=16)
    access_token_minutes: int = Field(24 * 60, ge=1)
    refresh_token_days: int = Field(30, ge=1)
    rate_limit_per_minute: int = Field(600, ge=1)  # requests per signed-in user
    login_rate_limit_per_minute: int = Field(20, ge=1)  # sign-in attempts per client address
    # Sign-in attempts per username, from any address (right or wrong: every one counts).
    login_account_rate_limit_per_minute: int = Field(10, ge=1)
    max_request_bytes: int = Field(16 * 1024 * 1024, ge=1024)  # larger bodies: 413

    # Browsers. `cors_origins`: the other origins (`https://app.example.com`, no path) whose
    # pages may call the API; none by default, so only the dashboard's own origin can.
    # `hsts_max_age`: seconds of `Strict-Transport-Security` on every answer; 0 (the default)
    # sends none. Set it (a year: 31536000) only when every client reaches Shoal over HTTPS:
    # a browser that saw it refuses plain HTTP to this host until it runs out.
    cors_origins: list[str] = Field(default_factory=list)
    hsts_max_age: int = Field(0, ge=0)

    # Uploads (a task's sources): per file, per request (`POST /api/v1/uploads`, which may
    # carry several files, or a zip of them), and in all per user; past one: 413.
    max_upload_bytes: int = Field(100 * 1024 * 1024, ge=1024)
    max_upload_files: int = Field(20, ge=1, le=1000)
    max_user_upload_bytes: int = Field(2 * 1024**3, ge=1024)
    source_text_chars: int = Field(2_000_000, ge=1000)  # of a source's text, kept and searched

    # Notifications (webhooks and email). The notifier turns task ends and checkpoints in the
    # event log into deliveries (docs/guides/notifications.md). A delivery is tried at most
    # `notify_max_attempts` times; after try n it waits `notify_retry_base *
    # notify_retry_factor ** (n - 1)` seconds, give or take `notify_retry_jitter` of that:
    # 90 s, 4.5 min, 13.5 min, 40.5 min by default, an hour in all.
    notify_poll_interval: float = Field(1.0, gt=0, le=60)  # seconds between looks at the log
    notify_batch: int = Field(500, ge=1, le=10_000)  # events read per transaction
    notify_concurrency: int = Field(16, ge=1, le=1024)  # deliveries in flight, per copy
    notify_per_webhook: int = Field(2, ge=1, le=64)  # of those, to one webhook at once
    notify_max_attempts: int = Field(5, ge=1, le=20)
    notify_retry_base: float = Field(90.0, ge=0, le=86_400)
    notify_retry_factor: float = Field(3.0, ge=1, le=10)
    notify_retry_jitter: float = Field(0.2, ge=0, le=1)
    notify_max_webhooks: int = Field(10, ge=1, le=1000)  # per user
    notify_keep_days: int = Field(30, ge=1, le=3650)  # finished deliveries kept this long
    webhook_timeout: float = Field(10.0, gt=0, le=300)  # one request, connecting included
    # Outside dev mode webhooks must use HTTPS and resolve to public addresses only; set this
    # to let them reach private networks too (an intranet receiver).
    webhook_allow_private: bool = False
    smtp_host: str | None = None  # None: this server sends no email
    smtp_port: int = Field(587, ge=1, le=65535)
    smtp_tls: Literal["starttls", "tls", "none"] = "starttls"  # "tls": implicit, port 465
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    smtp_from: str = "Shoal <shoal@localhost>"
    smtp_timeout: float = Field(30.0, gt=0, le=300)
    smtp_ca_file: Path | None = None  # trust this CA bundle instead of the system's

    # Worker side.
    worker_name: str | None = None
    worker_slots: int = Field(2, ge=1, le=256)
    # permessage-deflate on the worker's connection: less traffic for big results over a slow
    # link, but CPU on both ends for every message (ADR 0011), so off unless asked for.
    worker_compression: bool = False
    default_tool: str = "openai_compat"
    openai_compat_base_url: str | None = None
    openai_compat_api_key: str = "sk-local"
    openai_compat_model: str = "shoal-demo"
    agent_max_turns: int = Field(24, ge=1)
    command_timeout: float = Field(120.0, gt=0)
    tools: list[str] | None = None  # offer only these tools (default: every one found)
    tool_path: str | None = None  # extra folders (os.pathsep-separated) to find AI CLIs in

    # AI tools. Keys and base URLs are also read from the vendors' own variables.
    anthropic_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SHOAL_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"))
    anthropic_base_url: str | None = Field(
        None, validation_alias=AliasChoices("SHOAL_ANTHROPIC_BASE_URL", "ANTHROPIC_BASE_URL"))
    anthropic_model: str = "claude-sonnet-4-5"
    openai_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SHOAL_OPENAI_API_KEY", "OPENAI_API_KEY"))
    openai_base_url: str | None = Field(
        None, validation_alias=AliasChoices("SHOAL_OPENAI_BASE_URL", "OPENAI_BASE_URL"))
    openai_model: str = "gpt-5"
    gemini_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SHOAL_GEMINI_API_KEY", "GEMINI_API_KEY",
                                            "GOOGLE_API_KEY"))
    gemini_base_url: str | None = Field(
        None, validation_alias=AliasChoices("SHOAL_GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"))
    gemini_model: str = "gemini-2.5-pro"
    ollama_host: str = Field(
        "http://127.0.0.1:11434", validation_alias=AliasChoices("SHOAL_OLLAMA_HOST",
                                                                "OLLAMA_HOST"))
    ollama_model: str = "llama3.1"
    claude_binary: str = "claude"
    claude_model: str | None = None  # default: the CLI's own
    gemini_binary: str = "gemini"
    codex_binary: str = "codex"
    codex_model: str = "gpt-5-codex"
    model_max_retries: int = Field(4, ge=0, le=10)  # per model API call, on 429/5xx/network
    model_retry_base: float = Field(1.0, ge=0)  # seconds; doubles per retry, with jitter
    model_retry_cap: float = Field(60.0, ge=0)

    # Embeddings for search over a task's sources (`shoal mcp sources`, shoal.retrieval): the
    # provider whose embeddings endpoint is asked, with its base URL and key from the settings
    # above (openai_compat: SHOAL_OPENAI_COMPAT_BASE_URL; openai: OPENAI_API_KEY; ollama:
    # OLLAMA_HOST), and the model. No model: search is BM25 alone, and its results say so.
    embedding_provider: Literal["openai_compat", "openai", "ollama"] = "openai_compat"
    embedding_model: str | None = None
    embedding_batch: int = Field(64, ge=1, le=2048)  # texts per request
    embedding_timeout: float = Field(60.0, gt=0, le=600)  # seconds per request

    # Literature search (`shoal mcp literature`, shoal.retrieval.literature): arXiv's API and
    # Crossref's, each asked at most once per `literature_interval` seconds (arXiv asks for one
    # request every 3 s), a failed request retried `literature_max_retries` times after
    # `literature_retry_base` seconds, doubling (or what `Retry-After` says, up to
    # `literature_retry_cap`). `literature_mailto` goes in the User-Agent (Crossref's polite pool).
    literature_arxiv_url: str = "http://export.arxiv.org/api/query"
    literature_crossref_url: str = "https://api.crossref.org"
    literature_mailto: str | None = None
    literature_interval: float = Field(3.0, ge=0, le=60)
    literature_timeout: float = Field(20.0, gt=0, le=300)
    literature_max_retries: int = Field(3, ge=0, le=10)
    literature_retry_base: float = Field(1.0, ge=0, le=60)
    literature_retry_cap: float = Field(30.0, ge=0, le=600)

    @field_validator("retry_delays")
    @classmethod
    def _delays_non_negative(cls, value: list[float]) -> list[float]:
        if any(d < 0 for d in value):
            raise ValueError("retry delays must be >= 0")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, value: str) -> str:
        proxies = []
        for entry in filter(None, (part.strip() for part in value.split(","))):
            try:
                proxies.append(str(ipaddress.ip_network(entry, strict=False)
                                   if "/" in entry else ipaddress.ip_address(entry)))
            except ValueError:
                raise ValueError(
                    f"{entry!r} is not an IP address or network: list the load balancer's "
                    "address (10.0.0.5) or network (10.0.0.0/24). \"*\" is refused: any client "
                    "could then choose its own address, and with it a fresh sign-in allowance."
                ) from None
        return ",".join(proxies)

    @field_validator("cors_origins")
    @classmethod
    def _origins_exact(cls, value: list[str]) -> list[str]:
        origins = []
        for origin in value:
            origin = origin.strip().rstrip("/")
            if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", origin):
                raise ValueError(
                    f"{origin!r} is not an origin: write scheme://host[:port], such as "
                    "https://app.example.com, with no path and no wildcard (\"*\" would let "
                    "any site call the API with its visitors' credentials).")
            origins.append(origin.lower())
        return origins

    @model_validator(mode="after")
    def _refuse_unsafe_defaults(self) -> Settings:
        if self.mode != "dev" and self.secret_key == DEV_SECRET:
            raise ValueError(
                "SHOAL_SECRET_KEY is left at its development default. Set it to a long random "
                "value (python -c 'import secrets; print(secrets.token_urlsafe(48))'), "
                "or run in dev mode with SHOAL_MODE=dev."
            )
        if self.lease_seconds <= self.heartbeat_interval:
            raise ValueError("lease_seconds must be longer than heartbeat_interval")
        if self.claim_ttl <= self.claim_interval:
            raise ValueError("claim_ttl must be longer than claim_interval")
        if not self.instance_id:
            self.instance_id = folder_instance_id(self.data_dir)
        return self

    @property
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to a SQLite file in the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'shoal.db').resolve()}"

    @property
    def artifacts_dir(self) -> Path:
        """Where content-addressed files live."""
        return self.data_dir / "artifacts"

    @property
    def base_url(self) -> str:
        """The URL people and workers use to reach this control plane."""
        return self.public_url or f"http://{self.host}:{self.port}"
