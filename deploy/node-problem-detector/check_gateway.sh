#!/bin/sh
# node-problem-detector custom plugin: does the node's default gateway still answer ping?
#
# The gateway is GATEWAY when set, else the first IPv4 default route in ROUTE_FILE
# (/proc/net/route of the host's network namespace: the chart runs with hostNetwork). In a VPC it
# is the subnet's router (the .1 address). It answers ICMP echo only where the node's security
# groups allow ICMP out and the subnet's network ACL lets it through, which not every VPC does.
# So the check is baseline-aware: a gateway that does not answer is the fault (NonOK) only when
# it answered earlier on this same boot (the kernel's boot_id, BOOT_ID_FILE). The first answer of
# a boot is recorded in GATEWAY_STATE_FILE (the boot_id and the gateway). A gateway that never
# answered on this boot is Unknown, with a message asking to allow ICMP to the VPC router: on such
# a VPC every node would otherwise report the fault at once.
#
# GATEWAY_STATE_FILE defaults to a directory on the container's own filesystem, which chart 2.4.1
# leaves writable (deliveryhero/helm-charts, stable/node-problem-detector 2.4.1: values.yaml sets
# securityContext privileged: true, no readOnlyRootFilesystem; the image has no USER, so root);
# values.yaml mounts a hostPath there so the record outlives a restart of the NPD container. A
# state file that cannot be written is the monitor's failure (the check could never report).
#
# The NPD image has no ping (kubernetes/node-problem-detector v1.35.1, Dockerfile: debian-base
# plus util-linux, bash and libsystemd-dev only), so HOST_EXEC runs the node's own ping in the
# node's mount namespace (values.yaml: nsenter from util-linux, into PID 1 with hostPID). Empty
# HOST_EXEC runs PING from PATH.
#
# Bounds: PING_DEADLINE (6 s: three pings, 2 s each, ping -c 3 -W 2 -w 6), all bounded again by
# timeout -k PING_KILL_AFTER (2) PING_TIMEOUT (10), and the HOST_EXEC check by timeout -k 1 2:
# 15 s at most, well inside the rule's 30 s NPD timeout (NPD reports a plugin it kills as
# Unknown: pkg/custompluginmonitor/plugin/plugin.go, Plugin.run).
#
# Exit codes per NPD's plugin protocol: 0 OK, 1 NonOK (GatewayUnreachable=True: no reply at all,
# after replies earlier on this boot), 2 Unknown. iputils ping exits 1 when no reply came and 2 on
# any other error: "socket: Operation not permitted" without NET_RAW, a bad address. Those, a
# missing ping, HOST_EXEC failing, no IPv4 default route (an IPv6-only node), an unreadable boot
# id, a state file that cannot be written and a ping that hangs past its own deadline are the
# monitor's failure, not the network's.
set -u

PING="${PING:-ping}"
HOST_EXEC="${HOST_EXEC:-}"
ROUTE_FILE="${ROUTE_FILE:-/proc/net/route}"
GATEWAY="${GATEWAY:-}"
BOOT_ID_FILE="${BOOT_ID_FILE:-/proc/sys/kernel/random/boot_id}"
GATEWAY_STATE_FILE="${GATEWAY_STATE_FILE:-/var/lib/nodeheal-npd/gateway-baseline}"
PING_DEADLINE="${PING_DEADLINE:-6}"
PING_TIMEOUT="${PING_TIMEOUT:-10}"
PING_KILL_AFTER="${PING_KILL_AFTER:-2}"

OK=0
NONOK=1
UNKNOWN=2

for bound in "$PING_DEADLINE" "$PING_TIMEOUT" "$PING_KILL_AFTER"; do
    case "$bound" in
        ''|*[!0-9]*|0*)
            echo "monitor misconfigured: PING_DEADLINE=$PING_DEADLINE PING_TIMEOUT=$PING_TIMEOUT PING_KILL_AFTER=$PING_KILL_AFTER"
            exit $UNKNOWN
            ;;
    esac
done

if [ -n "$HOST_EXEC" ]; then
    if ! command -v "${HOST_EXEC%% *}" >/dev/null 2>&1; then
        echo "monitor failed: ${HOST_EXEC%% *} not found (HOST_EXEC)"
        exit $UNKNOWN
    fi
    # nsenter's own failure (no hostPID, no privilege) exits 1, as ping does for no reply: check
    # that it can enter before reading ping's exit code.
    # shellcheck disable=SC2086 # HOST_EXEC is a command and its arguments
    if ! entered=$(timeout -k 1 2 $HOST_EXEC true 2>&1); then
        echo "monitor failed: HOST_EXEC cannot run: $(echo "$entered" | head -n 1)"
        exit $UNKNOWN
    fi
elif ! command -v "$PING" >/dev/null 2>&1; then
    echo "monitor failed: ping not found"
    exit $UNKNOWN
fi

boot_id=""
[ -r "$BOOT_ID_FILE" ] && read -r boot_id < "$BOOT_ID_FILE"
if [ -z "$boot_id" ]; then
    echo "monitor failed: cannot read $BOOT_ID_FILE"
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

baseline="$boot_id $GATEWAY"
recorded=""
[ -r "$GATEWAY_STATE_FILE" ] && read -r recorded < "$GATEWAY_STATE_FILE"

# shellcheck disable=SC2086 # HOST_EXEC is a command and its arguments
output=$(timeout -k "$PING_KILL_AFTER" "$PING_TIMEOUT" $HOST_EXEC "$PING" -n -q -c 3 -W 2 -w "$PING_DEADLINE" \
    "$GATEWAY" 2>&1)
status=$?
case $status in
    0)
        if [ "$recorded" != "$baseline" ]; then
            directory=$(dirname "$GATEWAY_STATE_FILE")
            if ! { mkdir -p "$directory" && echo "$baseline" > "$GATEWAY_STATE_FILE.new" \
                && mv -f "$GATEWAY_STATE_FILE.new" "$GATEWAY_STATE_FILE"; } 2>/dev/null; then
                echo "monitor failed: cannot write $GATEWAY_STATE_FILE"
                exit $UNKNOWN
            fi
        fi
        echo "gateway $GATEWAY answers ping"
        exit $OK
        ;;
    1)
        if [ "$recorded" = "$baseline" ]; then
            echo "gateway $GATEWAY unreachable: no reply to 3 pings, answered this boot"
            exit $NONOK
        fi
        # The first 80 characters are what NPD keeps (max_output_length): the advice goes first.
        echo "monitor failed: allow ICMP to VPC router $GATEWAY: no ping reply this boot"
        exit $UNKNOWN
        ;;
    124|137)
        echo "monitor failed: ping $GATEWAY hung past its ${PING_DEADLINE}s deadline"
        exit $UNKNOWN
        ;;
    126|127)
        echo "monitor failed: ping not found or not executable ($status)"
        exit $UNKNOWN
        ;;
    *)
        echo "monitor failed: ping $GATEWAY could not run ($status): $(echo "$output" | head -n 1)"
        exit $UNKNOWN
        ;;
esac
