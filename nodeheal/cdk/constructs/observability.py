"""The dashboard, and the alarms that page a person through the notifications topic.

Every execution and dead-letter alarm fires on the first occurrence: a failed or stuck remediation
leaves a node cordoned (capacity lost) and a dead letter is an event that never became a
remediation. Missing data is not breaching there: no executions and empty queues are the healthy
steady state. The heartbeat alarms are the opposite: silence is the failure (an exporter that
stopped means GPU faults nobody acts on), so missing data breaches.

The metrics are the Powertools EMF metrics of the Lambdas (namespace ``NodeHeal``, dimension
``service``): ``Remediations`` by outcome and ``RemediationsByAction`` by action, ``TimeToCordon``,
``TimeToInstanceAction`` by action and ``DrainsBlockedByPdb`` from Record; ``AdmissionsRefused`` and
``BreakerOpened`` from Admit; ``Events<Status>`` and the exporter's heartbeat counters (by cluster)
from Ingest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from nodeheal.actions import Action
from nodeheal.cdk.constructs.lambda_function import METRICS_NAMESPACE, SERVICE_NAME
from nodeheal.events import EXPORTER_HEARTBEATS_METRIC
from nodeheal.workflow.records import Outcome

#: Evaluation period of the event alarms; Step Functions and SQS publish these metrics every minute.
PERIOD = Duration.minutes(5)
#: Period of the dashboard's counters: an hour reads well over the default two-week range.
DASHBOARD_PERIOD = Duration.hours(1)
#: Heartbeats are evaluated per minute; the alarm needs this many silent minutes in a row.
HEARTBEAT_PERIOD = Duration.minutes(1)
WIDTH = 24  # dashboard grid width
INSTANCE_ACTIONS = (Action.REPLACE, Action.REBOOT)


def nodeheal_metric(
    name: str,
    *,
    statistic: str = cloudwatch.Stats.SUM,
    period: Duration = DASHBOARD_PERIOD,
    label: str | None = None,
    dimensions: Mapping[str, str] | None = None,
) -> cloudwatch.Metric:
    """A Powertools metric of the NodeHeal functions (every one carries the ``service`` dimension)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": SERVICE_NAME, **(dimensions or {})},
        statistic=statistic,
        period=period,
        label=label,
    )


class ObservabilityConstruct(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        state_machine: sfn.StateMachine,
        dead_letter_queues: Sequence[sqs.IQueue],
        topic: sns.ITopic,
        clusters: Sequence[str],
        heartbeat_missing_minutes: int,
        dashboard_name: str,
    ) -> None:
        super().__init__(scope, id_)
        self._action = cloudwatch_actions.SnsAction(topic)
        self.alarms: list[cloudwatch.Alarm] = []
        self._build_execution_alarms(state_machine)
        self._build_dead_letter_alarms(dead_letter_queues)
        self.breaker_alarm = self._build_breaker_alarm()
        self.heartbeat_alarms = self._build_heartbeat_alarms(clusters, heartbeat_missing_minutes)
        self.dashboard = self._build_dashboard(dashboard_name, state_machine, dead_letter_queues, clusters)

    # -- alarms ------------------------------------------------------------------------------------

    def _build_execution_alarms(self, state_machine: sfn.StateMachine) -> None:
        outcomes = (
            ("ExecutionsFailed", state_machine.metric_failed, "ended in Record failure or failed outright"),
            ("ExecutionsTimedOut", state_machine.metric_timed_out, "hit the workflow timeout"),
            ("ExecutionsAborted", state_machine.metric_aborted, "were stopped by hand or by a redeploy"),
        )
        for name, metric, meaning in outcomes:
            self._alarm(
                name,
                metric(period=PERIOD, statistic=cloudwatch.Stats.SUM),
                f"NodeHeal remediations {meaning}; the node may be left cordoned. "
                "See the execution history and the ledger record (runbook: remediation failed).",
            )

    def _build_dead_letter_alarms(self, queues: Sequence[sqs.IQueue]) -> None:
        for queue in queues:
            self._alarm(
                f"{queue.node.id}Depth",
                queue.metric_approximate_number_of_messages_visible(
                    period=PERIOD, statistic=cloudwatch.Stats.MAXIMUM
                ),
                f"Events from the exporters are waiting in the dead-letter queue {queue.node.id}: a "
                "condition transition that never started a remediation, or a Warning Node Event never "
                "counted. Inspect them, fix the cause, then redrive or delete.",
            )

    def _build_breaker_alarm(self) -> cloudwatch.Alarm:
        return self._alarm(
            "BreakerOpen",
            nodeheal_metric("BreakerOpened", period=PERIOD),
            "NodeHeal's circuit breaker opened: budgets refused several nodes at once, which looks like a "
            "fleet-wide event. No remediation starts until a person runs `nodeheal breaker reset` "
            "(runbook: breaker open).",
        )

    def _build_heartbeat_alarms(self, clusters: Sequence[str], minutes: int) -> dict[str, cloudwatch.Alarm]:
        alarms = {}
        for index, cluster in enumerate(clusters):
            alarm = cloudwatch.Alarm(
                self,
                f"ExporterHeartbeatMissing{index}",
                metric=nodeheal_metric(
                    EXPORTER_HEARTBEATS_METRIC, period=HEARTBEAT_PERIOD, dimensions={"cluster": cluster}
                ),
                alarm_description=(
                    f"No NodeHeal exporter heartbeat from cluster {cluster} for {minutes} minutes: "
                    "GPU faults there reach nobody. Check the exporter pods (kubectl -n nodeheal get "
                    "pods, logs, /healthz) and its permission to put events on the bus."
                ),
                threshold=1,
                comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                evaluation_periods=minutes,
                datapoints_to_alarm=minutes,
                treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
            )
            alarm.add_alarm_action(self._action)
            # Recovery is news too: the person paged for the silence learns it ended.
            alarm.add_ok_action(self._action)
            self.alarms.append(alarm)
            alarms[cluster] = alarm
        return alarms

    def _alarm(self, id_: str, metric: cloudwatch.IMetric, description: str) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            id_,
            metric=metric,
            alarm_description=description,
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(self._action)
        self.alarms.append(alarm)
        return alarm

    # -- dashboard ---------------------------------------------------------------------------------

    def _build_dashboard(
        self,
        name: str,
        state_machine: sfn.StateMachine,
        queues: Sequence[sqs.IQueue],
        clusters: Sequence[str],
    ) -> cloudwatch.Dashboard:
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=name)
        dashboard.add_widgets(
            cloudwatch.TextWidget(
                markdown=(
                    "# NodeHeal\nGPU node remediations: what happened, how fast, and what held them back. "
                    "History per node: `nodeheal history`; one remediation: "
                    "`nodeheal history show EXECUTION`; breaker and pause: `nodeheal breaker status`."
                ),
                width=WIDTH,
                height=2,
            )
        )
        dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=WIDTH, height=3)
        )
        dashboard.add_widgets(
            self._graph(
                "Remediations by outcome",
                [
                    nodeheal_metric("Remediations", label=o.value, dimensions={"outcome": o.value})
                    for o in Outcome
                ],
                stacked=True,
                width=WIDTH // 2,
            ),
            self._graph(
                "Remediations by action",
                [
                    nodeheal_metric("RemediationsByAction", label=a.value, dimensions={"action": a.value})
                    for a in Action
                ],
                stacked=True,
                width=WIDTH // 2,
            ),
        )
        dashboard.add_widgets(
            self._graph("Time to cordon (fault -> cordoned), seconds", self._percentiles("TimeToCordon")),
            self._graph(
                "Time to replace (fault -> instance terminated), seconds",
                self._percentiles("TimeToInstanceAction", {"action": Action.REPLACE.value}),
            ),
            self._graph(
                "Time to reboot (fault -> reboot issued), seconds",
                self._percentiles("TimeToInstanceAction", {"action": Action.REBOOT.value}),
            ),
        )
        dashboard.add_widgets(
            self._graph(
                "Drains held up by PodDisruptionBudgets",
                [nodeheal_metric("DrainsBlockedByPdb", label="remediations with PDB-refused evictions")],
            ),
            self._graph(
                "Breaker and budgets",
                [
                    nodeheal_metric("BreakerOpened", label="breaker opened"),
                    nodeheal_metric("AdmissionsRefused", label="admissions refused (budget, breaker, pause)"),
                ],
            ),
            self._graph(
                "Events reaching ingest",
                [
                    nodeheal_metric(f"Events{status}", label=status.lower())
                    for status in ("Started", "Duplicate", "Dropped")
                ],
                stacked=True,
            ),
        )
        dashboard.add_widgets(
            self._graph(
                "Executions",
                [
                    state_machine.metric_started(period=DASHBOARD_PERIOD, label="started"),
                    state_machine.metric_succeeded(period=DASHBOARD_PERIOD, label="succeeded"),
                    state_machine.metric_failed(period=DASHBOARD_PERIOD, label="failed"),
                    state_machine.metric_timed_out(period=DASHBOARD_PERIOD, label="timed out"),
                ],
                width=WIDTH // 3,
            ),
            self._graph(
                "Dead-letter queues (messages waiting)",
                [
                    queue.metric_approximate_number_of_messages_visible(
                        period=PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label=queue.node.id
                    )
                    for queue in queues
                ],
                width=WIDTH // 3,
            ),
            # A step never fails for an Event it could not write (docs/architecture.md, D8); this is
            # where a broken Events path (RBAC, admission webhook, API server load) shows.
            self._graph(
                "Kubernetes Events not written",
                [
                    nodeheal_metric("KubernetesEventsFailed", label="failed (API error)"),
                    nodeheal_metric(
                        "KubernetesEventsSkipped", label="skipped (after a failure, or no time left)"
                    ),
                ],
                width=WIDTH // 3,
            ),
        )
        dashboard.add_widgets(*self._exporter_widgets(clusters))
        return dashboard

    @staticmethod
    def _percentiles(name: str, dimensions: Mapping[str, str] | None = None) -> list[cloudwatch.IMetric]:
        return [
            nodeheal_metric(name, statistic=stat, label=stat, dimensions=dimensions)
            for stat in ("p50", "p90", "p99")
        ]

    def _exporter_widgets(self, clusters: Sequence[str]) -> list[cloudwatch.IWidget]:
        def per_cluster(name: str, statistic: str = cloudwatch.Stats.SUM) -> list[cloudwatch.IMetric]:
            return [
                nodeheal_metric(
                    name, statistic=statistic, period=Duration.minutes(5), label=c, dimensions={"cluster": c}
                )
                for c in clusters
            ]

        quarter = WIDTH // 4
        return [
            self._graph(
                "Exporter heartbeats (per 5 min; expect ~5)",
                per_cluster(EXPORTER_HEARTBEATS_METRIC),
                width=quarter,
            ),
            self._graph("Exporter publish failures", per_cluster("ExporterPublishFailures"), width=quarter),
            self._graph(
                "Exporter events dropped (queue overflow)",
                per_cluster("ExporterEventsDropped"),
                width=quarter,
            ),
            self._graph(
                "Exporter queue depth",
                per_cluster("ExporterQueueDepth", cloudwatch.Stats.MAXIMUM),
                width=quarter,
            ),
        ]

    @staticmethod
    def _graph(
        title: str, metrics: Sequence[cloudwatch.IMetric], *, stacked: bool = False, width: int = 8
    ) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(title=title, left=list(metrics), stacked=stacked, width=width, height=6)
