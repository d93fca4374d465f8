#!/bin/sh
# node-problem-detector custom plugin: is every GPU this node advertises usable?
#
# Exit codes follow the NPD plugin protocol (gpu-plugin-monitor.json names the condition):
# 0 = OK (GPUUnavailable=False), 1 = problem (GPUUnavailable=True), 2 = unknown (the check itself
# could not run: NPD sets the condition Unknown, which NodeHeal does not act on;
# pkg/custompluginmonitor/custom_plugin_monitor.go, generateStatus). The first line of stdout
# becomes the condition message (NPD cuts it at max_output_length, 80 bytes).
#
# Two checks:
#   1. nvidia-smi answers within the timeout (a hung driver makes it block forever);
#   2. the number of GPUs it lists equals the node's nvidia.com/gpu capacity. The capacity comes from
#      EXPECTED_GPU_COUNT or EXPECTED_GPU_FILE when set; otherwise it is the number of NVIDIA display
#      or 3D controllers enumerated on the PCI bus, which is what the device plugin advertised when
#      the node booted. A GPU that fell off the bus stays enumerated on PCI but vanishes from
#      nvidia-smi, so the counts differ.
set -u

NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"
SMI_TIMEOUT="${SMI_TIMEOUT:-30}"
EXPECTED_GPU_FILE="${EXPECTED_GPU_FILE:-/var/run/nodeheal/expected-gpu-count}"
SYSFS_PCI="${SYSFS_PCI:-/sys/bus/pci/devices}"

OK=0
NONOK=1
UNKNOWN=2

if ! command -v "$NVIDIA_SMI" >/dev/null 2>&1; then
    echo "nvidia-smi not found; cannot check GPUs"
    exit $UNKNOWN
fi

output=$(timeout "$SMI_TIMEOUT" "$NVIDIA_SMI" --query-gpu=pci.bus_id --format=csv,noheader 2>&1)
status=$?
if [ $status -eq 124 ]; then
    echo "nvidia-smi did not answer within ${SMI_TIMEOUT}s"
    exit $NONOK
fi
if [ $status -ne 0 ]; then
    echo "nvidia-smi failed ($status): $(echo "$output" | head -n 1)"
    exit $NONOK
fi

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
