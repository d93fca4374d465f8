#!/bin/sh
# node-problem-detector custom plugin: is a GPU too hot, or slowed down for heat or power?
#
# One nvidia-smi query per run: temperature.gpu and the clock event reasons that mean the board
# is protecting itself, not that the job is busy:
#   hw_thermal_slowdown       the hardware slowed the clocks: the GPU is too hot
#   sw_thermal_slowdown       the driver slowed the clocks to keep the GPU under its thermal limit
#   hw_power_brake_slowdown   the external power brake (the power supply or the board) asserted
# sw_power_cap is left out: a busy GPU sits at its power cap in normal operation.
# Drivers before R535 name these fields clocks_throttle_reasons.*; newer ones clocks_event_reasons.*
# (the old names remain as deprecated aliases on some releases, not all). The plugin asks with the
# new names and, when nvidia-smi rejects a field ("is not a valid field to query"), once with the
# old ones. The EKS accelerated AMIs have shipped drivers on both sides of the rename.
#
# Exit codes per NPD's plugin protocol (pkg/custompluginmonitor/plugin/plugin.go, Plugin.run):
# 0 OK, 1 NonOK (GPUThermalThrottling=True), 2 Unknown. nvidia-smi that does not answer, or
# answers with an error, is GPUUnavailable's fault (check_gpu.sh): here it is Unknown, said so,
# so one hung driver is not decided twice. Each query is bounded by timeout -k SMI_KILL_AFTER (5)
# SMI_TIMEOUT (10 s), two at most: inside the rule's 45 s NPD timeout.
set -u

NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"
SMI_TIMEOUT="${SMI_TIMEOUT:-10}"
SMI_KILL_AFTER="${SMI_KILL_AFTER:-5}"
GPU_TEMP_MAX="${GPU_TEMP_MAX:-87}"

OK=0
NONOK=1
UNKNOWN=2

for bound in "$SMI_TIMEOUT" "$SMI_KILL_AFTER" "$GPU_TEMP_MAX"; do
    case "$bound" in
        ''|*[!0-9]*|0*)
            echo "monitor misconfigured: SMI_TIMEOUT=$SMI_TIMEOUT SMI_KILL_AFTER=$SMI_KILL_AFTER GPU_TEMP_MAX=$GPU_TEMP_MAX"
            exit $UNKNOWN
            ;;
    esac
done
if ! command -v "$NVIDIA_SMI" >/dev/null 2>&1; then
    echo "monitor failed: nvidia-smi not found; cannot read GPU temperatures"
    exit $UNKNOWN
fi

query() {
    prefix=$1
    timeout -k "$SMI_KILL_AFTER" "$SMI_TIMEOUT" "$NVIDIA_SMI" --format=csv,noheader,nounits \
        --query-gpu=index,temperature.gpu,$prefix.hw_thermal_slowdown,$prefix.sw_thermal_slowdown,$prefix.hw_power_brake_slowdown 2>&1
}

output=$(query clocks_event_reasons)
status=$?
if [ $status -ne 0 ] && echo "$output" | grep -q "is not a valid field"; then
    output=$(query clocks_throttle_reasons)
    status=$?
fi
case $status in
    0) ;;
    124|137)
        echo "nvidia-smi timed out (${SMI_TIMEOUT}s); thermal state unknown"
        exit $UNKNOWN
        ;;
    *)
        echo "nvidia-smi could not report temperatures ($status): $(echo "$output" | head -n 1)"
        exit $UNKNOWN
        ;;
esac

hot=""
count=0
# Each line: index, temperature, hw thermal, sw thermal, hw power brake ("Active", "Not Active",
# or "[N/A]" where the board does not report it).
while IFS=, read -r index temp hw_thermal sw_thermal power_brake; do
    [ -n "$index" ] || continue
    index=$(echo "$index" | tr -d ' ')
    temp=$(echo "$temp" | tr -d ' ')
    why=""
    case "$hw_thermal" in *"Not Active"*) ;; *Active*) why="$why hw-thermal" ;; esac
    case "$sw_thermal" in *"Not Active"*) ;; *Active*) why="$why sw-thermal" ;; esac
    case "$power_brake" in *"Not Active"*) ;; *Active*) why="$why power-brake" ;; esac
    case "$temp" in
        ''|*[!0-9]*) ;;
        *) [ "$temp" -ge "$GPU_TEMP_MAX" ] && why="$why ${temp}C" ;;
    esac
    if [ -n "$why" ]; then
        count=$((count + 1))
        [ -n "$hot" ] || hot="GPU $index:$why"
    fi
done <<EOT
$output
EOT

if [ "$count" -gt 0 ]; then
    echo "$count GPU(s) throttled or hot; $hot"
    exit $NONOK
fi
echo "no GPU throttled for heat or power, all below ${GPU_TEMP_MAX}C"
exit $OK
