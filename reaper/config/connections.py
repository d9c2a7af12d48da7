"""``[bus]`` and ``[database]``: where the reaper reads from, and how it connects."""

from __future__ import annotations

from urllib.parse import parse_qs

from pydantic import BaseModel, Field, SecretStr, field_validator

from reaper.config.fields import SECTION, bounded, refused, split_url

__all__ = ["BusSettings", "DatabaseSettings"]


class BusSettings(BaseModel):
    """``[bus]``: the broker's management HTTP API."""

    model_config = SECTION

    management_url: str = Field(
        default="http://127.0.0.1:15672",
        description="the management API, http(s), no credentials (not used when "
        "management_urls is set)",
    )
    management_urls: list[str] | None = Field(
        default=None,
        description="a cluster's management APIs, one per node, in order of preference; when "
        "set, used instead of management_url",
    )
    username: str = Field(default="guest", min_length=1, description="management API user")
    password: SecretStr = Field(default=SecretStr("guest"), description="management API password")
    vhost: str = Field(default="/", min_length=1, description="the virtual host the reaper judges")
    prefix: str = Field(
        default="vibey",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="prefix of the policy names the reaper owns",
    )
    timeout_seconds: float = bounded(
        10.0,
        gt=0,
        le=600,
        finite=True,
        description="per-request HTTP timeout",
        below="a request needs time to be answered",
        above="a request waiting over ten minutes is a hung pass",
    )

    @field_validator("management_url")
    @classmethod
    def _management_url(cls, url: str) -> str:
        problem = _url_problem(url)
        if problem is not None:
            raise refused(problem)
        return url

    @field_validator("management_urls")
    @classmethod
    def _management_urls(cls, urls: list[str] | None) -> list[str] | None:
        if urls is None:
            return None
        if not urls:
            raise refused(
                "is an empty list, which names no broker: list at least one URL, or leave the "
                "key out to use bus.management_url"
            )
        for number, url in enumerate(urls, start=1):
            problem = _url_problem(url)
            if problem is not None:
                raise refused(f"item {number} {problem}")
        if len({url.rstrip("/") for url in urls}) != len(urls):
            raise refused("lists a URL twice: each node once, in order of preference")
        return urls

    def urls_in_force(self) -> tuple[str, ...]:
        """The management URLs the reaper uses, in order of preference."""
        if self.management_urls is not None:
            return tuple(self.management_urls)
        return (self.management_url,)


def _url_problem(url: str) -> str | None:
    """What is wrong with a management URL, or None."""
    if "@" in url:
        return (
            "carries credentials (an '@' in the URL): set bus.username and bus.password "
            "(REAPER_BUS__PASSWORD) instead, so that no log line can print the password"
        )
    parts = split_url(url)
    if parts is None:
        return "is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    return None


class DatabaseSettings(BaseModel):
    """``[database]``: the PostgreSQL that holds the job queue and the ledger."""

    model_config = SECTION

    dsn: str = Field(
        default="postgresql://127.0.0.1:5432/postgres",
        description="a postgresql:// URL; a user is fine, a password is refused",
    )
    password: SecretStr | None = Field(
        default=None, description="the database password (else PGPASSWORD or ~/.pgpass)"
    )
    pool_size: int = bounded(
        4,
        ge=1,
        le=100,
        description="connections in the pool",
        below="the store needs at least one connection",
        above="a reaper needs no more than a hundred connections",
    )
    statement_timeout_seconds: float = bounded(
        30.0,
        gt=0,
        le=86400,
        finite=True,
        description="per-statement timeout",
        below="a statement needs time to run",
        above="a statement running over a day is a hung pass",
    )
    lock_timeout_seconds: float = bounded(
        2.0,
        ge=0.1,
        le=30,
        finite=True,
        description="how long `reaper db migrate` waits for a lock on a live table before "
        "it stops and names who holds it",
        below="0 means no timeout at all to PostgreSQL (the migration would wait behind any "
        "long transaction while the host's traffic queues behind it), and under 0.1 s the "
        "ordinary churn of short transactions on a busy table would refuse every lock",
        above="the host's traffic queues behind a migration waiting for its lock: more than "
        "30 s of stalled claims is the outage this bound exists to prevent",
    )
    hook_connections: int = bounded(
        1,
        ge=1,
        le=100,
        description="connections a worker's hook uses at most during a pass (of the worker's "
        "own pool, when it shares one)",
        below="a pass needs one connection",
        above="a worker's hook needs no more than a hundred connections",
    )
    keep_connections: bool = Field(
        default=False,
        description="keep the hook's and serve's connections open between passes (false: "
        "none is held between passes)",
    )

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, dsn: str) -> str:
        parts = split_url(dsn)
        if parts is None:
            raise refused("is not a valid postgresql:// URL")
        if parts.password is not None or any(
            k.lower() == "password" for k in parse_qs(parts.query)
        ):
            raise refused(
                "carries a password; put it in database.password (REAPER_DATABASE__PASSWORD), "
                "PGPASSWORD or ~/.pgpass instead, so that no log line can print it"
            )
        if parts.scheme not in ("postgresql", "postgres"):
            raise refused("must be a postgresql:// URL")
        return dsn
