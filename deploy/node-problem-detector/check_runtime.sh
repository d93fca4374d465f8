#!/bin/sh
# node-problem-detector custom plugin: does the container runtime answer on its socket, and fast
# enough?
#
# containerd when RUNTIME_SOCKET (/run/containerd/containerd.sock) is a socket: `ctr --address
# SOCKET version` makes one Version call over containerd's gRPC socket, the cheapest call that
# goes through the daemon. Else Docker when DOCKER_SOCKET (/var/run/docker.sock) is a socket:
# `curl --unix-socket SOCKET http://localhost/_ping`: the Docker Engine API's SystemPing, "a
# dummy endpoint you can use to test if the server is accessible", answers "OK" with HTTP 200
# (docs.docker.com, reference/api/engine/version/v1.57, operations/SystemPing). Neither socket is
# the monitor's failure (nothing to check, or not visible).
#
# The NPD image has neither ctr nor curl (kubernetes/node-problem-detector v1.35.1, Dockerfile:
# debian-base plus util-linux, bash and libsystemd-dev only). HOST_EXEC runs the node's own ctr
# (shipped with the containerd package) and curl in the node's mount namespace, where the sockets
# are (values.yaml: nsenter from util-linux, into PID 1 with hostPID); the socket tests run there
# too. Empty HOST_EXEC runs CTR and CURL from PATH and tests the sockets here.
#
# The call is timed: slower than RUNTIME_SLOW_MS (2000 ms) is NonOK, as is no answer within
# RUNTIME_TIMEOUT (15 s, bounded by timeout -k RUNTIME_KILL_AFTER (2)) or a refused connection
# (the daemon is gone). With the two socket tests (timeout -k 1 2 each) that is 23 s at most,
# inside the rule's 30 s NPD timeout.
#
# Exit codes per NPD's plugin protocol: 0 OK, 1 NonOK (ContainerRuntimeUnresponsive=True),
# 2 Unknown. No socket, ctr or curl missing, HOST_EXEC failing, a permission error or a bad bound
# are the monitor's failure, not the runtime's.
set -u

CTR="${CTR:-ctr}"
CURL="${CURL:-curl}"
HOST_EXEC="${HOST_EXEC:-}"
RUNTIME_SOCKET="${RUNTIME_SOCKET:-/run/containerd/containerd.sock}"
DOCKER_SOCKET="${DOCKER_SOCKET:-/var/run/docker.sock}"
RUNTIME_SLOW_MS="${RUNTIME_SLOW_MS:-2000}"
RUNTIME_TIMEOUT="${RUNTIME_TIMEOUT:-15}"
RUNTIME_KILL_AFTER="${RUNTIME_KILL_AFTER:-2}"

OK=0
NONOK=1
UNKNOWN=2

for bound in "$RUNTIME_SLOW_MS" "$RUNTIME_TIMEOUT" "$RUNTIME_KILL_AFTER"; do
    case "$bound" in
        ''|*[!0-9]*|0*)
            echo "monitor misconfigured: RUNTIME_SLOW_MS=$RUNTIME_SLOW_MS RUNTIME_TIMEOUT=$RUNTIME_TIMEOUT RUNTIME_KILL_AFTER=$RUNTIME_KILL_AFTER"
            exit $UNKNOWN
            ;;
    esac
done
if [ -n "$HOST_EXEC" ] && ! command -v "${HOST_EXEC%% *}" >/dev/null 2>&1; then
    echo "monitor failed: ${HOST_EXEC%% *} not found (HOST_EXEC)"
    exit $UNKNOWN
fi

# is_socket PATH: 0 a socket, 1 not; anything printed (HOST_EXEC's own failure: nsenter exits 1
# too) or another status ends the check as the monitor's failure.
is_socket() {
    # shellcheck disable=SC2086 # HOST_EXEC is a command and its arguments
    said=$(timeout -k 1 2 $HOST_EXEC test -S "$1" 2>&1)
    found=$?
    if [ -n "$said" ] || [ $found -gt 1 ]; then
        echo "monitor failed: cannot look for $1 ($found): $(echo "$said" | head -n 1)"
        exit $UNKNOWN
    fi
    return $found
}

if is_socket "$RUNTIME_SOCKET"; then
    runtime=containerd
    socket=$RUNTIME_SOCKET
    tool=$CTR
elif is_socket "$DOCKER_SOCKET"; then
    runtime=docker
    socket=$DOCKER_SOCKET
    tool=$CURL
else
    echo "monitor failed: no runtime socket: $RUNTIME_SOCKET, $DOCKER_SOCKET"
    exit $UNKNOWN
fi
if [ -z "$HOST_EXEC" ] && ! command -v "$tool" >/dev/null 2>&1; then
    echo "monitor failed: ${tool##*/} not found"
    exit $UNKNOWN
fi

started=$(date +%s%N)
# shellcheck disable=SC2086 # HOST_EXEC is a command and its arguments
if [ $runtime = containerd ]; then
    output=$(timeout -k "$RUNTIME_KILL_AFTER" "$RUNTIME_TIMEOUT" $HOST_EXEC "$CTR" --address "$socket" version 2>&1)
else
    output=$(timeout -k "$RUNTIME_KILL_AFTER" "$RUNTIME_TIMEOUT" $HOST_EXEC "$CURL" -sS -o /dev/null \
        -w '%{http_code}\n' --unix-socket "$socket" http://localhost/_ping 2>&1)
fi
status=$?
elapsed=$(( ($(date +%s%N) - started) / 1000000 ))
last=$(echo "$output" | grep -v '^ *$' | tail -n 1)
case $status in
    0) ;;
    124|137)
        echo "$runtime did not answer within ${RUNTIME_TIMEOUT}s"
        exit $NONOK
        ;;
    126|127)
        echo "monitor failed: ${tool##*/} not found or not executable ($status)"
        exit $UNKNOWN
        ;;
    *)
        case "$output" in
            *"permission denied"*|*"Permission denied"*)
                echo "monitor failed: no permission on $socket"
                exit $UNKNOWN
                ;;
        esac
        echo "$runtime not answering ($status): $last"
        exit $NONOK
        ;;
esac
if [ $runtime = docker ] && [ "$last" != 200 ]; then
    echo "docker answered /_ping with HTTP $last"
    exit $NONOK
fi
if [ "$elapsed" -gt "$RUNTIME_SLOW_MS" ]; then
    echo "$runtime answered in ${elapsed} ms (bound ${RUNTIME_SLOW_MS} ms)"
    exit $NONOK
fi
echo "$runtime answered in ${elapsed} ms"
exit $OK
