"""`CoreClient`: the app's side of `bl evidence serve`.

Every call is one HTTP/1.1 request on loopback or a unix socket, on one
kept-open connection, with the service's bearer token. The wire is a few
lines over a plain socket rather than `http.client`, whose header parsing
cost a tenth of a millisecond a request: three requests guard each call,
on the app's critical path. The service answers only once what it
recorded is on disk, so an answer is a receipt. A refusal raises
`Refused`, naming the rule's code and the field that differs; nothing
refused was recorded.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Mapping


class EvidenceError(Exception):
    """Anything that stops an event being recorded."""


class Refused(EvidenceError):
    """The rules refused the event (HTTP 409) or the caller is no authority
    for it (403). Nothing was recorded."""

    def __init__(self, code: str, message: str, *, field: str | None = None,
                 event: str | None = None, operation_id: str | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.field = field
        self.event = event
        self.operation_id = operation_id


class Unavailable(EvidenceError):
    """The service could not be reached or could not record (a broken
    store, a policy that could not run). Whether a request it was sent
    was recorded is unknown: never act as if it was granted."""


@dataclass(frozen=True)
class Answer:
    """What the service recorded: the event's place in the log, where the
    decision stands now, and whether it was a retry of what was there."""

    sequence: int
    event_hash: str
    stage: str
    retry: bool
    #: The workspace key's signature over the event (hex): the reservation's
    #: is the signed permission to call the tool.
    receipt: str = ""
    policy: dict[str, Any] | None = None
    #: A proposal's answer: the decision's approval expired unused, and a
    #: person must be asked again.
    approval_expired: bool = False
    #: A proposal sent with `reserve=True`: the reservation it was granted
    #: (the one permission to call the tool), or None when it was granted
    #: none (the decision was not cleared, or was reserved before).
    reservation: "Answer | None" = None


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8: the same value gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def args_digest(args: Mapping[str, Any], key: bytes | None = None) -> str:
    """The digest a decision is bound to, over the arguments' canonical
    JSON. Only the digest leaves the app; changing any argument changes it,
    so an approval for the old arguments is no authority for the new.

    A plain sha256 (`sha256:…`) of a few guessable values (an order id, an
    amount) can be guessed back by trying them. With `key` (a secret the
    app keeps, the same across its processes) it is an HMAC-SHA256
    (`hmac-sha256:…`) that only the key's holder can link to arguments."""
    try:
        text = canonical_json(dict(args)).encode()
    except (TypeError, ValueError) as e:
        raise TypeError(f"a tool's arguments must be JSON values (str, number, bool, None, list, dict), "
                        f"as they are digested: {e}") from None
    if key is None:
        return "sha256:" + hashlib.sha256(text).hexdigest()
    return "hmac-sha256:" + hmac.new(key, text, hashlib.sha256).hexdigest()


def _token_from(token_file: str | os.PathLike[str]) -> str:
    """The token in the service's token file, held to the service's own
    rule: a file others may read holds no secret, and is refused."""
    with open(token_file, encoding="utf-8") as f:
        if os.fstat(f.fileno()).st_mode & 0o077:
            raise PermissionError(f"{os.fspath(token_file)}: others may read this token file: chmod 600 it "
                                  "(bl evidence serve refuses it too)")
        token = f.read().strip()
    if not token:
        raise ValueError(f"{os.fspath(token_file)}: the token file is empty; give the file the service was "
                         "started with (--token-file)")
    return token


class CoreClient:
    """A client for `bl evidence serve`.

    `url` is what the service printed (`http://127.0.0.1:PORT/v1`, or
    `unix:PATH` with `--socket`); the token is given, or read from
    `token_file` (the service's `--token-file`).
    """

    def __init__(self, url: str, token: str | None = None, *,
                 token_file: str | os.PathLike[str] | None = None, timeout: float = 30.0):
        if token is None:
            if token_file is None:
                raise ValueError("CoreClient needs the service's token, or the file it is in (token_file=)")
            token = _token_from(token_file)
        self._socket: str | None = None
        if url.startswith("unix:"):
            # `serve --socket PATH` prints `unix:PATH`.
            self._socket, self._host, self._port, self._base = url[len("unix:"):], "localhost", 80, "/v1"
        else:
            parsed = urllib.parse.urlsplit(url)
            if parsed.scheme != "http" or not parsed.hostname:
                raise ValueError(f"{url!r} is not what the service printed (http://HOST:PORT/v1 or unix:PATH)")
            self._host = parsed.hostname
            self._port = parsed.port or 80
            self._base = parsed.path.rstrip("/") or "/v1"
        self._timeout = timeout
        self._head = (f"HTTP/1.1\r\nHost: {self._host}\r\nAuthorization: Bearer {token}\r\n"
                      "Content-Type: application/json\r\nContent-Length: ")
        self._connection: socket.socket | None = None
        # One request at a time on the one connection: LangGraph may run a
        # step's nodes on several threads, and two requests interleaved on
        # a socket would each read the other's answer.
        self._lock = threading.Lock()

    # -- the decision's life, in order -------------------------------------

    def propose(self, *, operation_id: str, thread_id: str, identity: str, tool: str,
                args_digest: str, reserve: bool = False) -> Answer:
        """Creates the decision (a retry with the same binding finds it) and
        has the operator's policy decide it, in one durable step. The
        answer's `stage` is `cleared`, `awaiting_approval` or `blocked`.

        With `reserve=True`, a decision that stands cleared is also reserved
        in the same step, for an app that calls the tool right away: the
        answer's `reservation` is then the one permission to call it, and
        its `stage` is `reserved`. A `reserved` stage without a
        `reservation` was reserved before, and is no permission."""
        body: dict[str, Any] = {
            "operation_id": operation_id, "thread_id": thread_id, "identity": identity,
            "tool": tool, "args_digest": args_digest,
        }
        if reserve:
            body["reserve"] = True
        return self._answer("POST", "/proposals", body)

    def model_completed(self, operation_id: str, output_digest: str) -> Answer:
        """What the app saw the model answer (its digest); never synthesised."""
        return self.record(operation_id, {"event": "model_completed", "output_digest": output_digest})

    def request_approval(self, operation_id: str, *, checkpoint_ns: str, interrupt_id: str) -> Answer:
        """The app paused for a person at this interrupt; an approval must
        name it."""
        return self.record(operation_id, {
            "event": "approval_requested", "checkpoint_ns": checkpoint_ns, "interrupt_id": interrupt_id,
        })

    def reserve(self, operation_id: str, *, tool: str, args_digest: str) -> Answer:
        """The reservation: the one permission to call the tool, granted once.
        Anything but a fresh (non-retry) answer is no permission."""
        return self.record(operation_id, {"event": "tool_requested", "tool": tool, "args_digest": args_digest})

    def executed(self, operation_id: str, *, ok: bool, detail: str = "",
                 result_digest: str | None = None) -> Answer:
        """The tool returned (`ok`) or raised. A return is not the outside
        world's success; a raise needs a person (reconciliation).
        `result_digest`, for a tool that returned, is the digest of what it
        returned: recorded as `tool_result` in the same step."""
        event: dict[str, Any] = {"event": "tool_executed", "ok": ok, "detail": detail}
        if result_digest is not None:
            event["result_digest"] = result_digest
        return self.record(operation_id, event)

    def outcome(self, operation_id: str, *, external_ref: str, status: str, source: str) -> Answer:
        """What the outside system says happened, with its reference."""
        return self.record(operation_id, {
            "event": "outcome_observed", "external_ref": external_ref, "status": status, "source": source,
        })

    def reconciliation_required(self, operation_id: str, cause: str) -> Answer:
        """Whether the tool ran is unknown: a person must say."""
        return self.record(operation_id, {"event": "reconciliation_required", "cause": cause})

    def record(self, operation_id: str, event: Mapping[str, Any]) -> Answer:
        """Any event the app may record, as the service's JSON."""
        return self._answer("POST", f"/decisions/{urllib.parse.quote(operation_id, safe='')}/events", dict(event))

    def decision(self, operation_id: str) -> dict[str, Any] | None:
        """Where a decision stands (its binding, stage, policy, approval
        request, approval), or None if there is none."""
        path = f"/decisions/{urllib.parse.quote(operation_id, safe='')}"
        status, body = self._call("GET", path, None)
        if status == 404 and isinstance(body, dict) and body.get("error", {}).get("code") == "NotCreated":
            return None
        return self._checked(status, body, path)

    def review(self, signed_review: Mapping[str, Any]) -> Answer:
        """Submits a reviewer's signed review (from `bl evidence approve`);
        the signature, not this call, is the authority."""
        return self._answer("POST", "/reviews", dict(signed_review))

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> "CoreClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the wire ------------------------------------------------------------

    def _answer(self, method: str, path: str, body: Any) -> Answer:
        status, payload = self._call(method, path, body)
        return _answer_of(self._checked(status, payload, path))

    def _checked(self, status: int, payload: Any, path: str) -> Any:
        if status == 200:
            return payload
        if status in (403, 409) and isinstance(payload, dict) and "refused" in payload:
            r = payload["refused"]
            raise Refused(r.get("code", "Refused"), r.get("message", ""), field=r.get("field"),
                          event=r.get("event"), operation_id=r.get("operation_id"))
        error = payload.get("error", {}) if isinstance(payload, dict) else {}
        message = error.get("message") or str(payload)
        if status == 401:
            raise EvidenceError(f"the service refused the token (401): {message}")
        if status == 400:
            raise EvidenceError(f"the service could not read the request (400): {message}")
        if status == 404:
            # Not the service's own "no such decision": the URL is wrong.
            raise EvidenceError(f"{self._where()}{self._base}{path} is not an evidence service's API (404): "
                                "give the URL `bl evidence serve` printed (http://127.0.0.1:PORT/v1 or unix:PATH)")
        raise Unavailable(f"{self._where()}{self._base}{path}: {error.get('code', status)}: {message}")

    def _request(self, method: str, path: str, body: Any) -> bytes:
        """The whole request, as one write."""
        data = b"" if body is None else json.dumps(body).encode()
        return f"{method} {self._base}{path} {self._head}{len(data)}\r\n\r\n".encode() + data

    def _call(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        request = self._request(method, path, body)
        with self._lock:
            status, text = self._exchange(request)
        try:
            payload = json.loads(text) if text else None
        except ValueError:
            payload = text.decode(errors="replace")
        return status, payload

    def _exchange(self, request: bytes) -> tuple[int, bytes]:
        # A kept-open connection the service closed while idle fails on
        # reuse; the request is sent once more on a new connection. Even if
        # the first reached the service, that never grants anything twice:
        # a proposal sent again is a retry, a reservation is never granted
        # twice, and an event recorded already is refused (AlreadyExecuted,
        # say) rather than recorded again. Any other failure is Unavailable:
        # whether it was recorded is unknown.
        for fresh in (self._connection is None, True):
            try:
                if fresh:
                    self.close()
                    self._connection = self._connect()
                assert self._connection is not None
                self._connection.sendall(request)
                return self._response(self._connection)
            except (_ClosedBeforeAnswer, BrokenPipeError, ConnectionResetError) as e:
                self.close()
                if fresh:
                    raise Unavailable(f"the evidence service at {self._where()}: {e}") from e
            except OSError as e:
                self.close()
                raise Unavailable(f"the evidence service at {self._where()}: {e}") from e
            except BaseException:
                # Interrupted half way (Ctrl-C, a bad answer): an answer may
                # be left unread, and must never be taken for the next one's.
                self.close()
                raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _where(self) -> str:
        return self._socket or f"{self._host}:{self._port}"

    def _connect(self) -> socket.socket:
        if self._socket:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.settimeout(self._timeout)
            connection.connect(self._socket)
        else:
            connection = socket.create_connection((self._host, self._port), timeout=self._timeout)
            # Each request is one write; Nagle's delay would only wait.
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def _response(self, connection: socket.socket) -> tuple[int, bytes]:
        """One response: its status and body, framed by Content-Length (the
        service always sends one) or by the connection's end."""
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            chunk = connection.recv(65536)
            if not chunk:
                if buffer:
                    raise Unavailable(f"the evidence service at {self._where()} cut its answer short")
                raise _ClosedBeforeAnswer("the connection was closed before an answer")
            buffer += chunk
        head, _, body = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise Unavailable(f"the evidence service at {self._where()} answered {lines[0]!r}") from None
        headers = dict((k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:]))
        if headers.get("transfer-encoding"):
            raise Unavailable(f"the evidence service at {self._where()} sent a body this client does not read "
                              f"(transfer-encoding {headers['transfer-encoding']})")
        length = headers.get("content-length")
        if length is None:
            while chunk := connection.recv(65536):
                body += chunk
            self.close()
            return status, body
        if not length.isdigit():
            raise Unavailable(f"the evidence service at {self._where()} sent Content-Length {length!r}")
        while len(body) < int(length):
            chunk = connection.recv(65536)
            if not chunk:
                raise Unavailable(f"the evidence service at {self._where()} cut its answer short")
            body += chunk
        # More than one answer's bytes: the connection is out of step.
        if len(body) > int(length) or headers.get("connection", "").lower() == "close":
            self.close()
        return status, body[:int(length)]


def _answer_of(data: Mapping[str, Any]) -> Answer:
    reservation = data.get("reservation")
    return Answer(sequence=data["sequence"], event_hash=data["event_hash"], stage=data["stage"],
                  retry=data["retry"], receipt=data.get("receipt", ""), policy=data.get("policy"),
                  approval_expired=bool(data.get("approval_expired")),
                  reservation=_answer_of(reservation) if reservation else None)


class _ClosedBeforeAnswer(ConnectionError):
    """The service closed a kept-open connection before any answer."""
