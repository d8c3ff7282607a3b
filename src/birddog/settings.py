"""Settings from the environment: ``BIRDDOG_*`` and ``DATABASE_URL``.

Every default of the design is a setting; the README has the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import platformdirs
from pydantic import (
    AliasChoices,
    AliasGenerator,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from birddog.core.duration import parse_duration
from birddog.core.egress import PUSH_EGRESS_SETTING, EgressPolicy
from birddog.core.errors import InvalidInput
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES
from birddog.core.retention import RetentionPolicy
from birddog.core.schedule import RetrySchedule
from birddog.core.spool import DEFAULT_SPOOL_MAX_AGE_S, DEFAULT_SPOOL_MAX_BYTES
from birddog.engine import EngineConfig
from birddog.sealing import ALERT_CONTEXT, SecretBox


def _checkout_of(package_dir: Path) -> Path | None:
    """The repository BirdDog runs from (an editable install), or None for an installed one."""
    checkout = package_dir.parents[1]
    if (
        package_dir.parent.name == "src"
        and (checkout / "pyproject.toml").is_file()
        and (checkout / ".git").exists()
    ):
        return checkout
    return None


def spool_path_for(package_dir: Path) -> Path:
    """Where the local spool lives by default for BirdDog installed at ``package_dir``.

    In a checkout, ``spool.db`` beside the embedded server's data in ``.birddog``;
    installed from a wheel, the user's XDG state directory
    (``~/.local/state/birddog/spool.db``): mail waiting to be sent is state, not data.

    Args:
        package_dir: the directory of the ``birddog`` package.

    Returns:
        The spool file.
    """
    checkout = _checkout_of(package_dir)
    if checkout is not None:
        return checkout / ".birddog" / "spool.db"
    return Path(platformdirs.user_state_dir("birddog")) / "spool.db"


def data_dir_for(package_dir: Path) -> Path:
    """Where the embedded server's data lives for BirdDog installed at ``package_dir``.

    Run from a checkout (an editable install: the package sits in ``src/birddog`` of a
    repository), the data stays with that checkout in ``.birddog`` (ignored by git), so
    two clones never share a database. Installed from a wheel, it goes to the user's XDG
    data directory (``~/.local/share/birddog``).

    Args:
        package_dir: the directory of the ``birddog`` package.

    Returns:
        The data directory.
    """
    checkout = _checkout_of(package_dir)
    if checkout is not None:
        return checkout / ".birddog"
    return Path(platformdirs.user_data_dir("birddog"))


def variable_of(field: str) -> str:
    """The environment variable a setting is read from: ``BIRDDOG_PAGE_SIZE``.

    Args:
        field: the setting's field name (``page_size``).

    Returns:
        Its variable, upper case (``DATABASE_URL`` for the database).
    """
    return "DATABASE_URL" if field == "database_url" else f"BIRDDOG_{field.upper()}"


class Settings(BaseSettings):
    """BirdDog's settings; each field reads ``BIRDDOG_<NAME>`` (``DATABASE_URL`` as is).

    Only the upper-case names count: ``database_url`` or ``birddog_secret_key`` in the
    environment are someone else's variables, never BirdDog's settings. In code, give
    settings by field name (``Settings(database_url=...)``): they win over the
    environment, as pydantic-settings' keywords do; an unknown name is an error.
    """

    def __init__(self, **values: Any) -> None:
        # The fields read their variables' names (upper case, case-sensitive); a keyword
        # given by field name is passed on under that name, so code keeps field names.
        fields = type(self).model_fields
        super().__init__(**{variable_of(k) if k in fields else k: v for k, v in values.items()})

    model_config = SettingsConfigDict(
        env_prefix="BIRDDOG_",
        case_sensitive=True,
        alias_generator=AliasGenerator(validation_alias=variable_of),
        extra="forbid",
        frozen=True,
        # A duration or a ratio of nan or inf is no setting: refused like any bad value.
        allow_inf_nan=False,
    )

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "BIRDDOG_DATABASE_URL"),
        description="PostgreSQL DSN; unset: an embedded server in data_dir.",
    )
    pgbouncer: bool = Field(
        False,
        description="DATABASE_URL is a PgBouncer in transaction mode: no statement cache.",
    )
    listen_url: str | None = Field(
        None,
        description="A direct (unpooled) DSN for LISTEN when DATABASE_URL is a PgBouncer.",
    )
    data_dir: Path = Field(
        default_factory=lambda: data_dir_for(Path(__file__).resolve().parent),
        description="Where the embedded PostgreSQL keeps its data: ./.birddog in a checkout.",
    )
    page_size: int = Field(64, ge=1, le=1000, description="Replies per drain page.")
    max_attempts: int = Field(20, ge=1, description="Attempts before a reply dies.")
    base_delay_s: float = Field(1.0, ge=0, description="First retry delay; doubles each time.")
    max_delay_s: float = Field(3600.0, ge=0, description="Longest retry delay.")
    jitter: float = Field(0.2, ge=0, lt=1, description="Retry delay spread (fraction).")
    max_age_s: float = Field(86400.0, gt=0, description="A reply older than this dies.")
    max_deferral_s: float = Field(3600.0, ge=0, description="Longest single deferral.")
    post_timeout_s: float = Field(30.0, gt=0, description="A post without answer fails.")
    lease_s: float = Field(60.0, gt=0, description="How long a claimed page is held.")
    window_size: int = Field(256, ge=1, description="Posts the daemon keeps in flight.")
    per_recipient_in_flight: int = Field(
        16, ge=1, description="Posts in flight to one recipient at most."
    )
    fresh_rows: int = Field(
        16, ge=0, description="Rows a notification claims beside a full window (0: off)."
    )
    backstop_s: float = Field(30.0, gt=0, description="Longest sleep without a wake.")
    shutdown_grace_s: float = Field(10.0, ge=0, description="Time to finish in-flight posts.")
    max_content_bytes: int = Field(
        DEFAULT_MAX_CONTENT_BYTES, ge=1, description="Largest mail or reply content."
    )
    max_body_bytes: int = Field(65536, ge=1, description="Largest inbox answer read.")
    egress: Literal["internal", "public"] = Field(
        "internal", description="Route destinations: internal (private too) or public only."
    )
    push_egress: Literal["internal", "public"] = Field(
        "public",
        description="A2A push config URLs: public only (default), or internal (private and "
        "loopback too; said loudly at start).",
    )
    egress_allow: str = Field("", description="CIDRs posts may always reach (a,b,...).")
    egress_deny: str = Field("", description="CIDRs posts may never reach (a,b,...).")
    http_proxy: str | None = Field(None, description="Every post goes through this proxy.")
    alert_url: str | None = Field(None, description="Signed dead-letter alerts go here.")
    alert_secret: str | None = Field(
        None, description="Signing secret for alerts (whsec_, or sealed: secrets seal)."
    )
    alert_coalesce_s: float = Field(
        5.0, ge=0, description="Dead letters of one recipient within this go out as one alert."
    )
    secret_key: SecretStr | None = Field(
        None, description="Seals stored signing secrets (AES-GCM); unset: stored as given."
    )
    secret_key_previous: SecretStr | None = Field(
        None, description="Older keys (a,b,...) that still open what they sealed."
    )
    metrics_port: int = Field(9464, ge=0, le=65535, description="/metrics and /healthz; 0: off.")
    metrics_host: str = Field("127.0.0.1", description="Address the metrics server binds.")
    worker_metrics_port: int = Field(
        9466, ge=0, le=65535, description="A worker's /metrics and /healthz; 0: off."
    )
    worker_metrics_host: str = Field(
        "127.0.0.1", description="Address a worker's metrics server binds."
    )
    log_format: Literal["auto", "json", "console"] = Field("auto", description="Log renderer.")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info")
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        "auto", description="The drain daemon's event loop; auto: uvloop when installed."
    )
    worker_concurrency: int = Field(4, ge=1, description="Jobs a worker runs at once.")
    handler_timeout_s: float = Field(900.0, gt=0, description="A handler running longer is cut.")
    kill_grace_s: float = Field(
        5.0, ge=0, description="A --command's process group: SIGTERM, then SIGKILL after this."
    )
    job_lease_s: float = Field(60.0, gt=0, description="A worker's job lease; heartbeats renew.")
    queue_concurrency: int = Field(
        1, ge=1, le=1000, description="Jobs of one queue (session) running at once, all workers."
    )
    job_max_queued_s: float = Field(
        86400.0, gt=0, description="A job no worker claims for this long is cancelled."
    )
    check_pending_s: float = Field(
        7200.0, gt=0, description="`check` fails when a reply is pending longer."
    )
    check_dead_s: float = Field(
        3600.0, gt=0, description="`check` fails when a dead letter is newer."
    )
    stale_interactive_s: float = Field(
        7200.0,
        gt=0,
        description="`check` fails when interactive mail (a task, an escalation) is queued "
        "longer; informational mail only once this long past its digest time.",
    )
    check_job_queued_s: float | None = Field(
        None, gt=0, description="The former name of BIRDDOG_STALE_INTERACTIVE_S (wins when set)."
    )
    check_lease_overdue_s: float = Field(
        60.0, ge=0, description="`check` fails when a job runs this long past its lease."
    )
    check_hold_s: float = Field(
        86400.0, gt=0, description="`check` fails when a recipient is held longer."
    )
    check_daemon_s: float = Field(
        120.0, gt=0, description="`check` fails when replies are due and no daemon beat since."
    )
    retain_receipts_s: float | None = Field(
        None, description="The daemon deletes receipts older than this (30d); unset: kept."
    )
    retain_jobs_s: float | None = Field(
        None, description="The daemon deletes jobs settled longer ago (7d); unset: kept."
    )
    retain_dead_s: float | None = Field(
        None, description="The daemon deletes dead letters older than this; unset: kept."
    )
    retain_mailbox_s: float | None = Field(
        None, description="The daemon deletes mailbox replies read longer ago; unset: kept."
    )
    prune_every_s: float = Field(
        3600.0, gt=0, description="How often the daemon prunes when a retention is set."
    )
    spool_path: Path | None = Field(
        None,
        description="The local spool for mail sent while the database is unreachable; "
        "unset: spool.db in the data directory (a checkout's .birddog), else the XDG state "
        "directory.",
    )
    spool_max_bytes: int = Field(
        DEFAULT_SPOOL_MAX_BYTES, ge=4096, description="A spool this full refuses new mail."
    )
    spool_max_age_s: float = Field(
        DEFAULT_SPOOL_MAX_AGE_S, gt=0, description="Spooled mail older than this is quarantined."
    )
    spool_forward_s: float = Field(
        5.0, gt=0, description="How often the daemon, worker and MCP server look for spooled mail."
    )
    check_spool_s: float = Field(
        600.0, gt=0, description="`check` fails when spooled mail is older."
    )
    mcp_sessions_per_token: int = Field(
        16,
        ge=1,
        le=10_000,
        description="Open MCP HTTP sessions one token may hold; past it the token's session "
        "idle the longest ends, and with all busy a new one is refused.",
    )
    mcp_session_idle_s: float = Field(
        300.0, gt=0, description="An MCP HTTP session with no request this long is ended."
    )

    @field_validator(
        "retain_receipts_s",
        "retain_jobs_s",
        "retain_dead_s",
        "retain_mailbox_s",
        "spool_max_age_s",
        mode="before",
    )
    @classmethod
    def _duration(cls, value: object, info: ValidationInfo) -> float | None:
        # "30d", "12h", "90m" or seconds; an empty value means unset.
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not isinstance(value, str | int | float):
            raise ValueError("must be a duration such as 30d, 12h or 90m")  # noqa: TRY004
        try:
            return parse_duration(value, field=str(info.field_name))
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None

    def spool_location(self) -> Path:
        """The spool file: ``BIRDDOG_SPOOL_PATH``, else a default.

        The default is ``spool.db`` in a data directory that was set (``BIRDDOG_DATA_DIR``),
        else where :func:`spool_path_for` says.
        """
        if self.spool_path is not None:
            return self.spool_path
        if "data_dir" in self.model_fields_set:
            return self.data_dir / "spool.db"
        return spool_path_for(Path(__file__).resolve().parent)

    def retention(self) -> RetentionPolicy:
        """What the daemon prunes (nothing unless a ``BIRDDOG_RETAIN_*`` is set)."""
        return RetentionPolicy(
            receipts_s=self.retain_receipts_s,
            jobs_settled_s=self.retain_jobs_s,
            dead_s=self.retain_dead_s,
            mailbox_read_s=self.retain_mailbox_s,
        )

    @model_validator(mode="after")
    def _lease_outlasts_a_post(self) -> Settings:
        # A lease that ends while its post is still out lets another daemon post the same
        # reply at the same time: a duplicate the lease exists to prevent.
        if self.lease_s <= self.post_timeout_s:
            raise ValueError(
                f"BIRDDOG_LEASE_S ({self.lease_s:g}) must be longer than "
                f"BIRDDOG_POST_TIMEOUT_S ({self.post_timeout_s:g})"
            )
        return self

    @model_validator(mode="after")
    def _egress_parses(self) -> Settings:
        try:
            self.egress_policy()
            self.secret_box()
        except InvalidInput as exc:
            # Name the setting and the rule, never the value.
            raise ValueError(f"{exc.field}: {exc}") from None
        if self.http_proxy is not None:
            proxy = urlsplit(self.http_proxy)
            if proxy.scheme not in ("http", "https") or not proxy.hostname:
                raise ValueError("BIRDDOG_HTTP_PROXY: must be an http or https URL with a host")
        return self

    def secret_box(self) -> SecretBox:
        """What seals and opens stored secrets (``BIRDDOG_SECRET_KEY``, ``_PREVIOUS``)."""
        return SecretBox.from_settings(
            self.secret_key.get_secret_value() if self.secret_key else None,
            self.secret_key_previous.get_secret_value() if self.secret_key_previous else None,
        )

    def alert_signing_secret(self) -> str | None:
        """``BIRDDOG_ALERT_SECRET`` in plain form (it may be given sealed).

        Raises:
            SecretUnreadable: it is sealed with a key BirdDog was not given.
        """
        if self.alert_secret is None:
            return None
        return self.secret_box().open(self.alert_secret, context=ALERT_CONTEXT)

    def egress_policy(self) -> EgressPolicy:
        """The egress policy ``BIRDDOG_EGRESS``, ``_ALLOW`` and ``_DENY`` describe."""
        return EgressPolicy.parse(self.egress, self.egress_allow, self.egress_deny)

    def push_egress_policy(self) -> EgressPolicy:
        """The policy of A2A push URLs: ``BIRDDOG_PUSH_EGRESS``, the same CIDR lists."""
        policy = EgressPolicy.parse(self.push_egress, self.egress_allow, self.egress_deny)
        return EgressPolicy(policy.mode, policy.allow, policy.deny, setting=PUSH_EGRESS_SETTING)

    def schedule(self) -> RetrySchedule:
        """The retry schedule these settings describe."""
        return RetrySchedule(
            max_attempts=self.max_attempts,
            base_delay_s=self.base_delay_s,
            max_delay_s=self.max_delay_s,
            jitter=self.jitter,
            max_age_s=self.max_age_s,
            max_deferral_s=self.max_deferral_s,
        )

    def engine_config(self) -> EngineConfig:
        """The drain engine's configuration these settings describe (post timeout included)."""
        return EngineConfig(
            schedule=self.schedule(),
            page_size=self.page_size,
            lease_s=self.lease_s,
            post_timeout_s=self.post_timeout_s,
            window_size=self.window_size,
            per_recipient=self.per_recipient_in_flight,
            fresh_rows=self.fresh_rows,
        )
