"""Requests to an OpenAI-compatible server: where (Endpoint), what comes back (JSON chunks) and
every way it can fail, as one RemoteError with a one-line message.

Owns: the base URL and its checks, the Bearer key (never shown: see Endpoint.redact), timeouts
(connect, and between chunks), retries of 429 and 503 honouring Retry-After, and turning transport
and HTTP failures into messages. Knows nothing about prompts, frames, files or the terminal.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx2

from dcode.filler import FillError
from dcode.history import clean_url
from dcode.remote.sse import MalformedStream, chunks

INCEPTION_HOST = "api.inceptionlabs.ai"  # Mercury 2: whole-text streams, /v1/fim/completions
RETRIES = 3  # extra tries after a 429 or 503
BACKOFF = 1.0  # seconds before the first retry when the server names no Retry-After; doubles each time
MOST_WAIT = 60.0  # a Retry-After longer than this is an error now, not a minute of silence
BUSY = (429, 503)


class RemoteError(FillError):
    """A failure talking to the endpoint, as one line (a FillError: a repair pass meeting one keeps
    the text it had). `kind` picks the exit code: "usage" for what
    the user can fix in the command (URL, key, model), "runtime" for the rest; `status` is the HTTP
    status when there was one."""

    def __init__(
        self,
        message: str,
        kind: Literal["usage", "runtime"] = "runtime",
        status: int | None = None,
        named: tuple[str, ...] = (),
    ):
        super().__init__(message)
        self.kind, self.status, self.named = kind, status, named  # named: request fields the server blamed


def to_stderr(line: str) -> None:
    print(f"dcode: {line}", file=sys.stderr)


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible base URL (`http://host:8000/v1`) and how to talk to it."""

    url: str  # the base, without a trailing slash; "http://host:8000" gets "/v1"
    key: str | None = field(default=None, repr=False)  # Bearer token; never printed
    model: str | None = None  # the remote model id (None: Inception's mercury-2, else the first listed)
    timeout: float = 60.0  # seconds to connect, and the longest silence between two chunks
    retries: int = RETRIES
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)
    tell: Callable[[str], None] = field(default=to_stderr, repr=False, compare=False)  # one line for the user
    refused: set[str] = field(default_factory=set, repr=False, compare=False)  # fields it refused: not sent again
    missing: set[str] = field(default_factory=set, repr=False, compare=False)  # paths it lacks (404): not asked again

    @classmethod
    def parse(cls, url: str, **kwargs: Any) -> Endpoint:
        """Check the URL (http or https, a host) and normalise it; a bad one is a usage error."""
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(f"--endpoint {url!r} is not an http:// or https:// URL", "usage")
        try:
            parts.port  # noqa: B018  (raises on a port that is not a number)
        except ValueError:
            raise RemoteError(f"--endpoint {url!r} has a bad port", "usage") from None
        path = parts.path.rstrip("/") or "/v1"
        return cls(urlunsplit((parts.scheme, parts.netloc, path, "", "")), **kwargs)

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def shown(self) -> str:
        """The URL as messages show it: no user name or password (nor query: history.clean_url)."""
        return clean_url(self.url) or ""

    @property
    def inception(self) -> bool:
        return self.host == INCEPTION_HOST

    def redact(self, text: str) -> str:
        """text with the key (should a server echo it) replaced by ***."""
        return text.replace(self.key, "***") if self.key else text

    def headers(self) -> dict[str, str]:
        out = {"Accept": "text/event-stream, application/json", "User-Agent": "dcode"}
        if self.key:
            out["Authorization"] = f"Bearer {self.key}"
        return out

    def client(self) -> httpx2.Client:
        timeout = httpx2.Timeout(self.timeout, connect=self.timeout, read=self.timeout)
        return httpx2.Client(timeout=timeout, headers=self.headers(), follow_redirects=True)


# ---------------------------------------------------------------------------------------------
# Requests


def stream(endpoint: Endpoint, path: str, body: dict[str, Any]) -> Iterator[dict[str, object]]:
    """POST body to endpoint.url + path and yield the answer's JSON chunks: the SSE chunks of a
    stream, or the one JSON object of a server that answered without streaming. 429 and 503 are
    tried again (honouring Retry-After) before anything is yielded; any failure is a RemoteError."""
    url = endpoint.url + path
    try:
        with endpoint.client() as client:
            for attempt in range(endpoint.retries + 1):
                with client.stream("POST", url, json=body) as response:
                    if response.status_code == 200:
                        yield from answer_chunks(response, endpoint)
                        return
                    response.read()
                    wait = retry_after(response, attempt)
                    if response.status_code in BUSY and attempt < endpoint.retries and wait <= MOST_WAIT:
                        endpoint.sleep(wait)
                        continue
                    raise status_error(response, endpoint, attempt + 1)
    except httpx2.HTTPError as error:
        raise transport_error(error, endpoint) from None
    except MalformedStream as error:
        raise RemoteError(endpoint.redact(f"malformed stream from {endpoint.shown}: {error}")) from None


def get_json(endpoint: Endpoint, path: str) -> Any:
    """GET endpoint.url + path as JSON (no retries: it is a quick question)."""
    try:
        with endpoint.client() as client:
            response = client.get(endpoint.url + path)
            if response.status_code != 200:
                raise status_error(response, endpoint, 1)
            return response.json()
    except httpx2.HTTPError as error:
        raise transport_error(error, endpoint) from None
    except ValueError:
        raise RemoteError(f"{endpoint.shown}{path} did not answer with JSON") from None


def answer_chunks(response: httpx2.Response, endpoint: Endpoint) -> Iterator[dict[str, object]]:
    """The chunks of a 200 answer: SSE, or a whole JSON object from a server that did not stream."""
    kind = response.headers.get("content-type", "")
    if "application/json" in kind:
        try:
            whole = json.loads(response.read())
        except ValueError as error:
            raise MalformedStream(f"the answer is not JSON ({error})") from None
        if not isinstance(whole, dict):
            raise MalformedStream("the answer is not a JSON object")
        chunk_list = [whole]
    else:
        chunk_list = chunks(response.iter_lines())  # type: ignore[assignment]
    for chunk in chunk_list:
        if "error" in chunk:
            raise RemoteError(endpoint.redact(f"{endpoint.shown} failed mid-answer: {error_message(chunk)}"))
        yield chunk


def retry_after(response: httpx2.Response, attempt: int) -> float:
    """Seconds to wait before trying again: Retry-After (seconds or an HTTP date), else a backoff."""
    value = response.headers.get("retry-after", "").strip()
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            pass
    return BACKOFF * 2**attempt


# ---------------------------------------------------------------------------------------------
# Failures as one line


def error_message(payload: Any) -> str:
    """The message of an OpenAI error object ({"error": {"message"}}), FastAPI's {"detail"}, or the text."""
    if isinstance(payload, dict):
        inner = payload.get("error", payload.get("detail", payload.get("message")))
        if isinstance(inner, dict):
            inner = inner.get("message", inner)
        payload = inner if inner is not None else payload
    text = payload if isinstance(payload, str) else json.dumps(payload)
    line = " ".join(text.split())
    return line[:200] + ("..." if len(line) > 200 else "")


def named_fields(payload: Any, said: str) -> tuple[str, ...]:
    """The request fields an error names: OpenAI's `param`, FastAPI's `detail[].loc` (422), else
    the words of its message (a field's name is a word there: "top_p is not supported")."""
    named: list[str] = []
    if isinstance(payload, dict):
        inner = payload.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("param"), str):
            named.append(inner["param"])
        for item in payload.get("detail", []) if isinstance(payload.get("detail"), list) else []:
            loc = item.get("loc") if isinstance(item, dict) else None
            if isinstance(loc, list) and loc and isinstance(loc[-1], str):
                named.append(loc[-1])
    return tuple(dict.fromkeys(named + re.findall(r"[A-Za-z_]\w*", said)))


def status_error(response: httpx2.Response, endpoint: Endpoint, tries: int) -> RemoteError:
    """The RemoteError for a non-200 answer."""
    status = response.status_code
    payload: Any = None
    try:
        payload = response.json()
        said = error_message(payload)
    except ValueError:
        said = error_message(response.text) or response.reason_phrase
    where = endpoint.shown
    if status in (401, 403):
        if not endpoint.key:
            message = f"{where} wants an API key ({status}): pass --endpoint-key or set DCODE_ENDPOINT_KEY"
        else:
            message = f"{where} refused the API key ({status}): {said}"
        return RemoteError(endpoint.redact(message), "usage", status)
    if status == 404:
        model = "model" in said.lower() and endpoint.model
        what = f"model {endpoint.model!r} not found at {where}" if model else f"{response.request.url} not found"
        return RemoteError(endpoint.redact(f"{what} (404): {said}"), "usage", status, named_fields(payload, said))
    if status in BUSY:
        tried = f" after {tries} tries" if tries > 1 else ""
        return RemoteError(endpoint.redact(f"{where} is busy ({status}){tried}: {said}"), "runtime", status)
    kind: Literal["usage", "runtime"] = "usage" if 400 <= status < 500 else "runtime"
    message = endpoint.redact(f"{where} refused the request ({status}): {said}")
    return RemoteError(message, kind, status, named_fields(payload, said))


def transport_error(error: httpx2.HTTPError, endpoint: Endpoint) -> RemoteError:
    """The RemoteError for a failure below HTTP: DNS, refused, TLS, timeouts, a cut connection."""
    where, seconds = endpoint.shown, f"{endpoint.timeout:g} s"
    causes = list(exception_chain(error))
    if isinstance(error, httpx2.ConnectTimeout):
        return RemoteError(f"no connection to {where} within {seconds} (--timeout)")
    if isinstance(error, httpx2.TimeoutException):
        return RemoteError(f"{where} sent nothing for {seconds} (--timeout)")
    if any(isinstance(c, socket.gaierror) for c in causes) or "name or service not known" in str(error).lower():
        return RemoteError(f"cannot resolve the host {endpoint.host!r} of {where}")
    tls = next((c for c in causes if isinstance(c, ssl.SSLError)), None)
    if tls is not None or "[SSL" in str(error):
        reason = getattr(tls, "reason", None) or str(tls or error)
        return RemoteError(f"TLS failure talking to {where}: {reason}")
    if any(isinstance(c, ConnectionRefusedError) for c in causes) or "refused" in str(error).lower():
        return RemoteError(f"cannot connect to {where}: connection refused")
    if isinstance(error, httpx2.UnsupportedProtocol | httpx2.InvalidURL):  # type: ignore[misc]
        return RemoteError(f"--endpoint {where}: {error}", "usage")
    if isinstance(error, httpx2.RemoteProtocolError | httpx2.ReadError):
        return RemoteError(f"{where} closed the connection mid-answer")
    return RemoteError(endpoint.redact(f"request to {where} failed: {error or type(error).__name__}"))


def exception_chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
