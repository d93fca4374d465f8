#!/bin/sh
# node-problem-detector custom plugin: does the node's default gateway answer ping?
#
# The gateway is GATEWAY when set, else the first IPv4 default route in ROUTE_FILE
# (/proc/net/route of the host's network namespace: the chart runs with hostNetwork). In a VPC it
# is the subnet's router (the .1 address), which answers ICMP echo. Three pings, 2 s each, 6 s at
# most (ping -c 3 -W 2 -w 6), all bounded again by timeout -k 2 10, well inside the rule's 30 s
# NPD timeout (NPD reports a plugin it kills as Unknown: plugin.go, Plugin.run).
#
# Exit codes per NPD's plugin protocol: 0 OK, 1 NonOK (GatewayUnreachable=True: no reply at all),
# 2 Unknown. iputils ping exits 1 when no reply came and 2 on any other error: "socket: Operation
# not permitted" without NET_RAW, a bad address. Those, a missing ping, no IPv4 default route (an
# IPv6-only node) and a ping that hangs past its own deadline are the monitor's failure, not the
# network's.
set -u

PING="${PING:-ping}"
ROUTE_FILE="${ROUTE_FILE:-/proc/net/route}"
GATEWAY="${GATEWAY:-}"

OK=0
NONOK=1
UNKNOWN=2

if ! command -v "$PING" >/dev/null 2>&1; then
    echo "monitor failed: ping not found"
    exit $UNKNOWN
fi

if [ -z "$GATEWAY" ]; then
    if [ ! -r "$ROUTE_FILE" ]; then
        echo "monitor failed: cannot read $ROUTE_FILE"
        exit $UNKNOWN
    fi
    # Columns: Iface Destination Gateway Flags ...; addresses in little-endian hex.
    while read -r iface destination hex rest; do
        if [ "$destination" = "00000000" ] && [ "$hex" != "00000000" ]; then
            case "$hex" in
                [0-9A-Fa-f][0-9A-Fa-f][0-9A-Fa-f][0-9A-Fa-f][0-9A-Fa-f][0-9A-Fa-f][0-9A-Fa-f][0-9A-Fa-f]) ;;
                *) continue ;;
            esac
            GATEWAY=$(printf '%d.%d.%d.%d' "0x$(echo "$hex" | cut -c7-8)" "0x$(echo "$hex" | cut -c5-6)" \
                "0x$(echo "$hex" | cut -c3-4)" "0x$(echo "$hex" | cut -c1-2)")
            break
        fi
    done < "$ROUTE_FILE"
    if [ -z "$GATEWAY" ]; then
        echo "monitor failed: no IPv4 default route in $ROUTE_FILE"
        exit $UNKNOWN
    fi
fi

output=$(timeout -k 2 10 "$PING" -n -q -c 3 -W 2 -w 6 "$GATEWAY" 2>&1)
status=$?
case $status in
    0)
        echo "gateway $GATEWAY answers ping"
        exit $OK
        ;;
    1)
        echo "gateway $GATEWAY unreachable: no reply to 3 pings"
        exit $NONOK
        ;;
    124|137)
        echo "monitor failed: ping $GATEWAY hung past its 6s deadline"
        exit $UNKNOWN
        ;;
    *)
        echo "monitor failed: ping $GATEWAY could not run ($status): $(echo "$output" | head -n 1)"
        exit $UNKNOWN
        ;;
esac
