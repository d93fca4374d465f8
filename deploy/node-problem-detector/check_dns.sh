#!/bin/sh
# node-problem-detector custom plugin: does the node resolve DNS_CHECK_NAME?
#
# getent ahosts asks the node's resolver as every host process does (nsswitch, /etc/resolv.conf:
# the chart runs with hostNetwork and dnsPolicy Default, so the pod reads the node's resolv.conf,
# the VPC resolver on EKS). DNS_CHECK_NAME is configured in values.yaml (env); a name the VPC
# resolver always answers, such as the STS endpoint, checks the node's path to DNS rather than
# one record. Bounded by timeout -k DNS_KILL_AFTER (2) DNS_TIMEOUT (10 s), inside the rule's 30 s
# NPD timeout.
#
# Exit codes per NPD's plugin protocol: 0 OK, 1 NonOK (DNSUnavailable=True), 2 Unknown. getent(1)
# exits 2 when the name does not resolve (NXDOMAIN, or every server failed): NonOK, as is no answer
# within DNS_TIMEOUT (the resolver is not answering). Its other codes (1 bad arguments, 3
# enumeration unsupported), a missing getent or an unset name are the monitor's failure.
set -u

GETENT="${GETENT:-getent}"
DNS_CHECK_NAME="${DNS_CHECK_NAME:-}"
DNS_TIMEOUT="${DNS_TIMEOUT:-10}"
DNS_KILL_AFTER="${DNS_KILL_AFTER:-2}"

OK=0
NONOK=1
UNKNOWN=2

for bound in "$DNS_TIMEOUT" "$DNS_KILL_AFTER"; do
    case "$bound" in
        ''|*[!0-9]*|0*)
            echo "monitor misconfigured: DNS_TIMEOUT=$DNS_TIMEOUT DNS_KILL_AFTER=$DNS_KILL_AFTER"
            exit $UNKNOWN
            ;;
    esac
done
if [ -z "$DNS_CHECK_NAME" ]; then
    echo "monitor misconfigured: DNS_CHECK_NAME is not set"
    exit $UNKNOWN
fi
if ! command -v "$GETENT" >/dev/null 2>&1; then
    echo "monitor failed: getent not found"
    exit $UNKNOWN
fi

output=$(timeout -k "$DNS_KILL_AFTER" "$DNS_TIMEOUT" "$GETENT" ahosts "$DNS_CHECK_NAME" 2>&1)
status=$?
case $status in
    0)
        echo "$DNS_CHECK_NAME resolves"
        exit $OK
        ;;
    2)
        echo "DNS: $DNS_CHECK_NAME does not resolve"
        exit $NONOK
        ;;
    124|137)
        echo "DNS: no answer for $DNS_CHECK_NAME within ${DNS_TIMEOUT}s"
        exit $NONOK
        ;;
    *)
        echo "monitor failed: getent could not run ($status): $(echo "$output" | head -n 1)"
        exit $UNKNOWN
        ;;
esac
