"""deploy/exporter/networkpolicy.yaml: the exporter's pods reach the API server, EventBridge, their
credentials and DNS, and nothing else; only the metrics port reaches them.

The rules are evaluated here the way NetworkPolicy defines them: a connection is allowed when one
rule admits both its peer and its port (peers of a rule are ORed; ``ipBlock.except`` carves
addresses out of the block).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.utils import ContainerMetadataFetcher

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "deploy" / "exporter"
POLICY = yaml.safe_load((BASE / "networkpolicy.yaml").read_text())
DEPLOYMENT = yaml.safe_load((BASE / "deployment.yaml").read_text())


def port_matches(rule: dict[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    return not ports or any(p.get("protocol", "TCP") == protocol and p["port"] == port for p in ports)


def block_matches(peer: dict[str, Any], address: str) -> bool:
    block = peer.get("ipBlock")
    if block is None:
        return False
    ip = ipaddress.ip_address(address)
    network = ipaddress.ip_network(block["cidr"])
    if ip.version != network.version or ip not in network:
        return False
    return not any(ip in ipaddress.ip_network(carved) for carved in block.get("except", []))


def egress_to_address(address: str, port: int, protocol: str = "TCP") -> bool:
    return any(
        port_matches(rule, port, protocol)
        and any(block_matches(peer, address) for peer in rule.get("to", []))
        for rule in POLICY["spec"]["egress"]
    )


def egress_to_pod(
    namespace_labels: dict[str, str], pod_labels: dict[str, str], port: int, protocol: str
) -> bool:
    def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
        return selector is not None and selector.get("matchLabels", {}).items() <= labels.items()

    return any(
        port_matches(rule, port, protocol)
        and any(
            selects(peer.get("namespaceSelector"), namespace_labels)
            and selects(peer.get("podSelector"), pod_labels)
            for peer in rule.get("to", [])
        )
        for rule in POLICY["spec"]["egress"]
    )


def test_the_kustomization_ships_the_policy_in_the_exporters_namespace() -> None:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert "networkpolicy.yaml" in kustomization["resources"]
    assert (
        POLICY["metadata"]["namespace"] == DEPLOYMENT["metadata"]["namespace"] == kustomization["namespace"]
    )


def test_it_selects_the_exporter_pods_in_both_directions() -> None:
    selector = POLICY["spec"]["podSelector"]["matchLabels"]
    pod_labels = DEPLOYMENT["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert sorted(POLICY["spec"]["policyTypes"]) == ["Egress", "Ingress"]


def test_only_the_metrics_and_health_port_is_open_inbound() -> None:
    (rule,) = POLICY["spec"]["ingress"]
    (container,) = DEPLOYMENT["spec"]["template"]["spec"]["containers"]
    (http,) = [p for p in container["ports"] if p["name"] == "http"]
    assert rule["ports"] == [{"protocol": "TCP", "port": http["containerPort"]}]
    assert "from" not in rule  # any scraper; probes come from the node, which is always admitted


@pytest.mark.parametrize("protocol", ["UDP", "TCP"])
def test_dns_reaches_coredns_in_kube_system_only(protocol: str) -> None:
    kube_system = {"kubernetes.io/metadata.name": "kube-system"}
    assert egress_to_pod(kube_system, {"k8s-app": "kube-dns", "pod-template-hash": "abc"}, 53, protocol)
    assert not egress_to_pod(
        {"kubernetes.io/metadata.name": "default"}, {"k8s-app": "kube-dns"}, 53, protocol
    )
    assert not egress_to_pod(kube_system, {"k8s-app": "metrics-server"}, 53, protocol)
    assert not egress_to_address("8.8.8.8", 53, protocol)


def test_credentials_come_from_the_pod_identity_agent_botocore_accepts() -> None:
    agent_hosts = [
        host
        for host in ContainerMetadataFetcher._ALLOWED_HOSTS
        if host not in ("localhost", ContainerMetadataFetcher.IP_ADDRESS)  # loopback; ECS's agent
    ]
    assert agent_hosts == ["169.254.170.23", "fd00:ec2::23"]
    for host in agent_hosts:
        assert egress_to_address(host, 80)
    # The instance metadata service (and its credentials) stays out of reach.
    assert not egress_to_address("169.254.169.254", 80)
    assert not egress_to_address("fd00:ec2::254", 80)
    assert not egress_to_address(ContainerMetadataFetcher.IP_ADDRESS, 80)


@pytest.mark.parametrize(
    "address",
    [
        "10.0.12.34",  # the API server's network interface in the cluster's subnet
        "172.20.0.1",  # the kubernetes Service's cluster IP
        "52.94.133.131",  # a public EventBridge endpoint address
        "2600:1f14::1",  # IPv6 clusters
    ],
)
def test_https_reaches_the_api_server_and_aws_endpoints(address: str) -> None:
    assert egress_to_address(address, 443)


@pytest.mark.parametrize(
    ("address", "port"), [("10.0.12.34", 10250), ("10.0.12.34", 80), ("52.94.133.131", 80)]
)
def test_nothing_else_goes_out(address: str, port: int) -> None:
    assert not egress_to_address(address, port)
    assert not egress_to_address(address, port, "UDP")
