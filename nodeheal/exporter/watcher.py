"""List-then-watch with the semantics of kopf's watcher, for any collection.

* List (in pages), then watch from the list's resourceVersion with ``allowWatchBookmarks``.
* The server ends each watch after ``watch_timeout_seconds``; the client's read timeout is a little
  longer, so a connection that went silent without closing is noticed instead of hanging.
* Every event and bookmark advances the resourceVersion; a stream that ends, drops or errors is
  re-opened from the last one, so nothing between two streams is missed.
* ``410 Gone`` (as an HTTP status or an ``ERROR`` event) means that version is compacted away:
  relist, and the handler reconciles (and resyncs) from the fresh list. A 410 on a later page of
  a list means the list's own snapshot expired (etcd compacts every 5 minutes): the list starts
  over, and the handler is told it is the same relist.
* Any other ``ERROR`` event (an etcd failure arrives as a 500 InternalError Status) ends that
  stream only: the watch resumes from the last resourceVersion, which the server still holds.
* Errors back off with jitter and are logged and counted, every one; a 401/403 is logged as an
  error, since only a fix to the exporter's RBAC ends it. A 429 or 503 with ``Retry-After`` (API
  Priority and Fairness) never reaches this loop: the client's urllib3 pool waits as asked and
  retries it (``Retry.respect_retry_after_header``). The loop only ends on
  :meth:`ListWatcher.stop`. An unexpected exception (a bug) propagates and the process exits
  non-zero rather than continuing in an unknown state.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from urllib3.exceptions import HTTPError as Urllib3Error

from nodeheal.exporter.kubeclient import ApiException, KubeJsonClient, iter_lines
from nodeheal.exporter.logs import fields
from nodeheal.exporter.metrics import Metrics
from nodeheal.exporter.publisher import Backoff

logger = logging.getLogger(__name__)

HTTP_GONE = 410
#: Statuses that mean the exporter's identity may not do this: RBAC or credentials, not load.
HTTP_DENIED = (401, 403)


class WatchHandler(Protocol):
    """What a watcher feeds. Called from the watcher's thread only."""

    def begin_list(self) -> None: ...

    def list_page(self, items: Sequence[Mapping[str, Any]]) -> None: ...

    def end_list(self) -> None: ...

    def on_event(self, event_type: str, obj: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class WatchConfig:
    path: str
    label_selector: str = ""
    field_selector: str = ""
    watch_timeout_seconds: int = 300
    client_margin_seconds: float = 15.0
    request_timeout_seconds: float = 30.0
    page_size: int = 500
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 30.0


class _GoneError(Exception):
    """The resourceVersion we hold has expired."""


class ListWatcher:
    def __init__(
        self,
        client: KubeJsonClient,
        config: WatchConfig,
        handler: WatchHandler,
        *,
        metrics: Metrics,
        name: str = "nodes",
        on_api_contact: Callable[[], None] = lambda: None,
        on_listed: Callable[[], None] = lambda: None,
    ) -> None:
        self._client = client
        self._config = config
        self._handler = handler
        self._metrics = metrics
        self._name = name
        self._on_api_contact = on_api_contact
        self._on_listed = on_listed
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self.resource_version: str | None = None

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            # Unblocks a read in progress on the watcher's thread.
            try:
                response.shutdown()
            except (OSError, AttributeError):
                response.close()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _contact(self) -> None:
        self._metrics.api_contact()
        self._on_api_contact()

    def run(self) -> None:
        backoff = Backoff(self._config.backoff_initial_seconds, self._config.backoff_max_seconds)
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                    backoff.reset()
                reason = self._watch_once()
                if reason == "stopped":
                    break
                self._metrics.inc("watch_restarts_total", watcher=self._name, reason=reason)
                if reason == "stream-ended":
                    backoff.reset()
                    continue
                if reason == "error-event":
                    self._stop.wait(backoff.next_delay())
            except _GoneError:
                logger.warning(
                    "resourceVersion expired (410 Gone); relisting",
                    extra=fields(watcher=self._name, resource_version=self.resource_version),
                )
                self._metrics.inc("watch_restarts_total", watcher=self._name, reason="gone")
                need_list = True
            except ApiException as exc:
                if exc.status == HTTP_GONE:
                    logger.warning(
                        "resourceVersion expired (410 Gone); relisting",
                        extra=fields(watcher=self._name, resource_version=self.resource_version),
                    )
                    self._metrics.inc("watch_restarts_total", watcher=self._name, reason="gone")
                    need_list = True
                    continue
                if exc.status:
                    self._contact()  # the server answered, even if with an error
                delay = backoff.next_delay()
                logger.log(
                    logging.ERROR if exc.status in HTTP_DENIED else logging.WARNING,
                    "API request refused; check the exporter's RBAC and credentials, retrying"
                    if exc.status in HTTP_DENIED
                    else "API request failed; retrying",
                    extra=fields(
                        watcher=self._name,
                        status=exc.status,
                        reason=str(exc.reason),
                        retry_in_seconds=round(delay, 3),
                        relist=need_list,
                    ),
                )
                self._metrics.inc("watch_restarts_total", watcher=self._name, reason=f"http-{exc.status}")
                self._stop.wait(delay)
            except (Urllib3Error, OSError, ValueError) as exc:
                if self._stop.is_set():
                    break
                delay = backoff.next_delay()
                logger.warning(
                    "watch connection failed; resuming from the last resourceVersion",
                    extra=fields(
                        watcher=self._name,
                        error=f"{type(exc).__name__}: {exc}",
                        resource_version=self.resource_version,
                        retry_in_seconds=round(delay, 3),
                        relist=need_list,
                    ),
                )
                self._metrics.inc("watch_restarts_total", watcher=self._name, reason="connection")
                self._stop.wait(delay)
        logger.info("watcher stopped", extra=fields(watcher=self._name))

    def _list(self) -> None:
        self._metrics.inc("relists_total", watcher=self._name)
        self._handler.begin_list()
        continue_token = ""
        pages = items_seen = 0
        while True:
            try:
                page = self._client.request(
                    "GET",
                    self._config.path,
                    query={
                        "labelSelector": self._config.label_selector,
                        "fieldSelector": self._config.field_selector,
                        "limit": self._config.page_size,
                        "continue": continue_token,
                    },
                    timeout=self._config.request_timeout_seconds,
                )
            except ApiException as exc:
                if exc.status == HTTP_GONE and continue_token:
                    # The pages so far are from a snapshot etcd has compacted since; finishing with
                    # the fresh token the 410 carries would mix two moments. Start over, telling the
                    # handler it is the same relist (nothing it already announced is repeated).
                    logger.warning(
                        "list snapshot expired mid-list (410); listing again from the start",
                        extra=fields(watcher=self._name, pages=pages, items=items_seen),
                    )
                    self._metrics.inc("relists_total", watcher=self._name)
                    self._handler.begin_list()
                    continue_token = ""
                    pages = items_seen = 0
                    continue
                raise
            self._contact()
            items = page.get("items") or []
            pages += 1
            items_seen += len(items)
            self._metrics.inc("node_updates_total", len(items), watcher=self._name)
            self._handler.list_page(items)
            metadata = page.get("metadata") or {}
            continue_token = metadata.get("continue") or ""
            if not continue_token:
                self.resource_version = str(metadata.get("resourceVersion") or "")
                break
        self._handler.end_list()
        self._on_listed()
        logger.info(
            "listed",
            extra=fields(
                watcher=self._name, items=items_seen, pages=pages, resource_version=self.resource_version
            ),
        )

    def _watch_once(self) -> str:
        """One watch stream; returns why it ended (``stream-ended`` or ``error-event``)."""
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": self._config.watch_timeout_seconds,
            "labelSelector": self._config.label_selector,
            "fieldSelector": self._config.field_selector,
        }
        response = self._client.open_stream(
            self._config.path,
            query=query,
            connect_timeout=self._config.request_timeout_seconds,
            read_timeout=self._config.watch_timeout_seconds + self._config.client_margin_seconds,
        )
        with self._lock:
            self._response = response
        try:
            self._contact()
            for line in iter_lines(response):
                if self._stop.is_set():
                    return "stopped"
                event = json.loads(line)
                self._contact()
                event_type = event.get("type")
                obj = event.get("object") or {}
                if event_type == "ERROR":
                    code = obj.get("code")
                    if code == HTTP_GONE:
                        raise _GoneError()
                    logger.warning(
                        "watch stream reported an error; resuming from the last resourceVersion",
                        extra=fields(
                            watcher=self._name,
                            code=code,
                            reason=obj.get("reason"),
                            message=obj.get("message"),
                            resource_version=self.resource_version,
                        ),
                    )
                    return "error-event"
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    self._metrics.inc("node_updates_total", watcher=self._name)
                    self._handler.on_event(event_type, obj)
                elif event_type != "BOOKMARK":
                    logger.warning("unknown watch event type", extra=fields(type=event_type))
                if version:
                    # Advance only after the handler took the event: a crash in between replays it.
                    self.resource_version = str(version)
            self._contact()
            return "stream-ended"
        finally:
            with self._lock:
                self._response = None
            response.release_conn()
