"""Bounded HTTP for the metric sources: what a slow, hostile or confused peer can cost the operator.

Every request has one total deadline (connect, send, every byte of the answer), not a per-read
timeout, so a peer that drips a byte a second is cut off on time; an answer is read up to a size cap;
redirects are not followed (a redirect could lead past the allow-list, or carry the token to plain
http); URLs and their parameters are built by yarl (aiohttp's URL library), never by concatenation.
The URL a resource names is parsed and checked first: http or https, a host, and no userinfo, query
or fragment, so nothing a tenant writes can become part of a query. A failure is a `FetchFailed`
with a fault and a fixed message: nothing the peer sent is quoted, so no upstream answer reaches a
condition, an Event or a log line.

aiohttp, not requests: a coroutine can be cancelled, so a source's poll ends at its deadline and the
operator shuts down without waiting for any peer; a thread blocked in a read cannot be stopped.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
import yarl

from infertune.api.observation import MetricsFault
from infertune.errors import SourceError

MAX_URL_LENGTH = 2048
# A metrics request that takes longer than this is a fault, whatever a resource asks for (the CRD's bound).
TIMEOUT_MIN_SECONDS = 0.1
TIMEOUT_MAX_SECONDS = 30.0
MiB = 1 << 20
_T = TypeVar("_T")


class UrlError(SourceError):
    """A URL that the operator will not use: the message names the rule it breaks, not the peer's answer."""


class FetchFailed(SourceError):
    """A request failed: `fault` is the condition reason, `detail` a fixed phrase (never the peer's words),
    and the message names where: `<where>: <detail>`."""

    def __init__(self, fault: MetricsFault, detail: str, where: str = "") -> None:
        super().__init__(f"{where}: {detail}" if where else detail)
        self.fault = fault
        self.detail = detail

    def at(self, where: str) -> FetchFailed:
        """The same failure, named after `where` (a pod rather than its address)."""
        return FetchFailed(self.fault, self.detail, where)


def source_url(text: str, what: str = "url") -> yarl.URL:
    """`text` as a base URL the operator may query: http(s), a host, no userinfo, query or fragment."""
    if not isinstance(text, str) or not text.strip():
        raise UrlError(f"{what}: a URL like https://prometheus.monitoring.svc:9090 is required")
    if len(text) > MAX_URL_LENGTH:
        raise UrlError(f"{what}: longer than {MAX_URL_LENGTH} characters")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise UrlError(f"{what}: contains whitespace or control characters")
    try:
        url = yarl.URL(text.strip())
        host, port = url.host, url.port  # an out-of-range port raises here
    except ValueError:
        raise UrlError(f"{what}: not a URL") from None
    if url.scheme not in ("http", "https"):
        raise UrlError(f"{what}: the scheme must be http or https")
    if not host:
        raise UrlError(f"{what}: no host")
    if url.raw_user is not None or url.raw_password is not None or "@" in (url.raw_authority or ""):
        raise UrlError(f"{what}: must not carry a user or password (use bearerTokenSecretRef)")
    if url.raw_query_string or "?" in text:
        raise UrlError(f"{what}: must not carry a query ('?'); name the server, the operator builds the queries")
    if url.raw_fragment or "#" in text:
        raise UrlError(f"{what}: must not carry a fragment ('#')")
    if port is None or not 0 < port < 65536:
        raise UrlError(f"{what}: bad port")
    path = url.raw_path.rstrip("/")
    return url.with_path(path or "/", encoded=True)


def origin(url: yarl.URL) -> str:
    """scheme://host:port: how messages name a source, short and free of any path a tenant wrote."""
    return str(url.origin())


@dataclass(frozen=True)
class AllowList:
    """Where tenants may point the operator: URL prefixes (scheme, host and port equal, the path at a
    segment boundary). Empty: anywhere. Set by the platform (`infertune run --allowed-prometheus-url`,
    the chart's `prometheus.allowedUrls`), never by a tenant."""

    prefixes: tuple[yarl.URL, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str], what: str = "--allowed-prometheus-url") -> AllowList:
        return cls(tuple(source_url(entry, what) for entry in entries if entry.strip()))

    def allows(self, url: yarl.URL) -> bool:
        if not self.prefixes:
            return True
        path = url.path.rstrip("/") + "/"
        return any(url.origin() == prefix.origin() and path.startswith(prefix.path.rstrip("/") + "/")
                   for prefix in self.prefixes)

    def __str__(self) -> str:
        return ", ".join(str(p) for p in self.prefixes) or "anywhere"


def tls_context(ca_path: str | None, insecure: bool) -> ssl.SSLContext:
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=ca_path)


class Client:
    """One source's HTTP: at most `limit` requests at a time, each done within `timeout` seconds in
    all and at most `max_bytes` long. A session belongs to one event loop; the operator's poller keeps
    one for the source's life, a command makes one per call (`run`). With a token, `base` is the one
    server it may be sent to."""

    def __init__(self, base: yarl.URL | None = None, *, token: str | None = None, ca_path: str | None = None,
                 insecure: bool = False, timeout: float = 5.0, max_bytes: int = 8 * MiB, limit: int = 4,
                 allow_token_over_http: bool = False) -> None:
        if token and (base is None or base.scheme != "https") and not allow_token_over_http:
            where = "" if base is None else f"{origin(base)}: "
            raise UrlError(f"{where}refusing to send the bearer token over plain http; use https, or set "
                           "allowTokenOverHttp: true if this network is trusted")
        if not (TIMEOUT_MIN_SECONDS <= timeout <= TIMEOUT_MAX_SECONDS):
            raise UrlError(f"timeout must be {TIMEOUT_MIN_SECONDS:g}..{TIMEOUT_MAX_SECONDS:g} s, got {timeout:g}")
        self.base = base
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.limit = limit
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._ca_path, self._insecure = ca_path, insecure
        self._session: aiohttp.ClientSession | None = None
        self._gate: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _open(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop or self._gate is None:
            # trust_env off: a proxy from the environment would be a second, unchecked route. The TLS
            # context (the system's CAs, or the resource's) is made here, once per session, not per source.
            tls = tls_context(self._ca_path, self._insecure)
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.limit, ssl=tls),
                                                  trust_env=False, auto_decompress=True)
            self._gate, self._loop = asyncio.Semaphore(self.limit), loop
        return self._session, self._gate

    async def get(self, url: yarl.URL, params: Mapping[str, str] | None = None) -> bytes:
        """The answer's body; FetchFailed on any failure, the deadline and the size cap included."""
        if self._headers and (self.base is None or url.origin() != self.base.origin()):
            raise FetchFailed(MetricsFault.CREDENTIALS, "the token is only sent to its own server", origin(url))
        session, gate = self._open()
        where = origin(url)
        async with gate:
            try:
                async with asyncio.timeout(self.timeout):
                    async with session.get(url, params=params, headers=self._headers, allow_redirects=False,
                                           timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                        _check_status(resp.status, where)
                        return await _read_capped(resp, self.max_bytes, where)
            except TimeoutError:
                raise FetchFailed(MetricsFault.TIMEOUT, f"no complete answer within {self.timeout:g}s",
                                  where) from None
            except aiohttp.ClientConnectorCertificateError:
                raise FetchFailed(MetricsFault.UNREACHABLE, "its TLS certificate is not trusted (set a CA)",
                                  where) from None
            except aiohttp.ClientConnectorError as exc:
                # A fixed phrase per cause (never the peer's words): refused is the runbook's first case.
                refused = isinstance(exc.os_error, ConnectionRefusedError)
                detail = "connection refused" if refused else "connection failed"
                raise FetchFailed(MetricsFault.UNREACHABLE, f"cannot reach it ({detail})", where) from None
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                # A server killed or restarted under a kept-alive connection resets or closes it, mid-answer.
                raise FetchFailed(MetricsFault.UNREACHABLE, "cannot reach it (connection lost)", where) from None
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                raise FetchFailed(MetricsFault.UNREACHABLE, f"cannot reach it ({type(exc).__name__})",
                                  where) from None

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()


def _check_status(status: int, where: str) -> None:
    if status == 200:
        return
    if status >= 500:
        raise FetchFailed(MetricsFault.SERVER_ERROR, f"answered HTTP {status}", where)
    if status in (401, 403):
        raise FetchFailed(MetricsFault.UNREACHABLE, f"answered HTTP {status}: check the token", where)
    if 300 <= status < 400:
        raise FetchFailed(MetricsFault.UNREACHABLE, f"answered with a redirect (HTTP {status}), which is not "
                                                    "followed: name the final URL", where)
    if not 100 <= status < 600:
        raise FetchFailed(MetricsFault.MALFORMED, "answered with no valid HTTP status", where)
    raise FetchFailed(MetricsFault.MALFORMED, f"rejected the request: HTTP {status}", where)


def _too_big(max_bytes: int, where: str) -> FetchFailed:
    return FetchFailed(MetricsFault.MALFORMED, f"sent an answer over {max_bytes / MiB:g} MiB", where)


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int, where: str) -> bytes:
    declared = resp.content_length
    if declared is not None and declared > max_bytes:
        raise _too_big(max_bytes, where)
    chunks, size = [], 0
    async for chunk in resp.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > max_bytes:
            raise _too_big(max_bytes, where)
        chunks.append(chunk)
    return b"".join(chunks)


def run(client: Client, work: Callable[[], Awaitable[_T]]) -> _T:
    """Runs `work` to completion from synchronous code (the commands, the tests) on a fresh loop,
    closing the session it opened."""
    async def main() -> _T:
        try:
            return await work()
        finally:
            await client.aclose()

    return asyncio.run(main())
