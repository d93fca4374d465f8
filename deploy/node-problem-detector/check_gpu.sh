#!/bin/sh
# node-problem-detector custom plugin: is every GPU this node advertises usable?
#
# Exit codes follow the NPD plugin protocol (gpu-plugin-monitor.json names the condition):
# 0 = OK (GPUUnavailable=False), 1 = problem (GPUUnavailable=True), 2 = unknown (the check itself
# could not run: NPD sets the condition Unknown, which NodeHeal does not act on;
# pkg/custompluginmonitor/plugin/plugin.go, Plugin.run: exit 0 OK, 1 NonOK, anything else Unknown).
# The first line of stdout becomes the condition message (NPD cuts it at max_output_length, 80 bytes).
#
# Two checks:
#   1. nvidia-smi answers within SMI_TIMEOUT (a hung driver makes it block forever). Not answering
#      and answering with an error are both GPU faults, told apart in the message ("timed out" or
#      "error"). A check that cannot run for its own reasons (nvidia-smi missing or not executable,
#      NVML not injected, no permission, a bad SMI_TIMEOUT) is Unknown: a monitor failure, never a
#      GPU fault.
#   2. the number of GPUs it lists equals the node's nvidia.com/gpu capacity. The capacity comes from
#      EXPECTED_GPU_COUNT or EXPECTED_GPU_FILE when set; otherwise it is the number of NVIDIA display
#      or 3D controllers enumerated on the PCI bus, which is what the device plugin advertised when
#      the node booted. A GPU that fell off the bus stays enumerated on PCI but vanishes from
#      nvidia-smi, so the counts differ.
#
# The probe is bounded by `timeout -k SMI_KILL_AFTER SMI_TIMEOUT`: TERM at SMI_TIMEOUT, KILL
# SMI_KILL_AFTER seconds later for a process that ignores TERM (an nvidia-smi stuck in the driver).
# SMI_TIMEOUT + SMI_KILL_AFTER stays below the rule's NPD timeout (45 s): NPD kills a plugin that
# outlives it and reports Unknown (plugin.go, "Timeout when running plugin"), which would end the
# check with no decision. tests/unit/test_npd_plugins.py holds the two bounds apart.
set -u

NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"
SMI_TIMEOUT="${SMI_TIMEOUT:-30}"
SMI_KILL_AFTER="${SMI_KILL_AFTER:-5}"
EXPECTED_GPU_FILE="${EXPECTED_GPU_FILE:-/var/run/nodeheal/expected-gpu-count}"
SYSFS_PCI="${SYSFS_PCI:-/sys/bus/pci/devices}"

OK=0
NONOK=1
UNKNOWN=2

# Whole seconds above zero (timeout(1) reads 0 as "no limit").
for bound in "$SMI_TIMEOUT" "$SMI_KILL_AFTER"; do
    case "$bound" in
        ''|*[!0-9]*|0*)
            echo "monitor misconfigured: SMI_TIMEOUT=$SMI_TIMEOUT SMI_KILL_AFTER=$SMI_KILL_AFTER"
            exit $UNKNOWN
            ;;
    esac
done
if ! command -v "$NVIDIA_SMI" >/dev/null 2>&1; then
    echo "monitor failed: nvidia-smi not found; cannot check GPUs"
    exit $UNKNOWN
fi

output=$(timeout -k "$SMI_KILL_AFTER" "$SMI_TIMEOUT" "$NVIDIA_SMI" --query-gpu=pci.bus_id --format=csv,noheader 2>&1)
status=$?
first=$(echo "$output" | head -n 1)
# timeout(1): 124 when TERM ended the probe, 128+9 when it had to KILL it, 125 when timeout itself
# failed, 126/127 when nvidia-smi could not be run. nvidia-smi(1), RETURN VALUE: 2 invalid argument,
# 4 no permission, 12 NVML shared library not found: the monitor's setup, not the GPU.
case $status in
    0) ;;
    124|137)
        echo "nvidia-smi timed out: no answer within ${SMI_TIMEOUT}s"
        exit $NONOK
        ;;
    2|4|12|125|126|127)
        echo "monitor failed: nvidia-smi could not run ($status): $first"
        exit $UNKNOWN
        ;;
    *)
        echo "nvidia-smi error ($status): $first"
        exit $NONOK
        ;;
esac

found=$(echo "$output" | grep -c -E '^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]')

expected="${EXPECTED_GPU_COUNT:-}"
if [ -z "$expected" ] && [ -r "$EXPECTED_GPU_FILE" ]; then
    expected=$(tr -d '[:space:]' < "$EXPECTED_GPU_FILE")
fi
if [ -z "$expected" ] && [ -d "$SYSFS_PCI" ]; then
    expected=0
    for device in "$SYSFS_PCI"/*; do
        [ -r "$device/vendor" ] && [ -r "$device/class" ] || continue
        # Vendor 0x10de (NVIDIA); class 0x0300xx (VGA) or 0x0302xx (3D controller). Skips the
        # NVSwitch and audio functions NVIDIA boards also expose.
        if [ "$(cat "$device/vendor")" = "0x10de" ]; then
            case "$(cat "$device/class")" in
                0x0300*|0x0302*) expected=$((expected + 1)) ;;
            esac
        fi
    done
fi
case "$expected" in
    ''|*[!0-9]*|0)
        echo "nvidia-smi OK, $found GPU(s); expected count unknown"
        exit $OK
        ;;
esac

if [ "$found" -ne "$expected" ]; then
    echo "GPU count mismatch: nvidia-smi lists $found, node advertises $expected"
    exit $NONOK
fi
echo "nvidia-smi OK, $found of $expected GPU(s) present"
exit $OK
