"""Leader election through a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

Two replicas run; the one holding the Lease ships events, the other watches and stands by. The
holder renews every ``retry_period``; if it cannot renew within ``renew_deadline`` it stops
shipping (before the Lease, valid for ``lease_duration``, can be taken by anyone else). A standby
takes over once the record it last observed has not changed for a whole ``lease_duration``,
measured on its own monotonic clock, so clock skew between nodes does not matter. Writes use the
Lease's resourceVersion (optimistic concurrency): of two standbys racing, one gets 409 and waits.
On a clean shutdown the leader releases the Lease (empty holder) so the standby takes over at once.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from urllib3.exceptions import HTTPError as Urllib3Error

from nodeheal.exporter.kubeclient import ApiException, KubeJsonClient
from nodeheal.exporter.logs import fields

logger = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409


def _micro_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    name: str
    namespace: str
    identity: str
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    request_timeout_seconds: float = 10.0


class LeaderElector:
    def __init__(
        self,
        client: KubeJsonClient,
        config: LeaseConfig,
        *,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._client = client
        self._config = config
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._wall_clock = wall_clock
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._observed: tuple[str, str, str] | None = None  # holder, renewTime, resourceVersion
        self._observed_at = 0.0
        self._last_renew = 0.0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self._config.namespace}/leases"

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def run(self) -> None:
        """Acquire and renew until :meth:`stop`; the thread target."""
        while not self._stop.is_set():
            succeeded = self._try_acquire_or_renew()
            now = self._clock()
            if succeeded:
                self._last_renew = now
                if not self._leading.is_set():
                    self._leading.set()
                    logger.info("became the leader", extra=fields(lease=self._config.name))
                    self._on_started()
            elif self._leading.is_set() and now - self._last_renew >= self._config.renew_deadline_seconds:
                self._leading.clear()
                logger.warning(
                    "could not renew the Lease in time; stopped leading",
                    extra=fields(lease=self._config.name),
                )
                self._on_stopped()
            self._stop.wait(self._config.retry_period_seconds)

    def stop(self, *, release: bool = True) -> None:
        """Stop electing; with ``release`` hand the Lease over immediately (clean shutdown)."""
        self._stop.set()
        was_leading = self._leading.is_set()
        self._leading.clear()
        if was_leading:
            self._on_stopped()
            if release:
                self._release()

    def _lease_body(self, existing: dict[str, Any] | None, *, acquire: bool) -> dict[str, Any]:
        now = _micro_time(self._wall_clock())
        spec = dict((existing or {}).get("spec") or {})
        transitions = int(spec.get("leaseTransitions") or 0)
        if acquire:
            spec["acquireTime"] = now
            if existing is not None:
                transitions += 1
        spec.update(
            {
                "holderIdentity": self._config.identity,
                "leaseDurationSeconds": max(1, math.ceil(self._config.lease_duration_seconds)),
                "renewTime": now,
                "leaseTransitions": transitions,
            }
        )
        metadata: dict[str, Any] = {"name": self._config.name, "namespace": self._config.namespace}
        if existing is not None:
            metadata["resourceVersion"] = (existing.get("metadata") or {}).get("resourceVersion")
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    def _try_acquire_or_renew(self) -> bool:
        timeout = self._config.request_timeout_seconds
        try:
            try:
                lease = self._client.request("GET", f"{self.path}/{self._config.name}", timeout=timeout)
            except ApiException as exc:
                if exc.status != HTTP_NOT_FOUND:
                    raise
                self._client.request(
                    "POST", self.path, body=self._lease_body(None, acquire=True), timeout=timeout
                )
                return True
            spec = lease.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            record = (
                holder,
                str(spec.get("renewTime") or ""),
                str((lease.get("metadata") or {}).get("resourceVersion")),
            )
            now = self._clock()
            if record != self._observed:
                self._observed = record
                self._observed_at = now
            if holder == self._config.identity:
                body = self._lease_body(lease, acquire=False)
            else:
                duration = float(spec.get("leaseDurationSeconds") or self._config.lease_duration_seconds)
                if holder and now - self._observed_at < duration:
                    return False  # someone else holds a Lease that is still valid
                body = self._lease_body(lease, acquire=True)
            self._client.request("PUT", f"{self.path}/{self._config.name}", body=body, timeout=timeout)
            return True
        except ApiException as exc:
            if exc.status != HTTP_CONFLICT:
                logger.warning(
                    "Lease request failed", extra=fields(status=exc.status, reason=str(exc.reason))
                )
            return False
        except (Urllib3Error, OSError, ValueError) as exc:
            logger.warning("Lease request failed", extra=fields(error=f"{type(exc).__name__}: {exc}"))
            return False

    def _release(self) -> None:
        try:
            lease = self._client.request(
                "GET", f"{self.path}/{self._config.name}", timeout=self._config.request_timeout_seconds
            )
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self._config.identity:
                return
            body = self._lease_body(lease, acquire=False)
            body["spec"]["holderIdentity"] = ""
            body["spec"]["leaseDurationSeconds"] = 1
            self._client.request(
                "PUT",
                f"{self.path}/{self._config.name}",
                body=body,
                timeout=self._config.request_timeout_seconds,
            )
            logger.info("released the Lease", extra=fields(lease=self._config.name))
        except (ApiException, Urllib3Error, OSError, ValueError) as exc:
            logger.warning("could not release the Lease", extra=fields(error=str(exc)))
