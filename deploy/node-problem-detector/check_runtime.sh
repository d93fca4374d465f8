#!/bin/sh
# node-problem-detector custom plugin: does containerd answer on its socket, and fast enough?
#
# `ctr --address SOCKET version` makes one Version call over containerd's gRPC socket, the
# cheapest call that goes through the daemon. ctr ships with containerd on the node; the chart
# mounts the host's binary and socket (values.yaml, extraVolumes). The call is timed: slower than
# RUNTIME_SLOW_MS (2000 ms) is NonOK, as is no answer within RUNTIME_TIMEOUT (15 s, bounded by
# timeout -k 2, inside the rule's 30 s NPD timeout) or a refused connection (the daemon is gone).
#
# Exit codes per NPD's plugin protocol: 0 OK, 1 NonOK (ContainerRuntimeUnresponsive=True),
# 2 Unknown. The socket not mounted, ctr missing, a permission error or a bad bound are the
# monitor's failure, not the runtime's.
set -u

CTR="${CTR:-ctr}"
RUNTIME_SOCKET="${RUNTIME_SOCKET:-/run/containerd/containerd.sock}"
RUNTIME_SLOW_MS="${RUNTIME_SLOW_MS:-2000}"
RUNTIME_TIMEOUT="${RUNTIME_TIMEOUT:-15}"

OK=0
NONOK=1
UNKNOWN=2

for bound in "$RUNTIME_SLOW_MS" "$RUNTIME_TIMEOUT"; do
    case "$bound" in
        ''|*[!0-9]*|0*)
            echo "monitor misconfigured: RUNTIME_SLOW_MS=$RUNTIME_SLOW_MS RUNTIME_TIMEOUT=$RUNTIME_TIMEOUT"
            exit $UNKNOWN
            ;;
    esac
done
if ! command -v "$CTR" >/dev/null 2>&1; then
    echo "monitor failed: ctr not found"
    exit $UNKNOWN
fi
if [ ! -S "$RUNTIME_SOCKET" ]; then
    echo "monitor failed: $RUNTIME_SOCKET is not a socket here (not mounted?)"
    exit $UNKNOWN
fi

started=$(date +%s%N)
output=$(timeout -k 2 "$RUNTIME_TIMEOUT" "$CTR" --address "$RUNTIME_SOCKET" version 2>&1)
status=$?
elapsed=$(( ($(date +%s%N) - started) / 1000000 ))
first=$(echo "$output" | grep -v '^ *$' | tail -n 1)
case $status in
    0) ;;
    124|137)
        echo "containerd did not answer within ${RUNTIME_TIMEOUT}s"
        exit $NONOK
        ;;
    *)
        case "$output" in
            *"permission denied"*)
                echo "monitor failed: no permission on $RUNTIME_SOCKET"
                exit $UNKNOWN
                ;;
        esac
        echo "containerd not answering ($status): $first"
        exit $NONOK
        ;;
esac
if [ "$elapsed" -gt "$RUNTIME_SLOW_MS" ]; then
    echo "containerd answered in ${elapsed} ms (bound ${RUNTIME_SLOW_MS} ms)"
    exit $NONOK
fi
echo "containerd answered in ${elapsed} ms"
exit $OK
