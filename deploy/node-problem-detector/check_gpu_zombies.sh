#!/bin/sh
# node-problem-detector custom plugin: are processes stuck on the GPU driver?
#
# A process in uninterruptible sleep (state D) or defunct (state Z) that still holds /dev/nvidia*
# open is waiting on the driver, which no longer answers it: the GPU's memory and contexts stay
# taken, no signal frees them, and only a reboot does. Exit codes per NPD's plugin protocol
# (pkg/custompluginmonitor/plugin/plugin.go, Plugin.run): 0 OK, 1 NonOK (GPUDriverZombie=True),
# 2 Unknown (the check could not look: /proc unreadable).
#
# Reads /proc only with shell builtins (no fork per process), so a node with thousands of
# processes costs a few ms; the fd links are read only for the D/Z ones. Needs the host's PID
# namespace (hostPID: true in values.yaml) and the right to read other processes' fd links
# (the chart's privileged container). A process is counted when its own state or any of its
# threads' is D or Z (a defunct leader whose threads are stuck in the driver keeps the fds).
#
# The scan runs as a child of this script under `timeout -k 2 SCAN_TIMEOUT` (20 s, inside the
# rule's 30 s NPD timeout): reading a stuck process's /proc entries can block, and a plugin NPD
# has to kill reports nothing useful (Unknown, "Timeout when running plugin"). A scan that does
# not finish ends here, as Unknown with that said: it is not evidence of a GPU fault.
set -u

PROC_ROOT="${PROC_ROOT:-/proc}"
SCAN_TIMEOUT="${SCAN_TIMEOUT:-20}"

OK=0
NONOK=1
UNKNOWN=2

if [ "${1:-}" != "--scan" ]; then
    case "$SCAN_TIMEOUT" in
        ''|*[!0-9]*|0*)
            echo "monitor misconfigured: SCAN_TIMEOUT=$SCAN_TIMEOUT"
            exit $UNKNOWN
            ;;
    esac
    if [ ! -r "$PROC_ROOT/1/stat" ]; then
        echo "monitor failed: cannot read $PROC_ROOT/1/stat (hostPID?)"
        exit $UNKNOWN
    fi
    timeout -k 2 "$SCAN_TIMEOUT" /bin/sh "$0" --scan
    status=$?
    case $status in
        0|1) exit $status ;;
        124|137)
            echo "monitor failed: /proc scan did not finish within ${SCAN_TIMEOUT}s"
            exit $UNKNOWN
            ;;
        *)
            echo "monitor failed: /proc scan exited $status"
            exit $UNKNOWN
            ;;
    esac
fi

stuck=0
first=""
for dir in "$PROC_ROOT"/[0-9]*; do
    [ -d "$dir" ] || continue
    state=""
    for stat in "$dir/stat" "$dir"/task/*/stat; do
        [ -r "$stat" ] || continue
        IFS= read -r line < "$stat" 2>/dev/null || continue
        # stat is "pid (comm) S ...": the state follows the last ") ".
        rest="${line##*) }"
        case "$rest" in
            D*|Z*) state="${rest%% *}"; break ;;
        esac
    done
    [ -n "$state" ] || continue
    for fd in "$dir"/fd/*; do
        target=$(readlink "$fd" 2>/dev/null) || continue
        case "$target" in
            /dev/nvidia*)
                stuck=$((stuck + 1))
                if [ -z "$first" ]; then
                    IFS= read -r comm < "$dir/comm" 2>/dev/null || comm="?"
                    first="${dir##*/} $comm ($state)"
                fi
                break
                ;;
        esac
    done
done

if [ "$stuck" -gt 0 ]; then
    echo "$stuck stuck process(es) hold /dev/nvidia*: $first"
    exit $NONOK
fi
echo "no stuck process holds /dev/nvidia*"
exit $OK
