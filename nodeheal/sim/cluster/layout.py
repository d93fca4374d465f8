"""What a simulated cluster is made of and runs on: its layout, the real-world durations of its
controllers, and the clock that runs their delayed actions. Apart from
:mod:`nodeheal.sim.cluster.simulated_cluster` so that the controllers it starts
(:mod:`nodeheal.sim.cluster.controllers`) can name them too."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

logger = logging.getLogger(__name__)


# -- configuration ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """What the simulated cluster runs."""

    gpu_nodes: int = 4
    instance_type: str = "p5.48xlarge"
    gpus_per_node: int = 8
    zone: str = "us-west-2b"
    node_pool: str = "gpu"
    #: Workers of the multi-node training job, one per GPU node holding all its GPUs; by default
    #: every GPU node but the last, which runs the do-not-disrupt notebook.
    training_workers: int | None = None
    #: GPUs of the ``karpenter.sh/do-not-disrupt`` notebook on the last GPU node (0: no notebook).
    notebook_gpus: int = 2
    #: How long before the pipeline started the first GPU nodes joined (their creationTimestamp):
    #: a cluster that has run for hours, whose nodes' Event history starts after they joined.
    node_age_seconds: int = 0

    @property
    def workers(self) -> int:
        if self.training_workers is not None:
            return self.training_workers
        return self.gpu_nodes - 1 if self.notebook_gpus else self.gpu_nodes


@dataclass(frozen=True, slots=True)
class ClusterTimings:
    """Real-world durations in seconds; :meth:`scaled` turns them into simulation time."""

    #: Instance terminated -> Karpenter deletes its Node.
    node_removal_seconds: float = 20.0
    #: Instance terminated -> Karpenter has launched the replacement instance (it reacts to the
    #: pending pods the drain left, so it is quick).
    instance_launch_seconds: float = 10.0
    #: Replacement instance launched -> its Node registers Ready (a p5 takes minutes to boot).
    node_ready_seconds: float = 150.0
    #: Pod bound -> containers running (images cached on the AMI).
    pod_start_seconds: float = 20.0
    #: EC2 reboot -> the kubelet reports again with a new boot ID.
    reboot_seconds: float = 150.0

    def scaled(self, speed: float) -> ClusterTimings:
        if speed <= 0:
            raise ValueError("speed must be positive")
        return replace(
            self,
            node_removal_seconds=self.node_removal_seconds / speed,
            instance_launch_seconds=self.instance_launch_seconds / speed,
            node_ready_seconds=self.node_ready_seconds / speed,
            pod_start_seconds=self.pod_start_seconds / speed,
            reboot_seconds=self.reboot_seconds / speed,
        )


# -- a clock for delayed actions -------------------------------------------------------------------


class SimClock:
    """Runs callbacks after a delay, and periodic ticks, on one thread; errors are kept, not lost."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._ticks: list[tuple[float, Callable[[], None]]] = []
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._running = 0
        self.errors: list[str] = []

    def after(self, delay: float, action: Callable[[], None]) -> None:
        with self._lock:
            heapq.heappush(self._queue, (time.monotonic() + max(delay, 0.0), next(self._seq), action))
            self._lock.notify()

    def every(self, interval: float, action: Callable[[], None]) -> None:
        with self._lock:
            self._ticks.append((interval, action))
            heapq.heappush(
                self._queue, (time.monotonic() + interval, next(self._seq), self._ticker(interval, action))
            )
            self._lock.notify()

    def _ticker(self, interval: float, action: Callable[[], None]) -> Callable[[], None]:
        def tick() -> None:
            try:
                action()
            finally:
                with self._lock:
                    if not self._stopped:
                        heapq.heappush(self._queue, (time.monotonic() + interval, next(self._seq), tick))

        return tick

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sim-clock", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def pending(self) -> int:
        """Delayed actions not yet run (periodic ticks excluded)."""
        with self._lock:
            return len(self._queue) - len(self._ticks) + self._running

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                now = time.monotonic()
                if not self._queue or self._queue[0][0] > now:
                    self._lock.wait(self._queue[0][0] - now if self._queue else None)
                    continue
                _, _, action = heapq.heappop(self._queue)
                self._running += 1
            try:
                action()
            except Exception as error:  # a broken simulation step must be visible, not kill the clock
                logger.exception("simulation step failed")
                self.errors.append(f"{type(error).__name__}: {error}")
            finally:
                with self._lock:
                    self._running -= 1
