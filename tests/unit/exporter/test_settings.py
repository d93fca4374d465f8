from __future__ import annotations

import pytest

from nodeheal.errors import ConfigurationError
from nodeheal.exporter.settings import load_settings


def test_flags_win_over_environment_over_defaults() -> None:
    env = {"NODEHEAL_CLUSTER_NAME": "from-env", "NODEHEAL_EVENT_BUS": "env-bus", "POD_NAME": "pod-1"}
    settings = load_settings({"cluster_name": "from-flag", "condition_types": "GPUProblem, Ready"}, env)
    assert settings.cluster_name == "from-flag"
    assert settings.event_bus == "env-bus"
    assert settings.condition_types == ("GPUProblem", "Ready")
    assert settings.identity == "pod-1"
    assert settings.source == "nodeheal.exporter"
    assert settings.watches("Ready") and not settings.watches("KernelDeadlock")


def test_default_watches_everything_but_pressure() -> None:
    settings = load_settings({}, {"NODEHEAL_CLUSTER_NAME": "c"})
    assert settings.watches("GPUProblem") and settings.watches("AcceleratedHardwareReady")
    assert not settings.watches("MemoryPressure")
    assert settings.watch_read_timeout_seconds == 315.0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "cluster name is required"),
        ({"NODEHEAL_CLUSTER_NAME": "c", "NODEHEAL_PUBLISH_BATCH_ENTRIES": "11"}, "between 1 and 10"),
        ({"NODEHEAL_CLUSTER_NAME": "c", "NODEHEAL_LEADER_ELECTION": "maybe"}, "true or false"),
        ({"NODEHEAL_CLUSTER_NAME": "c", "NODEHEAL_SOURCE": "aws.events"}, "must not start with 'aws.'"),
        (
            {
                "NODEHEAL_CLUSTER_NAME": "c",
                "NODEHEAL_LEADER_ELECTION": "true",
                "NODEHEAL_RENEW_DEADLINE_SECONDS": "20",
            },
            "renew_deadline_seconds < lease_duration_seconds",
        ),
        ({"NODEHEAL_CLUSTER_NAME": "c", "NODEHEAL_LIVENESS_MAX_API_SILENCE_SECONDS": "100"}, "quiet cluster"),
    ],
)
def test_invalid_settings_fail_at_start_naming_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_settings({}, env)
