"""``[bus]`` and ``[database]``: where the reaper reads from, and how it connects.

A password may come from a file (``password_file``: a Kubernetes or Docker secret), read when
the configuration is validated: a file that cannot be read is a problem naming its path, never
its content. TLS to the management API is ``ca_file``, ``client_cert_file``,
``client_key_file`` and ``verify``; to PostgreSQL the DSN's ``sslmode``/``sslrootcert``/
``sslcert``/``sslkey``, or the same keys under ``[database]``.
"""

from __future__ import annotations

from typing import Any, Final, Literal
from urllib.parse import parse_qs, urlencode

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from reaper.config.fields import SECTION, bounded, cross_field, refused, split_url

__all__ = ["DSN_TLS_KEYS", "BusSettings", "DatabaseSettings", "read_secret_file"]

#: The libpq TLS parameters the reaper takes from ``[database]`` as well as from the DSN.
DSN_TLS_KEYS: Final = ("sslmode", "sslrootcert", "sslcert", "sslkey")

SslMode = Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]


def _problem(text: str) -> PydanticCustomError:
    """A problem spanning keys, reported as written (it names the keys itself)."""
    return cross_field("{text}", text=text)


def read_secret_file(path: str, key: str = "the secret file") -> str:
    """The secret a file holds (one trailing newline dropped, as ``echo`` writes it). A file
    that cannot be read is refused naming ``key``, the path and the reason, never the
    content."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise _problem(f"{key} {path} cannot be read: {why}") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise _problem(f"{key} {path} is empty: a password file holds the password")
    return text


def _password_from_file(data: Any, section: str) -> Any:
    """``password_file`` read into ``password``; both set at once is ambiguous, so refused."""
    if not isinstance(data, dict) or data.get("password_file") is None:
        return data
    path = data["password_file"]
    if not isinstance(path, str) or not path:
        return data  # the field's own validation names it
    if data.get("password") is not None:
        raise _problem(
            f"{section}.password and {section}.password_file are both set: keep one, so that "
            "which password is used is never a guess"
        )
    return {**data, "password": SecretStr(read_secret_file(path, f"{section}.password_file"))}


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
    password_file: str | None = Field(
        default=None,
        min_length=1,
        description="a file holding the management API password (a mounted secret); "
        "instead of password",
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
    ca_file: str | None = Field(
        default=None,
        min_length=1,
        description="PEM file of the CA(s) that signed the management API's certificate "
        "(default: the system's trust store)",
    )
    client_cert_file: str | None = Field(
        default=None, min_length=1, description="PEM client certificate for mutual TLS"
    )
    client_key_file: str | None = Field(
        default=None,
        min_length=1,
        description="PEM key of client_cert_file (when the certificate file does not hold it)",
    )
    verify: bool = Field(
        default=True,
        description="verify the management API's certificate and name; false is for a "
        "first look only, and every report says it loudly",
    )

    @model_validator(mode="before")
    @classmethod
    def _password_file(cls, data: Any) -> Any:
        return _password_from_file(data, "bus")

    @model_validator(mode="after")
    def _client_key(self) -> BusSettings:
        if self.client_key_file is not None and self.client_cert_file is None:
            raise _problem(
                "bus.client_key_file is set without bus.client_cert_file: a key alone "
                "authenticates nothing; set the certificate too"
            )
        return self

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

    def tls_warning(self) -> str | None:
        """The loud warning every report and ``config show`` carry while ``verify`` is off."""
        if self.verify:
            return None
        return (
            "WARNING: bus.verify = false: the management API's TLS certificate is NOT "
            "verified, so anyone on the path can read the broker password and forge the "
            "broker's answers; set bus.ca_file to the CA that signed it and remove bus.verify"
        )

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
    password_file: str | None = Field(
        default=None,
        min_length=1,
        description="a file holding the database password (a mounted secret); instead of password",
    )
    sslmode: SslMode | None = Field(
        default=None,
        description="libpq's sslmode (verify-full checks the CA and the host name); "
        "instead of the DSN's",
    )
    sslrootcert: str | None = Field(
        default=None, min_length=1, description="PEM file of the CA that signed the server's"
    )
    sslcert: str | None = Field(default=None, min_length=1, description="PEM client certificate")
    sslkey: str | None = Field(default=None, min_length=1, description="PEM key of sslcert")
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

    @model_validator(mode="before")
    @classmethod
    def _password_file(cls, data: Any) -> Any:
        return _password_from_file(data, "database")

    @model_validator(mode="after")
    def _tls_once(self) -> DatabaseSettings:
        parts = split_url(self.dsn)
        query = parse_qs(parts.query) if parts is not None else {}
        for key in DSN_TLS_KEYS:
            mine = getattr(self, key)
            theirs = query.get(key)
            if mine is not None and theirs is not None and theirs[-1] != mine:
                raise _problem(
                    f"database.{key} = {mine!r} and the DSN's {key}={theirs[-1]} disagree: "
                    "set it in one place"
                )
        return self

    def dsn_in_force(self) -> str:
        """The DSN with the ``[database]`` TLS keys added as its query parameters (asyncpg
        reads them from there, as libpq does)."""
        extra = {key: getattr(self, key) for key in DSN_TLS_KEYS if getattr(self, key)}
        if not extra:
            return self.dsn
        parts = split_url(self.dsn)
        if parts is None:
            return self.dsn
        have = parse_qs(parts.query)
        extra = {k: v for k, v in extra.items() if k not in have}
        if not extra:
            return self.dsn
        query = "&".join(q for q in (parts.query, urlencode(extra)) if q)
        return parts._replace(query=query).geturl()

    def tls(self) -> dict[str, str]:
        """The TLS parameters in force (from the DSN or ``[database]``), for messages."""
        parts = split_url(self.dsn_in_force())
        query = parse_qs(parts.query) if parts is not None else {}
        return {key: query[key][-1] for key in DSN_TLS_KEYS if key in query}
