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

    mode: Literal["dev", "production"] = Field(
        "production", description="`dev` allows the development secret key, webhooks over "
                                  "plain HTTP or to private addresses, and SMTP sign-in without "
                                  "TLS; `production` refuses them.")
    data_dir: Path = Field(Path(".shoal"), description="Where the SQLite database and stored "
                                                       "files live.")
    database_url: str | None = Field(None, description="The database (PostgreSQL or SQLite) "
                                                       "URL; default: a SQLite file in "
                                                       "`data_dir`.")
    redis_url: str | None = Field(None, description="Redis, for the event bus shared by "
                                                    "control-plane copies; default: in-process.")
    redis_namespace: str = Field(
        "shoal", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$",
        description="The start of every Redis key and channel name: deployments sharing one "
                    "Redis set their own.")
    secret_key: str = Field(DEV_SECRET, description="Signs access tokens; outside dev mode it "
                                                    "must be changed from the default.")
    host: str = Field("127.0.0.1", description="The address the server listens on.")
    port: int = Field(8000, description="The port the server listens on.")
    public_url: str | None = Field(None, description="How users and workers reach this server "
                                                     "(links, webhooks); default "
                                                     "http://host:port.")
    trusted_proxies: str = Field(
        "127.0.0.1",
        description="The proxies (addresses or networks, comma-separated) whose "
                    "X-Forwarded-For and X-Forwarded-Proto are believed: the load balancer "
                    "only, which must set X-Forwarded-For to the address it sees (deploy "
                    "guide); empty: believe none.")

    # Leases and retries (DESIGN §3).
    heartbeat_interval: float = Field(10.0, gt=0, description="Seconds between a worker's "
                                                              "heartbeats.")
    lease_seconds: float = Field(30.0, gt=0, description="An attempt whose worker is silent "
                                                         "this long is lost and retried.")
    sweep_interval: float = Field(1.0, gt=0, description="Seconds between looks for expired "
                                                         "leases and due retries.")
    max_attempts: int = Field(3, ge=1, le=20, description="Tries of a subtask before it fails.")
    retry_delays: list[float] = Field(default_factory=lambda: [10.0, 30.0, 60.0],
                                      description="Seconds before each retry (the last repeats).")
    retry_jitter: float = Field(0.1, ge=0, le=1, description="A retry's delay varies by this "
                                                             "share, at random.")

    # Task ownership among control-plane copies sharing one database (store/claims.py).
    instance_id: str = Field(
        "", max_length=255,
        description="This copy's name among copies sharing a database; default: from the host "
                    "name and the data folder, so a copy restarted after a crash takes its "
                    "tasks back at once. Two copies on one host with one data folder need one "
                    "each.")
    claim_ttl: float = Field(30.0, gt=0, description="A copy silent this long loses its tasks "
                                                     "to the others.")
    claim_interval: float = Field(10.0, gt=0, description="Seconds between a copy's renewals "
                                                          "of its claims.")

    max_active_tasks: int = Field(
        3, ge=1, le=10_000, description="Tasks one user may run at once; more wait `queued`, in "
                                        "order (an admin sets a user's own limit).")
    daily_tokens: int | None = Field(
        None, ge=1, description="Model tokens one user may use in a day (UTC); past it, a "
                                "submission is refused with 429 until midnight. None: no limit.")
    daily_cost_usd: float | None = Field(None, gt=0, description="US dollars one user may spend "
                                                                 "in a day (UTC), likewise.")

    file_sweep_interval: float = Field(60.0, gt=0, description="Seconds between sweeps of "
                                                               "stored files no row refers to.")
    file_sweep_grace: float = Field(
        3600.0, ge=0, description="A file is swept only this long after it was last stored "
                                  "(another task may be storing the same bytes).")

    # Limits.
    subtask_timeout: float = Field(900.0, gt=0, description="Seconds one attempt may run.")
    planner_timeout: float = Field(300.0, gt=0, description="Seconds a planning attempt may "
                                                            "run.")
    max_subtasks: int = Field(500, ge=1, description="The most subtasks one task may have.")
    max_result_bytes: int = Field(20 * 1024 * 1024, ge=1024,
                                  description="The largest result a worker may send.")
    # Off: a compressor per socket costs memory and CPU for every frame, where events and
    # heartbeats are small.
    ws_compression: bool = Field(False, description="permessage-deflate on WebSockets (workers' "
                                                    "and clients'), for slow links.")
    max_file_bytes: int = Field(5 * 1024 * 1024, ge=1,
                                description="The largest file a result may carry.")
    max_files_per_result: int = Field(500, ge=1, description="The most files one result may "
                                                             "carry.")
    batch_max: int = Field(256, ge=1, description="Decisions per group commit.")
    batch_linger: float = Field(
        0.005, ge=0, le=1, description="Seconds a batch holding only bookkeeping waits for more "
                                       "work, to share a commit with the result that follows.")
    ack_linger: float = Field(
        0.02, ge=0, le=1, description="Seconds the acknowledgement of a stored result waits to "
                                      "travel with the next ones to the same worker (0: at "
                                      "once; ADR 0020, 0022).")
    sse_linger: float = Field(
        0.01, ge=0, le=1, description="Seconds at least between two writes of live events to "
                                      "one SSE client: an event that comes sooner waits, and "
                                      "goes with what came meanwhile (a task that publishes "
                                      "every millisecond costs its client a write each "
                                      "`sse_linger`, not one a step); one after a quiet spell "
                                      "goes at once, as does a task's end or a question for a "
                                      "person (0: every delivery at once; ADR 0051).")

    review_without_peer: Literal["skip", "same_worker", "checkpoint"] = Field(
        "skip", description="Quality loop, when no other worker can review a subtask: skip the "
                            "review, run it on the author's worker, or ask a person.")

    ready_workers: int = Field(
        0, ge=0, le=10_000, description="`/readyz` answers 200 only once this many workers are "
                                        "connected to this copy.")

    # Auth.
    bcrypt_rounds: int = Field(12, ge=4, le=16, description="The cost of password hashing.")
    access_token_minutes: int = Field(24 * 60, ge=1, description="How long an access token "
                                                                 "lasts.")
    refresh_token_days: int = Field(30, ge=1, description="How long a refresh token lasts.")
    rate_limit_per_minute: int = Field(600, ge=1, description="Requests per signed-in user.")
    login_rate_limit_per_minute: int = Field(20, ge=1, description="Sign-in attempts per client "
                                                                   "address.")
    login_account_rate_limit_per_minute: int = Field(
        10, ge=1, description="Sign-in attempts per username, from any address (every one "
                              "counts, right or wrong).")
    max_request_bytes: int = Field(16 * 1024 * 1024, ge=1024,
                                   description="Larger request bodies are refused (413).")
    slow_request_seconds: float = Field(
        5.0, ge=0, description="An HTTP request that takes longer is logged "
                               "(`http.slow_request`; an event stream: to its headers; 0: none).")
    loop_stall_seconds: float = Field(
        2.0, ge=0, description="When the control plane's event loop has not answered for this "
                               "long, the line it is held at is logged (`event_loop.stalled`; "
                               "0: not watched).")

    # Browsers.
    cors_origins: list[str] = Field(
        default_factory=list, description="Other origins (`https://app.example.com`, no path) "
                                          "whose pages may call the API; none: only the "
                                          "dashboard's own.")
    hsts_max_age: int = Field(
        0, ge=0, description="Seconds of `Strict-Transport-Security` on every answer (0: none). "
                             "Set it only when every client uses HTTPS.")

    # Uploads (a task's sources); past one: 413.
    max_upload_bytes: int = Field(100 * 1024 * 1024, ge=1024,
                                  description="The largest uploaded file.")
    max_upload_files: int = Field(20, ge=1, le=1000, description="Files per upload request.")
    max_user_upload_bytes: int = Field(2 * 1024**3, ge=1024,
                                       description="Uploads one user may keep, in all.")
    source_text_chars: int = Field(2_000_000, ge=1000, description="Characters of a source's "
                                                                   "text kept and searched.")

    # Notifications (webhooks and email, docs/guides/notifications.md). After try n a delivery waits
    # `notify_retry_base * notify_retry_factor ** (n - 1)` seconds, give or take the jitter:
    # 90 s, 4.5 min, 13.5 min, 40.5 min by default, an hour in all.
    notify_poll_interval: float = Field(1.0, gt=0, le=60, description="Seconds between the "
                                                                      "notifier's looks at the "
                                                                      "event log.")
    notify_batch: int = Field(500, ge=1, le=10_000, description="Events read per transaction.")
    notify_concurrency: int = Field(16, ge=1, le=1024, description="Deliveries in flight, per "
                                                                   "copy.")
    notify_per_webhook: int = Field(2, ge=1, le=64, description="Of those, to one webhook at "
                                                                "once.")
    notify_max_attempts: int = Field(5, ge=1, le=20, description="Tries of one delivery.")
    notify_retry_base: float = Field(90.0, ge=0, le=86_400, description="Seconds after the "
                                                                        "first failed try.")
    notify_retry_factor: float = Field(3.0, ge=1, le=10, description="Each later wait is this "
                                                                     "many times the one "
                                                                     "before.")
    notify_retry_jitter: float = Field(0.2, ge=0, le=1, description="A wait varies by this "
                                                                    "share, at random.")
    notify_max_webhooks: int = Field(10, ge=1, le=1000, description="Webhooks per user.")
    notify_keep_days: int = Field(30, ge=1, le=3650, description="Finished deliveries are kept "
                                                                 "this long.")
    webhook_timeout: float = Field(10.0, gt=0, le=300, description="Seconds of one webhook "
                                                                   "request, connecting "
                                                                   "included.")
    webhook_allow_private: bool = Field(
        False, description="Let webhooks reach private networks (outside dev mode they must "
                           "use HTTPS and resolve to public addresses).")
    smtp_host: str | None = Field(None, description="The mail server; none: no email is sent.")
    smtp_port: int = Field(587, ge=1, le=65535, description="The mail server's port.")
    smtp_tls: Literal["starttls", "tls", "none"] = Field(
        "starttls", description="`starttls`, `tls` (implicit, port 465) or `none`.")
    smtp_username: str | None = Field(None, description="The mail server's user.")
    smtp_password: SecretStr | None = Field(None, description="The mail server's password.")
    smtp_from: str = Field("Shoal <shoal@localhost>", description="The sender of emails.")
    smtp_timeout: float = Field(30.0, gt=0, le=300, description="Seconds of one mail session.")
    smtp_ca_file: Path | None = Field(None, description="Trust this CA bundle instead of the "
                                                        "system's.")

    # Worker side.
    worker_name: str | None = Field(None, description="The worker's name; default: the host "
                                                      "name.")
    worker_slots: int = Field(2, ge=1, le=256, description="Attempts a worker runs at once.")
    worker_compression: bool = Field(
        False, description="permessage-deflate on the worker's connection: less traffic for "
                           "big results over a slow link, CPU on both ends (ADR 0011).")
    default_tool: str = Field("openai_compat", description="The tool a subtask runs with when "
                                                           "nothing else chooses one.")
    openai_compat_base_url: str | None = Field(
        None, description="An OpenAI-compatible server (`openai_compat` tool, embeddings).")
    openai_compat_api_key: str = Field("sk-local", description="Its key.")
    openai_compat_model: str = Field("shoal-demo", description="Its model.")
    agent_max_turns: int = Field(24, ge=1, description="Model turns one agent attempt may take.")
    command_timeout: float = Field(120.0, gt=0, description="Seconds one command an agent runs "
                                                            "may take.")
    tools: list[str] | None = Field(None, description="Offer only these tools (default: every "
                                                      "one found).")
    tool_path: str | None = Field(None, description="Extra folders (os.pathsep-separated) to "
                                                    "find AI CLIs in.")

    # AI tools. Keys and base URLs are also read from the vendors' own variables.
    anthropic_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SHOAL_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"),
        description="Anthropic's API key (`anthropic` tool).")
    anthropic_base_url: str | None = Field(
        None, validation_alias=AliasChoices("SHOAL_ANTHROPIC_BASE_URL", "ANTHROPIC_BASE_URL"),
        description="Anthropic's API address, if not the default.")
    anthropic_model: str = Field("claude-sonnet-4-5", description="The `anthropic` tool's "
                                                                  "model.")
    openai_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SHOAL_OPENAI_API_KEY", "OPENAI_API_KEY"),
        description="OpenAI's API key (`openai` tool).")
    openai_base_url: str | None = Field(
        None, validation_alias=AliasChoices("SHOAL_OPENAI_BASE_URL", "OPENAI_BASE_URL"),
        description="OpenAI's API address, if not the default.")
    openai_model: str = Field("gpt-5", description="The `openai` tool's model.")
    gemini_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SHOAL_GEMINI_API_KEY", "GEMINI_API_KEY",
                                            "GOOGLE_API_KEY"),
        description="Google's Gemini API key (`gemini` tool).")
    gemini_base_url: str | None = Field(
        None, validation_alias=AliasChoices("SHOAL_GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"),
        description="Gemini's API address, if not the default.")
    gemini_model: str = Field("gemini-2.5-pro", description="The Gemini tools' model.")
    ollama_host: str = Field(
        "http://127.0.0.1:11434", validation_alias=AliasChoices("SHOAL_OLLAMA_HOST",
                                                                "OLLAMA_HOST"),
        description="The Ollama server (`ollama` tool, embeddings).")
    ollama_model: str = Field("llama3.1", description="The `ollama` tool's model.")
    claude_binary: str = Field("claude",
                               description="The Claude Code CLI to run (`claude_code` tool).")
    claude_model: str | None = Field(None, description="Its model; default: the CLI's own.")
    gemini_binary: str = Field("gemini", description="The Gemini CLI to run (`gemini_cli` tool).")
    codex_binary: str = Field("codex", description="The Codex CLI to run (`codex` tool).")
    codex_model: str = Field("gpt-5-codex", description="Its model.")
    model_max_retries: int = Field(4, ge=0, le=10, description="Retries of one model API call, "
                                                              "on 429, 5xx or a network error.")
    model_retry_base: float = Field(1.0, ge=0, description="Seconds before the first retry; "
                                                           "doubles per retry, with jitter.")
    model_retry_cap: float = Field(60.0, ge=0, description="The longest wait between retries.")

    # Embeddings for search over a task's sources (shoal.retrieval): base URLs and keys from
    # the settings above. No model: search is BM25 alone, and its results say so.
    embedding_provider: Literal["openai_compat", "openai", "ollama"] = Field(
        "openai_compat", description="Whose embeddings endpoint is asked (its base URL and key "
                                     "from that provider's settings).")
    embedding_model: str | None = Field(None, description="The embedding model; none: search "
                                                          "is BM25 alone.")
    embedding_batch: int = Field(64, ge=1, le=2048, description="Texts per embeddings request.")
    embedding_timeout: float = Field(60.0, gt=0, le=600, description="Seconds per embeddings "
                                                                     "request.")

    # Literature search (`shoal mcp literature`, shoal.retrieval.literature).
    literature_arxiv_url: str = Field("http://export.arxiv.org/api/query",
                                      description="arXiv's API.")
    literature_crossref_url: str = Field("https://api.crossref.org",
                                         description="Crossref's API.")
    literature_mailto: str | None = Field(None, description="An address for the User-Agent "
                                                            "(Crossref's polite pool).")
    literature_interval: float = Field(3.0, ge=0, le=60, description="Seconds between requests "
                                                                     "to one API (arXiv asks "
                                                                     "for 3).")
    literature_timeout: float = Field(20.0, gt=0, le=300, description="Seconds per request.")
    literature_max_retries: int = Field(3, ge=0, le=10, description="Retries of a failed "
                                                                    "request.")
    literature_retry_base: float = Field(1.0, ge=0, le=60, description="Seconds before the "
                                                                       "first retry, doubling "
                                                                       "(or what Retry-After "
                                                                       "says).")
    literature_retry_cap: float = Field(30.0, ge=0, le=600, description="The longest wait "
                                                                        "between retries.")

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
