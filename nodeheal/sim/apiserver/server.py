"""A loopback HTTP server that speaks the Kubernetes REST API for the resources NodeHeal uses.

Paths, verbs, status codes and `Status` bodies follow the real kube-apiserver; anything it does
not implement answers 404 or 405 like an apiserver without that resource or verb. With an
:class:`~nodeheal.sim.apiserver.authorizer.RbacAuthorizer`, every request is authenticated by its bearer
token and authorized by RBAC first, as the real server's filter chain does before any handler.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes.client

from nodeheal.sim.apiserver import codec, conformance, messages, podexec, review_answers
from nodeheal.sim.apiserver.authorizer import (
    ANONYMOUS,
    UNAUTHENTICATED_GROUP,
    RbacAuthorizer,
    UserInfo,
    request_attributes,
)
from nodeheal.sim.apiserver.fielderrors import go_quote, invalid_error, not_supported
from nodeheal.sim.apiserver.messages import APF_TOO_MANY_REQUESTS
from nodeheal.sim.apiserver.paging import list_body
from nodeheal.sim.apiserver.request_faults import FaultInjector
from nodeheal.sim.apiserver.resources import SERVED, ResourceType
from nodeheal.sim.apiserver.selectors import parse_field_selector, parse_label_selector
from nodeheal.sim.apiserver.status import (
    ApiError,
    bad_request,
    method_not_allowed,
    not_found_path,
)
from nodeheal.sim.apiserver.store import ClusterStore
from nodeheal.sim.apiserver.warning import WarningRecorder
from nodeheal.sim.apiserver.watch import WatchAbortedError, WatchRequest, run_watch

JSON = dict[str, Any]

VERSION_INFO: JSON = {
    "major": "1",
    "minor": "33",
    "emulationMajor": "1",
    "emulationMinor": "33",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "32",
    "gitVersion": "v1.33.1-eks-7308294",
    "gitCommit": "8d3a5d2c6d6bb4b5a1d3c4f0b0c0e4f5f1e3d8a9",
    "gitTreeState": "clean",
    "buildDate": "2025-06-01T00:00:00Z",
    "goVersion": "go1.24.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_ITEM_VERBS = ("GET", "PUT", "PATCH", "DELETE")
_TRUE = ("true", "1", "True")
_STATUS_VERBS = ("GET", "PUT", "PATCH")


class _Route:
    def __init__(
        self, rtype: ResourceType, namespace: str | None, name: str | None, sub: str | None, template: str
    ) -> None:
        self.rtype = rtype
        self.namespace = namespace
        self.name = name
        self.sub = sub
        self.template = template


def _route(path: str) -> _Route | None:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest, prefix = "", "v1", parts[2:], "/api/v1"
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest, prefix = parts[1], parts[2], parts[3:], f"/apis/{parts[1]}/{parts[2]}"
    else:
        return None
    namespace: str | None = None
    template = prefix
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
        template += "/namespaces/{namespace}"
    if not rest or len(rest) > 3:
        return None
    rtype = SERVED.get((group, version, rest[0]))
    if rtype is None:
        return None
    if namespace is not None and not rtype.namespaced:
        return None
    template += f"/{rtype.plural}"
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if name is not None:
        template += "/{name}"
        if namespace is None and rtype.namespaced:
            return None
    if sub is not None:
        allowed = {"status"} if rtype.has_status else set()
        if rtype.plural == "pods":
            allowed |= {"eviction", "exec"}
        if sub not in allowed:
            return None
        template += f"/{sub}"
    return _Route(rtype, namespace, name, sub, template)


def _allowed(route: _Route) -> tuple[str, ...]:
    if route.name is None:
        can_create = route.namespace is not None or not route.rtype.namespaced
        return ("GET", "POST") if can_create else ("GET",)
    if route.sub == "eviction":
        return ("POST",)
    if route.sub == "exec":
        # connect_get/connect_post: WebSocket clients upgrade a GET, SPDY ones a POST.
        return ("GET", "POST")
    if route.sub == "status":
        return _STATUS_VERBS
    return _ITEM_VERBS


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: TCP_NODELAY, as Go's net/http server sets on every connection: an answer is written as
    #: headers then body, and with Nagle's algorithm the body waits for the client's delayed ACK
    #: of the headers, about 40 ms per request on a keep-alive connection.
    disable_nagle_algorithm = True
    server: _Server
    #: The request's row key path in the conformance table (route template, ``?watch`` for a watch).
    _row_path = ""
    # Warnings of the request being answered (a handler serves one request at a time).
    _warnings: WarningRecorder
    # Who sent the request being answered (anonymous without an authorizer).
    _user: UserInfo

    def log_message(self, format: str, *args: Any) -> None:
        # Access logs would drown test output; failures surface as responses instead.
        return

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self.connection)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_OPTIONS(self) -> None:
        self._dispatch("OPTIONS")

    # ---- plumbing ----------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json_body(self, raw: bytes) -> Any:
        if not raw:
            return None
        try:
            return codec.load_json(raw)
        except ValueError as exc:
            raise bad_request(f"error decoding request body: {exc}") from exc

    def send_response(self, code: int, message: str | None = None) -> None:
        # Every answer is a key of the conformance table (docs/fake-apiserver.md).
        conformance.record(self.command, self._row_path or urlsplit(self.path).path, code)
        super().send_response(code, message)

    def _send_json(self, code: int, body: JSON, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        # The warning recorder writes its headers into whatever answer the request gets.
        for warning in self._warnings.headers:
            self.send_header("Warning", warning)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _abort_connection(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _dispatch(self, method: str) -> None:
        self._warnings = WarningRecorder()
        split = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        route = _route(split.path)
        template = route.template if route else split.path
        self._row_path = template + ("?watch" if params.get("watch") in _TRUE else "")
        raw = self._read_body()
        authorizer = self.server.authorizer
        self._user = UserInfo(ANONYMOUS, (UNAUTHENTICATED_GROUP,))
        if authorizer is not None:
            try:
                user = self._user = authorizer.authenticate(self.headers.get("Authorization"))
                authorizer.authorize(request_attributes(user, method, split.path, params))
            except ApiError as err:
                self._send_json(err.code, err.body, err.headers)
                return
        faults = self.server.faults
        decision = faults.decide(method, split.path, template)
        for call in decision.calls:
            call()
        if decision.latency:
            self.server.stopped.wait(decision.latency)
        if decision.hold_seconds is not None:
            self.server.stopped.wait(decision.hold_seconds)
            self._abort_connection()
            return
        try:
            if decision.throttle_retry_after is not None:
                self._send_throttled(decision.throttle_retry_after)
                return
            if decision.error is not None:
                raise decision.error
            self._handle(method, split.path, route, params, raw)
        except ApiError as err:
            self._send_json(err.code, err.body, err.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            faults.record_served(method, split.path, watch=params.get("watch") in _TRUE)

    def _send_throttled(self, retry_after: int) -> None:
        """API Priority and Fairness's rejection: ``http.Error``, so plain text, not a Status."""
        data = (APF_TOO_MANY_REQUESTS + "\n").encode()
        self.send_response(429)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Retry-After", str(retry_after))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(
        self, method: str, path: str, route: _Route | None, params: dict[str, str], raw: bytes
    ) -> None:
        if path in ("/healthz", "/readyz", "/livez"):
            if method != "GET":
                raise method_not_allowed()
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if path.rstrip("/") == "/version":
            if method != "GET":
                raise method_not_allowed()
            self._send_json(200, VERSION_INFO)
            return
        review = review_answers.REVIEWS.get(path)
        if review is not None:
            # Create-only: the installer registers POST alone for the reviews.
            if method != "POST":
                raise method_not_allowed()
            body = self._object_body(raw, review, self._field_validation(params, "CreateOptions"))
            self._send_json(201, review_answers.answer(review, body, self._user, self.server.authorizer))
            return
        if route is None:
            raise not_found_path()
        if method not in _allowed(route):
            raise method_not_allowed()
        if route.sub == "exec":
            self._exec(route)
            return
        store = self.server.store
        rtype = route.rtype
        dry_run = bool(params.get("dryRun"))
        if route.name is None and method == "GET":
            self._list_or_watch(route, params)
        elif route.name is None:
            body = self._object_body(raw, rtype, self._field_validation(params, "CreateOptions"))
            self._send_json(201, store.create(rtype, body, route.namespace, dry_run=dry_run))
        elif route.sub == "eviction":
            eviction = self._json_body(raw)
            if not isinstance(eviction, dict) or eviction.get("kind") not in (None, "Eviction"):
                raise bad_request(f"not a Eviction object: {type(eviction).__name__}")
            if dry_run:
                eviction.setdefault("deleteOptions", {})["dryRun"] = ["All"]
            self._send_json(201, store.evict(route.namespace or "", route.name, eviction))
        elif method == "GET":
            self._send_json(200, store.get(rtype, route.name, route.namespace))
        elif method == "PUT":
            body = self._object_body(raw, rtype, self._field_validation(params, "UpdateOptions"))
            obj, created = store.replace(
                rtype, route.name, body, route.namespace, subresource=route.sub, dry_run=dry_run
            )
            # UpdateResource answers 201 when the PUT created the object (AllowCreateOnUpdate).
            self._send_json(201 if created else 200, obj)
        elif method == "PATCH":
            field_validation = self._field_validation(params, "PatchOptions")
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            patch = self._json_body(raw)
            self._send_json(
                200,
                store.patch(
                    rtype,
                    route.name,
                    content_type,
                    patch,
                    route.namespace,
                    subresource=route.sub,
                    dry_run=dry_run,
                    field_validation=field_validation,
                    warnings=self._warnings,
                ),
            )
        else:
            self._delete(route, params, raw)

    def _exec(self, route: _Route) -> None:
        """``pods/exec`` upgraded to WebSocket (:mod:`.podexec`): the container resolved and the
        upgrade checked before the 101, then the command's output and end status in frames."""
        assert route.name is not None
        query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
        argv = query.get("command", [])
        store = self.server.store
        pod = store.get(route.rtype, route.name, route.namespace)
        container = podexec.resolve_container(pod, (query.get("container") or [""])[-1])
        key = self.headers.get("Sec-WebSocket-Key")
        if (self.headers.get("Upgrade") or "").lower() != "websocket" or not key:
            raise bad_request("Upgrade request required")
        protocol = podexec.choose_subprotocol(self.headers.get("Sec-WebSocket-Protocol"))
        result = store.exec_in(pod, container, argv)
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", podexec.accept_key(key))
        self.send_header("Sec-WebSocket-Protocol", protocol)
        self.end_headers()
        flags = {name: (query.get(name) or [""])[-1] in _TRUE for name in ("stdout", "stderr")}
        podexec.stream(self.wfile, result, argv, stdout=flags["stdout"], stderr=flags["stderr"])
        self.close_connection = True

    @staticmethod
    def _field_validation(params: dict[str, str], options_kind: str) -> str:
        """The fieldValidation directive, Warn by default; anything else than the three values is
        refused as the options object's 422 (ValidateCreateOptions and its siblings)."""
        directive = params.get("fieldValidation", "")
        if directive not in messages.FIELD_VALIDATION_VALUES:
            error = not_supported("fieldValidation", go_quote(directive), messages.FIELD_VALIDATION_VALUES)
            raise invalid_error(options_kind, "meta.k8s.io", "", [error])
        return directive or "Warn"

    def _object_body(self, raw: bytes, rtype: ResourceType, field_validation: str) -> JSON:
        """Decode a POST or PUT body as the handler does: what the Go struct cannot hold is a 400,
        unknown fields are dropped with a warning (Warn), refused (Strict) or ignored."""
        body = self._json_body(raw)
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        if body.get("kind") not in (None, rtype.kind):
            raise bad_request(
                f"the kind of the object ({body.get('kind')}) does not match the resource ({rtype.kind})"
            )
        api_version = body.get("apiVersion")
        if api_version not in (None, rtype.api_version) and any(
            served.kind == rtype.kind and served.api_version == api_version for served in SERVED.values()
        ):
            # Another served version of the kind decodes, and is then refused: AcceptsGroupVersion
            # in the create and update handlers (create.go, update.go).
            raise bad_request(
                messages.API_VERSION_MISMATCH.format(data=api_version, expected=rtype.api_version)
            )
        try:
            decoded = codec.decode(rtype.schema, body)
        except codec.DecodeError as exc:
            raise bad_request(self._decode_failed(rtype, str(exc))) from None
        if decoded.strict_errors:
            if field_validation == "Strict":
                raise bad_request(self._decode_failed(rtype, codec.strict_error_text(decoded.strict_errors)))
            if field_validation == "Warn":
                for text in decoded.strict_errors:
                    self._warnings.add(text)
        return decoded.object

    @staticmethod
    def _decode_failed(rtype: ResourceType, error: str) -> str:
        # transformDecodeError, handlers/rest.go.
        return messages.DECODE_FAILED.format(kind=rtype.kind, version=rtype.version, error=error)

    def _delete(self, route: _Route, params: dict[str, str], raw: bytes) -> None:
        options = self._json_body(raw) or {}
        if not isinstance(options, dict):
            raise bad_request("the body of a DELETE must be DeleteOptions")
        if "gracePeriodSeconds" in params and options.get("gracePeriodSeconds") is None:
            options["gracePeriodSeconds"] = self._int_param(params, "gracePeriodSeconds")
        if params.get("dryRun"):
            options["dryRun"] = ["All"]
        assert route.name is not None
        self._send_json(200, self.server.store.delete(route.rtype, route.name, route.namespace, options))

    @staticmethod
    def _int_param(params: dict[str, str], name: str) -> int:
        try:
            return int(params[name])
        except ValueError as exc:
            raise bad_request(f"invalid value for {name}: {params[name]!r}") from exc

    # ---- list and watch ----------------------------------------------------------------------

    def _list_or_watch(self, route: _Route, params: dict[str, str]) -> None:
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"), route.rtype.plural, route.rtype.group)
        if params.get("watch") in _TRUE:
            self._watch(route, params, labels, fields)
            return
        limit = self._int_param(params, "limit") if params.get("limit") else 0
        body = list_body(
            self.server.store,
            route.rtype,
            route.namespace,
            labels,
            fields,
            limit=limit,
            continue_token=params.get("continue") or "",
            resource_version=params.get("resourceVersion") or "",
        )
        for item in body["items"]:
            # The items of a list carry no kind or apiVersion, only the list does
            # (https://github.com/kubernetes/kubernetes/issues/3030).
            item.pop("kind", None)
            item.pop("apiVersion", None)
        self._send_json(200, body)

    def _watch(self, route: _Route, params: dict[str, str], labels: Any, fields: Any) -> None:
        server = self.server
        rv_param = params.get("resourceVersion") or ""
        start_rv: int | None = None
        if rv_param not in ("", "0"):
            try:
                start_rv = int(rv_param)
            except ValueError as exc:
                raise bad_request(f"invalid resource version: {rv_param!r}") from exc
        timeout = (
            float(self._int_param(params, "timeoutSeconds"))
            if params.get("timeoutSeconds")
            else (server.default_watch_timeout)
        )
        req = WatchRequest(
            rtype=route.rtype,
            namespace=route.namespace,
            labels=labels,
            fields=fields,
            start_rv=start_rv,
            timeout=timeout,
            bookmarks=params.get("allowWatchBookmarks") in _TRUE,
            bookmark_interval=server.bookmark_interval,
            started=server.store.clock.now(),
            too_large_rv_wait=server.too_large_rv_wait,
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(event: JSON) -> None:
            if event.get("type") == "ERROR":
                conformance.record(self.command, self._row_path, f"ERROR {event['object'].get('code')}")
            line = json.dumps(event, separators=(",", ":")).encode() + b"\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()

        control = server.faults.register_watch(urlsplit(self.path).path)
        try:
            run_watch(req, server.store, control, send, server.stopped.is_set)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except WatchAbortedError:
            self._abort_connection()
        finally:
            server.faults.unregister_watch(control)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        store: ClusterStore,
        faults: FaultInjector,
        bookmark_interval: float,
        default_watch_timeout: float,
        too_large_rv_wait: float,
        authorizer: RbacAuthorizer | None,
    ) -> None:
        super().__init__(address, _Handler)
        self.store = store
        self.authorizer = authorizer
        self.faults = faults
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self.too_large_rv_wait = too_large_rv_wait
        self.stopped = threading.Event()
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()

    def track(self, conn: socket.socket) -> None:
        with self._conn_lock:
            self._connections.add(conn)

    def untrack(self, conn: socket.socket) -> None:
        with self._conn_lock:
            self._connections.discard(conn)

    def close_connections(self) -> None:
        with self._conn_lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class FakeKubeApiServer:
    """The fake API server; `store` holds the cluster state, `faults` injects failures.

    Without an ``authorizer`` every request is allowed (and needs no credentials).
    ``too_large_rv_wait`` is how long a watch from a resourceVersion the store has not reached
    yet waits for it before its ERROR 504 (``blockTimeout``, 3 s, in the watch cache); like the
    watch timeouts and bookmarks, it is measured on the store's clock.
    """

    def __init__(
        self,
        store: ClusterStore | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        bookmark_interval: float = 1.0,
        default_watch_timeout: float = 1800.0,
        too_large_rv_wait: float = 3.0,
        authorizer: RbacAuthorizer | None = None,
    ) -> None:
        self.store = store if store is not None else ClusterStore()
        self.authorizer = authorizer
        self.faults = FaultInjector(notify=self.store.notify)
        self._host = host
        self._port = port
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self.too_large_rv_wait = too_large_rv_wait
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake API server is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> str:
        if self._server is not None:
            return self.url
        self._server = _Server(
            (self._host, self._port),
            self.store,
            self.faults,
            self.bookmark_interval,
            self.default_watch_timeout,
            self.too_large_rv_wait,
            self.authorizer,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-kube-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.stopped.set()
        self.store.notify()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def api_client(self, token: str | None = None) -> kubernetes.client.ApiClient:
        """A client of the real `kubernetes` package pointed at this server (plain HTTP), sending
        ``token`` as its bearer token when given."""
        config = kubernetes.client.Configuration(host=self.url)
        config.verify_ssl = False
        if token:
            config.api_key = {"authorization": token}
            config.api_key_prefix = {"authorization": "Bearer"}
        return kubernetes.client.ApiClient(configuration=config)

    def __enter__(self) -> FakeKubeApiServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
