"""The one seam to the management API, and the only module that imports httpx.

Every httpx error, non-2xx answer, malformed or truncated body becomes a
:class:`~reaper.errors.BrokerUnavailable` with a reason a person can act on (worded in
:mod:`reaper.broker.failures`) and no password in it; a 401/403 on a write is
:class:`~reaper.errors.BrokerRefused`, a 400 :class:`BrokerRejected`. TLS is set up here once
(:func:`tls_context`). A cluster's management URLs are tried in order of preference: a node
that refuses or times out on a read is skipped for the rest of the pass; a write that timed out
is never sent elsewhere (``docs/brokers.md``, "A clustered broker").
"""

from __future__ import annotations

import re
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, unquote, urlsplit

import httpx

from reaper.broker.bounded import ENCODINGS, Answer, decoded, read_answer
from reaper.broker.failures import connect_words, not_http_words, reason_words, tags_fix
from reaper.errors import BrokerRefused, BrokerUnavailable, scrub

__all__ = [
    "BrokerRejected",
    "BrokerTls",
    "ManagementApi",
    "Transport",
    "api_path",
    "tags_fix",
    "tls_context",
]

_WRITE_METHODS: Final = frozenset({"PUT", "POST", "DELETE", "PATCH"})
#: Sent once more when the connection broke before an answer: a read, and a PUT (each PUT here
#: writes a whole definition, a policy or the demo's vhost, so a second leaves what one would).
#: Never a POST (a requeueing get counts a delivery on a quorum queue) nor a DELETE (a second
#: one answers 404).
_RESENDABLE_METHODS: Final = frozenset({"GET", "HEAD", "PUT"})
#: A vhost-wide listing: a 404 there means the vhost does not exist.
_VHOST_PATH: Final = re.compile(
    r"^/api/(queues|policies|exchanges|bindings|permissions|vhosts)/([^/]+)$"
)
#: The broker's reason when the credentials are right but the user's tags do not allow the
#: API (RabbitMQ 3.10 to 4.3: "Not management user", "Not monitor user").
_TAG_REASONS: Final = ("not management user", "not monitor user")


@dataclass(frozen=True)
class BrokerTls:
    """``[bus]``'s TLS: the CA file, a client certificate and key, and whether to verify."""

    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    verify: bool = True


def tls_context(tls: BrokerTls) -> ssl.SSLContext:
    """The one SSL context of every https request. Raises ``BrokerUnavailable`` naming the
    setting and file that cannot be loaded."""
    try:
        context = ssl.create_default_context(cafile=tls.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise BrokerUnavailable(
            f"bus.ca_file {tls.ca_file} cannot be loaded as PEM CA certificates: {_why(exc)}"
        ) from None
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.client_cert_file is not None:
        try:
            context.load_cert_chain(tls.client_cert_file, tls.client_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise BrokerUnavailable(
                f"bus.client_cert_file {tls.client_cert_file} (key "
                f"{tls.client_key_file or 'in the same file'}) cannot be loaded: {_why(exc)}"
            ) from None
    return context


def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else None) or str(exc)


#: What carries the requests: the network, or a test's stand-in (respx, a proxy).
Transport = httpx.AsyncBaseTransport
#: Awaited between an answer's headers and its body (:meth:`ManagementApi.request`).
Turn = Callable[[], Awaitable[object]]
_Params = Mapping[str, str | int] | None


class BrokerRejected(BrokerUnavailable):
    """The broker understood the request and refused it (400), e.g. a policy key or an
    ``apply-to`` value this version does not know. ``reason`` carries the broker's words."""


def api_path(*segments: str) -> str:
    """The management API's path of ``segments`` (``"queues", vhost, name``), each one
    percent-encoded whole: the vhost ``/`` is ``%2F``, and a name never reaches past its own
    segment. A lone surrogate (a hostile answer's, never a real name) is sent as its bytes."""
    return "/api/" + "/".join(quote(s, safe="", errors="surrogatepass") for s in segments)


class ManagementApi:
    """Requests to one broker's management API, each through :meth:`request`, at the first of
    ``management_urls`` (one node of a cluster each) that answers. A URL that did not answer is
    skipped until :meth:`begin_pass`, which a pass calls as it starts.

    ``requests_made`` counts every HTTP request sent; ``writes_made`` those with a writing
    method (PUT/POST/DELETE), which includes a requeueing ``get``: it is a POST, and on a
    quorum queue it changes the queue (it counts as a delivery); ``resent`` the method of each
    request sent a second time (:meth:`_send`), counted in both as well.
    """

    def __init__(
        self,
        management_urls: str | Sequence[str],
        username: str,
        password: str,
        *,
        timeout_seconds: float = 10,
        transport: Transport | None = None,
        tls: BrokerTls | None = None,
    ) -> None:
        urls = [management_urls] if isinstance(management_urls, str) else list(management_urls)
        if not urls:
            raise ValueError("no management URL given")
        for url in urls:
            parts = urlsplit(url)
            if parts.username is not None or parts.password is not None:
                raise ValueError(
                    scrub(
                        f"management URL {url} carries credentials: "
                        "give them as [bus] username/password instead",
                        [password],
                    )
                )
        if timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be positive, not {timeout_seconds}")
        self.management_urls = tuple(url.rstrip("/") for url in urls)
        self.username = username
        self.timeout_seconds = timeout_seconds
        self.requests_made = 0
        self.writes_made = 0
        self.resent: list[str] = []
        #: This pass's nodes that did not answer (URL: why), and those that did.
        self.skipped: dict[str, str] = {}
        self.answered: set[str] = set()
        self._last_url: str | None = None
        self._password = password
        self.tls = tls or BrokerTls()
        #: Why TLS cannot be set up (a CA file missing): every request then fails with it.
        self.tls_problem: str | None = None
        # Plain http URLs need no SSL context, and building one costs about 20 ms of CPU (the
        # system's CA store is read): a pass that starts every few seconds should not pay it.
        context: ssl.SSLContext | bool = False
        if any(u.startswith("https:") for u in self.management_urls):
            context = True
            try:
                context = tls_context(self.tls)
            except BrokerUnavailable as exc:
                self.tls_problem = exc.reason
        self._http = httpx.AsyncClient(
            auth=httpx.BasicAuth(username, password),
            timeout=httpx.Timeout(timeout_seconds),
            transport=transport,
            headers={"accept": "application/json", "accept-encoding": ENCODINGS},
            follow_redirects=False,
            verify=context,
        )

    @property
    def management_url(self) -> str:
        """Where the next request goes: the first URL not skipped in this pass."""
        return next(
            (url for url in self.management_urls if url not in self.skipped),
            self.management_urls[0],
        )

    def begin_pass(self) -> None:
        """Forget which nodes answered: each pass tries the URLs in order of preference."""
        self.skipped.clear()
        self.answered.clear()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json: object = None,
        missing: str | None = None,
        turn: Turn | None = None,
    ) -> object:
        """Send one request and return its decoded JSON body (None for an empty body).
        Every failure leaves here as a ``BrokerUnavailable`` (or subclass); ``missing`` names
        what a 404 means ("queue 'x'"). ``turn``, if given, is awaited between the answer's
        headers and its body: a request sent ahead holds no body until its turn."""
        write = method in _WRITE_METHODS
        what = f"{method} {path if len(path) <= 200 else path[:200] + '…'}"
        response: Answer | None = None
        url = self.management_url
        if self.tls_problem is not None and any(
            u.startswith("https:") for u in self.management_urls
        ):
            raise self.unavailable(f"cannot set up TLS: {self.tls_problem}")
        for url in [u for u in self.management_urls if u not in self.skipped]:
            try:
                response = await self._send(method, url, path, params=params, json=json, turn=turn)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # Never sent: another node may take it.
                self.skipped[url] = f"could not be reached on {what}: {connect_words(exc, url)}"
                continue
            except httpx.TimeoutException as exc:
                timed_out = (
                    f"timed out after {self.timeout_seconds:g} s on {what} ({type(exc).__name__})"
                )
                if write:
                    raise self.unavailable(
                        f"{timed_out}: not sent to another node, whether it took effect is unknown",
                        url=url,
                    ) from None
                self.skipped[url] = timed_out
                continue
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.DecodingError) as exc:
                not_http = not_http_words(exc, url)
                if not_http is not None:
                    raise self.unavailable(f"{not_http} (on {what})", url=url) from None
                raise self.unavailable(
                    f"returned a truncated or broken body on {what} ({exc}): retry; if it "
                    "persists, check the broker's log and any proxy in between",
                    url=url,
                ) from None
            except (httpx.HTTPError, httpx.InvalidURL) as exc:  # a URL too long to send
                raise self.unavailable(
                    f"failed on {what}: {type(exc).__name__}: {exc}", url=url
                ) from None
            self.answered.add(url)
            self._last_url = url
            break
        if response is None:
            raise self._none_answered()

        status = response.status_code
        if status >= 300:
            raise self._status_error(status, what, response, write=write, missing=missing, url=url)
        if response.too_large is not None:
            raise self._too_large(response, what, missing, url)
        if not response.kept:
            return None
        self._check_complete(response, what, url)
        try:
            body: object = decoded(response.kept)
        except (ValueError, RecursionError):
            start = response.text_start()
            raise self.unavailable(
                f"returned a body that is not JSON on {what} (starts {start!r}): "
                "is the URL the management API and not some other service?",
                status,
                url=url,
            ) from None
        return body

    async def _send(
        self,
        method: str,
        url: str,
        path: str,
        *,
        params: _Params,
        json: object,
        turn: Turn | None,
    ) -> Answer:
        """One request; one whose connection broke before its answer was whole is sent once
        more if that is safe (``_RESENDABLE_METHODS``). A kept-alive connection that the node
        closes just as a request goes out is an ordinary race ("Server disconnected without
        sending a response": seen on RabbitMQ 4.3 under load on a read, and on 4.0 on a PUT
        that followed a 401). Any other write is never sent twice: whether it took effect
        would be unknown."""
        write = method in _WRITE_METHODS
        self._count(write)
        started = time.monotonic()
        try:
            answer = await self._read(method, url + path, params=params, json=json, turn=turn)
        except (httpx.RemoteProtocolError, httpx.ReadError):
            if method not in _RESENDABLE_METHODS:
                raise
            self._count(write)
            self.resent.append(method)
            answer = await self._read(method, url + path, params=params, json=json, turn=turn)
        answer.log(f"{method} {scrub(url)}{path}", 1e3 * (time.monotonic() - started))
        return answer

    async def _read(
        self, method: str, url: str, *, params: _Params, json: object, turn: Turn | None
    ) -> Answer:
        """Send one request; read its answer as sent (still compressed: a test's double has
        it read already), only a bounded copy kept (:func:`bounded.read_answer`)."""
        request = self._http.build_request(method, url, params=params, json=json)
        response = await self._http.send(request, stream=True)
        read = response.is_stream_consumed
        try:
            if turn is not None:
                await turn()
            return await read_answer(
                response.aiter_bytes() if read else response.aiter_raw(),
                response.headers,
                response.status_code,
                response.reason_phrase,
                inflate=not read,
            )
        finally:
            await response.aclose()

    def _count(self, write: bool) -> None:
        self.requests_made += 1
        if write:
            self.writes_made += 1

    def mapping(self, body: object, path: str) -> Mapping[str, object]:
        """``body`` if it is a JSON object, else the API answered something it should not."""
        if not isinstance(body, Mapping):
            raise self.unavailable(f"answered {path} with something that is not a JSON object")
        return body

    def unavailable(
        self, problem: str, status: int | None = None, *, url: str | None = None
    ) -> BrokerUnavailable:
        return BrokerUnavailable(self._line(problem, url), status)

    def _none_answered(self) -> BrokerUnavailable:
        if len(self.management_urls) == 1:
            url = self.management_urls[0]
            return self.unavailable(self.skipped.get(url, "did not answer"), url=url)
        tried = "; ".join(
            f"at {url} {self.skipped.get(url, 'did not answer')}" for url in self.management_urls
        )
        return BrokerUnavailable(
            scrub(f"no RabbitMQ management API answered: {tried}", [self._password])
        )

    def _too_large(
        self, response: Answer, what: str, missing: str | None, url: str
    ) -> BrokerUnavailable:
        whose = f" ({missing})" if missing else ""
        return self.unavailable(
            f"answered {what}{whose} with a body that {response.too_large}: not read further; "
            "see what fills it on the broker (rabbitmqadmin, the management UI)",
            response.status_code,
            url=url,
        )

    def _check_complete(self, response: Answer, what: str, url: str) -> None:
        declared = response.declared
        if declared is not None and declared != response.received:
            raise self.unavailable(
                f"returned a truncated body on {what} (received {response.received} of "
                f"{declared} bytes): retry; if it persists, check any proxy in between",
                response.status_code,
                url=url,
            )

    def _status_error(
        self,
        status: int,
        what: str,
        response: Answer,
        *,
        write: bool,
        missing: str | None,
        url: str,
    ) -> BrokerUnavailable:
        said = reason_words(response.kept)
        user = f"user {self.username!r}"
        if status in (401, 403) and write:
            return BrokerRefused(
                self._line(
                    f"refused {what} for {user} ({status}{said}): the user needs the "
                    "'policymaker' (or 'administrator') tag and write permission on the vhost",
                    url,
                ),
                status,
            )
        if status == 401 and any(reason in said.lower() for reason in _TAG_REASONS):
            return self.unavailable(
                f"accepted the password of {user} but its tags do not allow {what} "
                f"({status}{said}): {tags_fix(self.username)}",
                status,
                url=url,
            )
        if status == 401 and "not administrator user" in said.lower():
            return self.unavailable(
                f"answered {what} only to an administrator ({status}{said}): the reaper's "
                f"user needs no such tag; {what} is not a request a pass makes",
                status,
                url=url,
            )
        if status == 401:
            return self.unavailable(
                f"refused the credentials for {user} ({status}{said}) on {what}: "
                "check [bus] username/password",
                status,
                url=url,
            )
        if status == 403:
            return self.unavailable(
                f"denied {user} access ({status}{said}) on {what}: the user needs the "
                "'monitoring' (or 'management') tag and permissions on the vhost",
                status,
                url=url,
            )
        if status in (404, 406) and urlsplit(url).path.rstrip("/").endswith("/api"):
            return self.unavailable(
                f"answered {status} on {what}: the URL ends in /api, and the reaper adds "
                f"/api/... itself; set the management URL to {url.rstrip('/')[:-4]}",
                status,
                url=url,
            )
        vhost = _VHOST_PATH.match(what.partition(" ")[2])
        if status == 404 and missing is None and vhost is not None:
            name = unquote(vhost.group(2))
            return self.unavailable(
                f"has no vhost {name!r} (404 on {what}): set bus.vhost to one that exists "
                f"(rabbitmqctl list_vhosts), or create it (rabbitmqctl add_vhost {name})",
                status,
                url=url,
            )
        if status == 404:
            thing = missing or "such resource"
            return self.unavailable(f"has no {thing} (404) on {what}", status, url=url)
        if status == 400:
            return BrokerRejected(self._line(f"rejected {what} ({status}{said})", url), status)
        return self.unavailable(
            f"answered {status} {response.reason_phrase} on {what}{said}", status, url=url
        )

    def _line(self, problem: str, url: str | None = None) -> str:
        where = url or self._last_url or self.management_url
        return scrub(f"RabbitMQ management API at {where} {problem}", [self._password])
