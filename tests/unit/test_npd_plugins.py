"""NodeHeal's NPD custom plugins run on recorded inputs: a fake nvidia-smi (ping, getent, crictl...)
on PATH in a temp dir, for the healthy case, the fault, the plugin failing for its own reasons, and
the probe that never answers.

NPD's protocol (``pkg/custompluginmonitor/plugin/plugin.go``, ``Plugin.run``): exit 0 is OK, 1 is
NonOK (the condition turns True), anything else Unknown (NodeHeal does not act on it). A plugin NPD
has to kill at the rule's timeout also reads as Unknown ("Timeout when running plugin"), so each
plugin bounds its own probe well inside that timeout and still decides.
"""

from __future__ import annotations

import json
import os
import re
import socket as sockets
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeheal.policy.classify import DEFAULT_CONDITION_RULES
from nodeheal.sim.detectors import CONDITIONS, Detector

ROOT = Path(__file__).resolve().parents[2]
NPD = ROOT / "deploy" / "node-problem-detector"


def fake_bin(tmp_path: Path, tools: dict[str, str]) -> Path:
    """A directory with one executable shell script per tool (name -> body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in tools.items():
        tool = bin_dir / name
        tool.write_text("#!/bin/sh\n" + body)
        tool.chmod(0o755)
    return bin_dir


def run_plugin(
    script: str, tmp_path: Path, tools: dict[str, str], timeout: float = 30, **env: str
) -> tuple[int, str]:
    bin_dir = fake_bin(tmp_path, tools)
    environment = {"PATH": f"{bin_dir}:{os.environ['PATH']}", **env}
    result = subprocess.run(
        ["/bin/sh", str(NPD / script)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    return result.returncode, lines[0] if lines else ""


def plugin_monitor(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((NPD / name).read_text())
    return loaded


def script_default(script: str, variable: str) -> int:
    match = re.search(rf'^{variable}="\$\{{{variable}:-([0-9]+)\}}"$', (NPD / script).read_text(), re.M)
    assert match, f"{script} has no numeric default for {variable}"
    return int(match.group(1))


#: Seconds a script spends in bounded steps other than its probe's variables: the HOST_EXEC
#: check and socket tests (timeout -k 1 2 each), the /proc scan's kill-after.
FIXED_BOUNDS = {
    "check_gpu_zombies.sh": 2,
    "check_gateway.sh": 3,
    "check_runtime.sh": 6,
}


def seconds(duration: str) -> int:
    assert duration.endswith("s") and duration[:-1].isdigit(), duration
    return int(duration[:-1])


# --- check_gpu.sh: nvidia-smi answers, within a bound ----------------------------------------

ONE_GPU = "echo 00000000:3B:00.0\n"


def test_gpu_check_healthy(tmp_path: Path) -> None:
    assert run_plugin("check_gpu.sh", tmp_path, {"nvidia-smi": ONE_GPU}, EXPECTED_GPU_COUNT="1") == (
        0,
        "nvidia-smi OK, 1 of 1 GPU(s) present",
    )


def test_gpu_check_tells_an_error_answer_from_no_answer(tmp_path: Path) -> None:
    # nvidia-smi(1) exit 15: the GPU has fallen off the bus or is otherwise inaccessible.
    error = "echo 'Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error'\nexit 15\n"
    code, out = run_plugin("check_gpu.sh", tmp_path, {"nvidia-smi": error})
    assert (code, out) == (
        1,
        "nvidia-smi error (15): Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error",
    )
    # exit 9: the driver is not loaded, a GPU fault too (the node's GPUs are unusable).
    code, out = run_plugin("check_gpu.sh", tmp_path, {"nvidia-smi": "echo 'NVIDIA-SMI has failed'\nexit 9\n"})
    assert (code, out) == (1, "nvidia-smi error (9): NVIDIA-SMI has failed")
    code, out = run_plugin("check_gpu.sh", tmp_path, {"nvidia-smi": "sleep 10\n"}, SMI_TIMEOUT="1")
    assert (code, out) == (1, "nvidia-smi timed out: no answer within 1s")


def test_gpu_check_decides_even_when_the_probe_ignores_term(tmp_path: Path) -> None:
    """A process stuck in the driver does not die on TERM; the kill-after ends it and the plugin
    still reports the timeout, well before NPD's own timeout would kill the plugin (Unknown)."""
    wedged = "trap '' TERM\nsleep 20 &\nwait\nwait\n"
    started = time.monotonic()
    code, out = run_plugin(
        "check_gpu.sh", tmp_path, {"nvidia-smi": wedged}, SMI_TIMEOUT="1", SMI_KILL_AFTER="1"
    )
    assert (code, out) == (1, "nvidia-smi timed out: no answer within 1s")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("tools", "env", "expected"),
    [
        # The binary is missing.
        ({}, {"NVIDIA_SMI": "nvidia-smi-missing"}, "monitor failed: nvidia-smi not found; cannot check GPUs"),
        # NVML was not injected into the container (nvidia-smi(1) exit 12).
        (
            {
                "nvidia-smi": 'echo "NVIDIA-SMI couldn\'t find libnvidia-ml.so library in your system."\nexit 12\n'
            },
            {},
            "monitor failed: nvidia-smi could not run (12): NVIDIA-SMI couldn't find libnvidia-ml.so",
        ),
        # No permission on the device (exit 4).
        (
            {"nvidia-smi": "echo 'Insufficient Permissions'\nexit 4\n"},
            {},
            "monitor failed: nvidia-smi could not run (4): Insufficient Permissions",
        ),
        # A bad bound in the plugin's own configuration.
        (
            {"nvidia-smi": ONE_GPU},
            {"SMI_TIMEOUT": "thirty"},
            "monitor misconfigured: SMI_TIMEOUT=thirty SMI_KILL_AFTER=5",
        ),
        (
            {"nvidia-smi": ONE_GPU},
            {"SMI_TIMEOUT": "0"},
            "monitor misconfigured: SMI_TIMEOUT=0 SMI_KILL_AFTER=5",
        ),
    ],
    ids=["missing", "no-nvml", "no-permission", "bad-timeout", "zero-timeout"],
)
def test_gpu_check_failing_for_its_own_reasons_is_unknown(
    tmp_path: Path, tools: dict[str, str], env: dict[str, str], expected: str
) -> None:
    code, out = run_plugin("check_gpu.sh", tmp_path, tools, **env)
    assert code == 2
    assert out.startswith(expected)


def test_gpu_check_non_executable_nvidia_smi_is_unknown(tmp_path: Path) -> None:
    bin_dir = fake_bin(tmp_path, {})
    smi = bin_dir / "nvidia-smi-noexec"
    smi.write_text("#!/bin/sh\necho 00000000:3B:00.0\n")
    smi.chmod(0o644)
    code, out = run_plugin("check_gpu.sh", tmp_path, {}, NVIDIA_SMI=str(smi))
    assert code == 2 and out.startswith("monitor failed:"), out


@pytest.mark.parametrize(
    ("monitor", "script", "bounds"),
    [
        ("gpu-plugin-monitor.json", "check_gpu.sh", ("SMI_TIMEOUT", "SMI_KILL_AFTER")),
        # 2: the scan's kill-after.
        ("gpu-zombie-monitor.json", "check_gpu_zombies.sh", ("SCAN_TIMEOUT",)),
        # Two queries at most (new field names, then the old ones), each TERM then KILL.
        (
            "gpu-thermal-monitor.json",
            "check_gpu_thermal.sh",
            ("SMI_TIMEOUT", "SMI_KILL_AFTER", "SMI_TIMEOUT", "SMI_KILL_AFTER"),
        ),
        ("dns-monitor.json", "check_dns.sh", ("DNS_TIMEOUT", "DNS_KILL_AFTER")),
        ("gateway-monitor.json", "check_gateway.sh", ("PING_TIMEOUT", "PING_KILL_AFTER")),
        ("runtime-monitor.json", "check_runtime.sh", ("RUNTIME_TIMEOUT", "RUNTIME_KILL_AFTER")),
    ],
)
def test_each_plugin_ends_its_probe_before_npd_kills_it(
    monitor: str, script: str, bounds: tuple[str, ...]
) -> None:
    """The probe's TERM plus KILL bound, with a few seconds for the script itself, fits inside the
    rule's NPD timeout (the smaller of the rule's and the plugin config's: plugin.go, Plugin.run)."""
    config = plugin_monitor(monitor)
    (rule,) = [r for r in config["rules"] if r["path"].endswith(script)]
    npd_timeout = min(seconds(rule["timeout"]), seconds(config["pluginConfig"]["timeout"]))
    worst = sum(script_default(script, variable) for variable in bounds) + FIXED_BOUNDS.get(script, 0)
    assert worst + 5 <= npd_timeout, (script, worst, npd_timeout)
    assert npd_timeout < seconds(config["pluginConfig"]["invoke_interval"])


# --- check_gpu_zombies.sh: processes stuck on the driver -------------------------------------


def fake_proc(root: Path, processes: dict[int, tuple[str, str, list[str], list[str]]]) -> Path:
    """A /proc with ``pid -> (comm, state, thread states, fd targets)``, laid out as the kernel does:
    ``stat`` is ``pid (comm) S ...``, ``fd/N`` are symlinks, ``task/TID/stat`` per thread."""
    for pid, (comm, state, threads, fds) in processes.items():
        directory = root / str(pid)
        (directory / "fd").mkdir(parents=True)
        (directory / "stat").write_text(f"{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560\n")
        (directory / "comm").write_text(comm + "\n")
        for index, thread_state in enumerate(threads):
            task = directory / "task" / str(pid + index + 1)
            task.mkdir(parents=True)
            (task / "stat").write_text(f"{pid + index + 1} ({comm}) {thread_state} 1\n")
        for number, target in enumerate(fds):
            (directory / "fd" / str(number)).symlink_to(target)
    return root


HEALTHY_PROC = {
    1: ("systemd", "S", [], ["/dev/null"]),
    # A training process mid-ioctl is in D state for a moment; sleeping with the GPU open is normal.
    4123: ("python3", "S", ["R", "S"], ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]),
    # A process in D state on the disk, with no GPU open, is not this check's fault.
    777: ("jbd2/nvme0n1p1-8", "D", [], []),
}


def run_zombies(
    tmp_path: Path, processes: dict[int, tuple[str, str, list[str], list[str]]], **env: str
) -> tuple[int, str]:
    proc = fake_proc(tmp_path / "proc", processes)
    return run_plugin("check_gpu_zombies.sh", tmp_path, {}, PROC_ROOT=str(proc), **env)


def test_zombie_check_healthy(tmp_path: Path) -> None:
    assert run_zombies(tmp_path, HEALTHY_PROC) == (0, "no stuck process holds /dev/nvidia*")


def test_zombie_check_finds_a_d_state_process_holding_the_gpu(tmp_path: Path) -> None:
    stuck = {
        **HEALTHY_PROC,
        9001: ("pt_main_thread", "D", [], ["/dev/null", "/dev/nvidia3", "/dev/nvidiactl"]),
    }
    assert run_zombies(tmp_path, stuck) == (
        1,
        "1 stuck process(es) hold /dev/nvidia*: 9001 pt_main_thread (D)",
    )


def test_zombie_check_finds_a_defunct_leader_whose_thread_holds_the_gpu(tmp_path: Path) -> None:
    defunct = {**HEALTHY_PROC, 9002: ("python3", "S", ["Z", "D"], ["/dev/nvidia-uvm"])}
    assert run_zombies(tmp_path, defunct) == (1, "1 stuck process(es) hold /dev/nvidia*: 9002 python3 (Z)")


def test_zombie_check_unreadable_proc_is_a_monitor_failure(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, out = run_plugin("check_gpu_zombies.sh", tmp_path, {}, PROC_ROOT=str(tmp_path / "empty"))
    assert (code, out) == (2, f"monitor failed: cannot read {tmp_path / 'empty'}/1/stat (hostPID?)")
    code, out = run_zombies(tmp_path, HEALTHY_PROC, SCAN_TIMEOUT="soon")
    assert (code, out) == (2, "monitor misconfigured: SCAN_TIMEOUT=soon")


def test_zombie_check_decides_when_the_scan_blocks(tmp_path: Path) -> None:
    """A /proc entry whose read blocks (here a FIFO nobody writes) stalls the scan: the plugin ends
    it at SCAN_TIMEOUT and says so, as Unknown, before NPD's timeout would kill the plugin."""
    proc = fake_proc(tmp_path / "proc", HEALTHY_PROC)
    blocking = proc / "5000"
    blocking.mkdir()
    os.mkfifo(blocking / "stat")
    started = time.monotonic()
    code, out = run_plugin("check_gpu_zombies.sh", tmp_path, {}, PROC_ROOT=str(proc), SCAN_TIMEOUT="1")
    assert (code, out) == (2, "monitor failed: /proc scan did not finish within 1s")
    assert time.monotonic() - started < 10


# --- check_gpu_thermal.sh: temperature and clock event reasons -----------------------------------

#: nvidia-smi --query-gpu=index,temperature.gpu,<reasons> --format=csv,noheader,nounits on an
#: 8-GPU node, as R535+ prints it (the reasons are "Active" or "Not Active").
COOL = "".join(f"{i}, {40 + i}, Not Active, Not Active, Not Active\n" for i in range(8))
HOT = COOL.replace("3, 43, Not Active, Not Active", "3, 91, Active, Not Active")
BRAKED = COOL.replace("0, 40, Not Active, Not Active, Not Active", "0, 55, Not Active, Not Active, Active")
#: A driver before the rename rejects the new field names (nvidia-smi exit 2).
OLD_DRIVER = """case "$*" in
  *clocks_event_reasons*) echo 'Field "clocks_event_reasons.hw_thermal_slowdown" is not a valid field to query.'; exit 2 ;;
esac
cat <<'EOT'
{rows}EOT
"""


def smi_printing(rows: str) -> str:
    return f"cat <<'EOT'\n{rows}EOT\n"


def test_thermal_check_healthy(tmp_path: Path) -> None:
    assert run_plugin("check_gpu_thermal.sh", tmp_path, {"nvidia-smi": smi_printing(COOL)}) == (
        0,
        "no GPU throttled for heat or power, all below 87C",
    )


def test_thermal_check_finds_a_hot_throttled_gpu_and_the_power_brake(tmp_path: Path) -> None:
    code, out = run_plugin("check_gpu_thermal.sh", tmp_path, {"nvidia-smi": smi_printing(HOT)})
    assert (code, out) == (1, "1 GPU(s) throttled or hot; GPU 3: hw-thermal 91C")
    code, out = run_plugin("check_gpu_thermal.sh", tmp_path, {"nvidia-smi": smi_printing(BRAKED)})
    assert (code, out) == (1, "1 GPU(s) throttled or hot; GPU 0: power-brake")
    # Hot without a slowdown yet: the temperature bound alone.
    code, out = run_plugin(
        "check_gpu_thermal.sh", tmp_path, {"nvidia-smi": smi_printing(COOL)}, GPU_TEMP_MAX="45"
    )
    assert (code, out) == (1, "3 GPU(s) throttled or hot; GPU 5: 45C")


def test_thermal_check_reads_the_old_field_names_on_older_drivers(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    old = f'echo "$*" >> {calls}\n' + OLD_DRIVER.replace("{rows}", HOT)
    code, out = run_plugin("check_gpu_thermal.sh", tmp_path, {"nvidia-smi": old})
    assert (code, out) == (1, "1 GPU(s) throttled or hot; GPU 3: hw-thermal 91C")
    first, second = calls.read_text().splitlines()
    assert "clocks_event_reasons.hw_thermal_slowdown" in first
    assert "clocks_throttle_reasons.hw_thermal_slowdown" in second
    assert "clocks_throttle_reasons.hw_power_brake_slowdown" in second


def test_thermal_check_unsupported_fields_read_as_not_throttled(tmp_path: Path) -> None:
    na = "".join(f"{i}, 50, [N/A], [N/A], [N/A]\n" for i in range(2))
    assert run_plugin("check_gpu_thermal.sh", tmp_path, {"nvidia-smi": smi_printing(na)})[0] == 0


@pytest.mark.parametrize(
    ("tools", "env", "expected"),
    [
        ({}, {"NVIDIA_SMI": "nvidia-smi-missing"}, "monitor failed: nvidia-smi not found"),
        (
            {"nvidia-smi": smi_printing(COOL)},
            {"GPU_TEMP_MAX": "hot"},
            "monitor misconfigured: SMI_TIMEOUT=10 SMI_KILL_AFTER=5 GPU_TEMP_MAX=hot",
        ),
        # nvidia-smi answering with an error is GPUUnavailable's to decide, not a thermal fault.
        (
            {"nvidia-smi": "echo 'No devices were found'\nexit 6\n"},
            {},
            "nvidia-smi could not report temperatures (6): No devices were found",
        ),
        # So is one that does not answer, even to TERM: the plugin ends it and says so. The fake
        # hangs 30 s, far past the 1 s bound plus the 1 s kill-after.
        (
            {"nvidia-smi": "trap '' TERM\nsleep 30 &\nwait\nwait\n"},
            {"SMI_TIMEOUT": "1", "SMI_KILL_AFTER": "1"},
            "nvidia-smi timed out (1s); thermal state unknown",
        ),
    ],
    ids=["missing", "bad-config", "smi-error", "smi-timeout"],
)
def test_thermal_check_unknown_when_it_cannot_read(
    tmp_path: Path, tools: dict[str, str], env: dict[str, str], expected: str
) -> None:
    code, out = run_plugin("check_gpu_thermal.sh", tmp_path, tools, **env)
    assert code == 2
    assert out.startswith(expected)


# --- check_gateway.sh: the default gateway answers ping, and did earlier on this boot ----------

#: /proc/net/route of an EKS node: the default route via 172.31.64.1 (little-endian hex), then
#: the subnet's own route.
ROUTES = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "ens5\t00000000\t01401FAC\t0003\t0\t0\t512\t00000000\t0\t0\t0\n"
    "ens5\t00401FAC\t00000000\t0001\t0\t0\t512\t00F0FFFF\t0\t0\t0\n"
)
#: /proc/sys/kernel/random/boot_id on this boot, and on an earlier one.
BOOT_ID = "2f6a3b1c-9d4e-4f7a-8b2c-5e1d0a9c7b36"
EARLIER_BOOT_ID = "0c1d2e3f-4a5b-4c6d-8e7f-901a2b3c4d5e"
#: iputils ping's summary, as `ping -n -q -c 3` prints it.
PING_OK = (
    'echo "$*" > "$(dirname "$0")/../ping-args"\n'
    "echo 'PING 172.31.64.1 (172.31.64.1) 56(84) bytes of data.'\n"
    "echo '3 packets transmitted, 3 received, 0% packet loss, time 2003ms'\n"
)
PING_LOST = (
    "echo 'PING 172.31.64.1 (172.31.64.1) 56(84) bytes of data.'\n"
    "echo '3 packets transmitted, 0 received, 100% packet loss, time 2040ms'\nexit 1\n"
)
#: Stands in for util-linux nsenter: drops its options up to ``--`` and runs the command, as
#: ``nsenter --target 1 --mount --`` does (exec in place: no --pid, so no fork).
NSENTER = 'while [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n'
#: nsenter without hostPID or privilege (util-linux exits 1, as ping does for no reply).
NSENTER_DENIED = 'echo "nsenter: cannot open /proc/1/ns/mnt: Permission denied" >&2\nexit 1\n'


def shipped_env(name: str) -> str:
    """An environment variable as values.yaml sets it for the NPD container."""
    values = yaml.safe_load((NPD / "values.yaml").read_text())
    (value,) = [e["value"] for e in values["env"] if e["name"] == name]
    return str(value)


def run_gateway(
    tmp_path: Path,
    ping: str | None,
    routes: str = ROUTES,
    tools: dict[str, str] | None = None,
    **env: str,
) -> tuple[int, str]:
    route_file = tmp_path / "route"
    route_file.write_text(routes)
    boot_id = tmp_path / "boot_id"
    if not boot_id.exists():
        boot_id.write_text(BOOT_ID + "\n")
    tools = {**({"ping": ping} if ping is not None else {}), **(tools or {})}
    env.setdefault("PING", "ping")
    env.setdefault("BOOT_ID_FILE", str(boot_id))
    env.setdefault("GATEWAY_STATE_FILE", str(tmp_path / "state" / "gateway-baseline"))
    return run_plugin("check_gateway.sh", tmp_path, tools, ROUTE_FILE=str(route_file), **env)


def test_gateway_check_healthy_pings_the_default_route_and_records_it_for_this_boot(
    tmp_path: Path,
) -> None:
    assert run_gateway(tmp_path, PING_OK) == (0, "gateway 172.31.64.1 answers ping")
    assert (tmp_path / "ping-args").read_text().split() == [
        "-n",
        "-q",
        "-c",
        "3",
        "-W",
        "2",
        "-w",
        "6",
        "172.31.64.1",
    ]
    assert (tmp_path / "state" / "gateway-baseline").read_text() == f"{BOOT_ID} 172.31.64.1\n"
    # Already recorded: the next answer leaves the record as it is.
    assert run_gateway(tmp_path, PING_OK) == (0, "gateway 172.31.64.1 answers ping")
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["gateway-baseline"]


def test_gateway_check_no_reply_after_answers_on_this_boot_is_the_fault(tmp_path: Path) -> None:
    assert run_gateway(tmp_path, PING_OK)[0] == 0
    assert run_gateway(tmp_path, PING_LOST) == (
        1,
        "gateway 172.31.64.1 unreachable: no reply to 3 pings, answered this boot",
    )


@pytest.mark.parametrize(
    "recorded",
    [None, f"{EARLIER_BOOT_ID} 172.31.64.1\n", f"{BOOT_ID} 172.31.0.1\n"],
    ids=["never", "an-earlier-boot", "another-gateway"],
)
def test_gateway_check_no_reply_without_an_answer_this_boot_asks_for_icmp(
    tmp_path: Path, recorded: str | None
) -> None:
    """A VPC whose router never answers this node (security group egress without ICMP, a network
    ACL) would make every node report the fault: Unknown instead, saying what to allow."""
    state = tmp_path / "state" / "gateway-baseline"
    if recorded is not None:
        state.parent.mkdir()
        state.write_text(recorded)
    code, out = run_gateway(tmp_path, PING_LOST)
    assert (code, out) == (2, "monitor failed: allow ICMP to VPC router 172.31.64.1: no ping reply this boot")
    # NPD keeps the first max_output_length characters of the message: the advice is in them.
    assert len(out) <= plugin_monitor("gateway-monitor.json")["pluginConfig"]["max_output_length"]


def test_gateway_check_runs_the_nodes_ping_through_host_exec(tmp_path: Path) -> None:
    """values.yaml's HOST_EXEC (nsenter into the node's mount namespace) runs the node's ping; the
    image has none. nsenter failing, or the node without ping, is the monitor's failure."""
    host_exec = shipped_env("HOST_EXEC")
    assert host_exec.split()[0] == "nsenter"
    code, out = run_gateway(tmp_path, PING_OK, tools={"nsenter": NSENTER}, HOST_EXEC=host_exec)
    assert (code, out) == (0, "gateway 172.31.64.1 answers ping")
    assert (tmp_path / "ping-args").read_text().split()[-1] == "172.31.64.1"
    code, out = run_gateway(tmp_path, PING_LOST, tools={"nsenter": NSENTER_DENIED}, HOST_EXEC=host_exec)
    assert (code, out) == (
        2,
        "monitor failed: HOST_EXEC cannot run: nsenter: cannot open /proc/1/ns/mnt: Permission denied",
    )
    code, out = run_gateway(
        tmp_path, None, tools={"nsenter": NSENTER}, HOST_EXEC=host_exec, PING="ping-missing"
    )
    assert (code, out) == (2, "monitor failed: ping not found or not executable (127)")
    code, out = run_gateway(tmp_path, PING_OK, HOST_EXEC="nsenter-missing --")
    assert (code, out) == (2, "monitor failed: nsenter-missing not found (HOST_EXEC)")


def test_gateway_check_failing_to_record_or_read_the_boot_is_unknown(tmp_path: Path) -> None:
    # Run as root, no permission bit stops the write: a regular file where the directory should be.
    (tmp_path / "not-a-directory").write_text("")
    code, out = run_gateway(
        tmp_path, PING_OK, GATEWAY_STATE_FILE=str(tmp_path / "not-a-directory" / "gateway-baseline")
    )
    assert (code, out) == (2, f"monitor failed: cannot write {tmp_path}/not-a-directory/gateway-baseline")
    code, out = run_gateway(tmp_path, PING_OK, BOOT_ID_FILE=str(tmp_path / "no-boot-id"))
    assert (code, out) == (2, f"monitor failed: cannot read {tmp_path}/no-boot-id")


@pytest.mark.parametrize(
    ("ping", "routes", "env", "expected"),
    [
        (None, ROUTES, {"PING": "ping-missing"}, "monitor failed: ping not found"),
        # Without NET_RAW (no privileged container, no hostNetwork capability) iputils exits 2.
        (
            "echo 'ping: socket: Operation not permitted' >&2\nexit 2\n",
            ROUTES,
            {},
            "monitor failed: ping 172.31.64.1 could not run (2): ping: socket: Operation not permitted",
        ),
        (PING_OK, ROUTES.splitlines(keepends=True)[0], {}, "monitor failed: no IPv4 default route in"),
        (PING_OK, ROUTES, {"PING_TIMEOUT": "ten"}, "monitor misconfigured: PING_DEADLINE=6 PING_TIMEOUT=ten"),
    ],
    ids=["missing", "no-net-raw", "no-default-route", "bad-bound"],
)
def test_gateway_check_failing_for_its_own_reasons_is_unknown(
    tmp_path: Path, ping: str | None, routes: str, env: dict[str, str], expected: str
) -> None:
    code, out = run_gateway(tmp_path, ping, routes, **env)
    assert code == 2
    assert out.startswith(expected)


def test_gateway_check_decides_when_ping_hangs(tmp_path: Path) -> None:
    """A ping that ignores TERM and would hang 30 s is ended at the 1 s bound plus the 1 s
    kill-after: the plugin still decides (Unknown), long before the fake would have returned."""
    started = time.monotonic()
    code, out = run_gateway(
        tmp_path, "trap '' TERM\nsleep 30 &\nwait\nwait\n", PING_TIMEOUT="1", PING_KILL_AFTER="1"
    )
    assert (code, out) == (2, "monitor failed: ping 172.31.64.1 hung past its 6s deadline")
    assert time.monotonic() - started < 20


def test_gateway_check_ping_ends_itself_before_its_outer_bound() -> None:
    """ping's own deadline (-w) comes first, so a lost gateway is a no-reply exit 1, not a kill."""
    assert script_default("check_gateway.sh", "PING_DEADLINE") < script_default(
        "check_gateway.sh", "PING_TIMEOUT"
    )


# --- check_dns.sh: the configured name resolves ------------------------------------------------


def run_dns(tmp_path: Path, getent: str | None, **env: str) -> tuple[int, str]:
    tools = {"getent": getent} if getent is not None else {}
    env.setdefault("DNS_CHECK_NAME", "sts.amazonaws.com")
    env.setdefault("GETENT", "getent")
    return run_plugin("check_dns.sh", tmp_path, tools, **env)


def test_dns_check_healthy(tmp_path: Path) -> None:
    answer = "echo '52.94.241.129   STREAM sts.amazonaws.com'\n"
    assert run_dns(tmp_path, answer) == (0, "sts.amazonaws.com resolves")


def test_dns_check_tells_a_failed_lookup_from_a_silent_resolver(tmp_path: Path) -> None:
    # getent(1): exit 2, "One or more supplied key could not be found in the database".
    assert run_dns(tmp_path, "exit 2\n") == (1, "DNS: sts.amazonaws.com does not resolve")
    # A resolver that ignores TERM and would hang 30 s, against a 1 s bound and 1 s kill-after.
    started = time.monotonic()
    assert run_dns(tmp_path, HANGS, DNS_TIMEOUT="1", DNS_KILL_AFTER="1") == (
        1,
        "DNS: no answer for sts.amazonaws.com within 1s",
    )
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    ("getent", "env", "expected"),
    [
        (None, {"GETENT": "getent-missing"}, "monitor failed: getent not found"),
        ("exit 0\n", {"DNS_CHECK_NAME": ""}, "monitor misconfigured: DNS_CHECK_NAME is not set"),
        ("exit 0\n", {"DNS_TIMEOUT": "ten"}, "monitor misconfigured: DNS_TIMEOUT=ten"),
        ("exit 0\n", {"DNS_KILL_AFTER": "0"}, "monitor misconfigured: DNS_TIMEOUT=10 DNS_KILL_AFTER=0"),
        (
            "echo 'Unknown database: ahosts' >&2\nexit 1\n",
            {},
            "monitor failed: getent could not run (1): Unknown database",
        ),
    ],
    ids=["missing", "no-name", "bad-timeout", "zero-kill-after", "getent-error"],
)
def test_dns_check_failing_for_its_own_reasons_is_unknown(
    tmp_path: Path, getent: str | None, env: dict[str, str], expected: str
) -> None:
    code, out = run_dns(tmp_path, getent, **env)
    assert code == 2
    assert out.startswith(expected)


# --- check_runtime.sh: containerd (or Docker) answers on its socket within a bound --------------


def run_runtime(
    tmp_path: Path,
    tool: str | None,
    socket: str | None = "containerd",
    tools: dict[str, str] | None = None,
    **env: str,
) -> tuple[int, str]:
    """Runs the plugin with one listening socket, containerd's or Docker's (or none), and a fake
    ctr or curl (whichever the socket calls for)."""
    paths = {"containerd": tmp_path / "containerd.sock", "docker": tmp_path / "docker.sock"}
    listener = None
    if socket is not None:
        listener = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
        listener.bind(str(paths[socket]))
    name = "curl" if socket == "docker" else "ctr"
    tools = {**({name: tool} if tool is not None else {}), **(tools or {})}
    env.setdefault("CTR", "ctr")
    env.setdefault("CURL", "curl")
    try:
        return run_plugin(
            "check_runtime.sh",
            tmp_path,
            tools,
            RUNTIME_SOCKET=str(paths["containerd"]),
            DOCKER_SOCKET=str(paths["docker"]),
            **env,
        )
    finally:
        if listener is not None:
            listener.close()
            paths[socket].unlink()


CTR_VERSION = "echo 'Client:'\necho '  Version:  1.7.27'\necho 'Server:'\necho '  Version:  1.7.27'\n"
#: curl -sS -o /dev/null -w '%{http_code}\n' ...: Docker's /_ping answers "OK" with HTTP 200.
DOCKER_PING = 'echo "$*" > "$(dirname "$0")/../curl-args"\necho 200\n'
#: A fake that ignores TERM and would hang 30 s: far past a 1 s bound plus a 1 s kill-after.
HANGS = "trap '' TERM\nsleep 30 &\nwait\nwait\n"
#: Bounds for the healthy runs, so a slow start of the fake on a loaded machine is not "slow".
GENEROUS = {"RUNTIME_SLOW_MS": "60000"}


def test_runtime_check_healthy(tmp_path: Path) -> None:
    code, out = run_runtime(tmp_path, CTR_VERSION, **GENEROUS)
    assert code == 0 and re.fullmatch(r"containerd answered in [0-9]+ ms", out), out


def test_runtime_check_slow_refused_and_silent_are_the_fault(tmp_path: Path) -> None:
    # 1 s asleep against a 100 ms bound: slow whatever the machine's load.
    code, out = run_runtime(tmp_path, "sleep 1\n" + CTR_VERSION, RUNTIME_SLOW_MS="100")
    assert code == 1 and re.fullmatch(r"containerd answered in [0-9]{4,} ms \(bound 100 ms\)", out), out
    refused = (
        'echo \'ctr: failed to dial "/run/containerd/containerd.sock": connection error: desc = '
        '"transport: error while dialing: dial unix /run/containerd/containerd.sock: connect: '
        "connection refused\"' >&2\nexit 1\n"
    )
    code, out = run_runtime(tmp_path, refused, **GENEROUS)
    assert code == 1 and out.startswith(
        'containerd not answering (1): ctr: failed to dial "/run/containerd'
    ), out
    started = time.monotonic()
    code, out = run_runtime(tmp_path, HANGS, RUNTIME_TIMEOUT="1", RUNTIME_KILL_AFTER="1")
    assert (code, out) == (1, "containerd did not answer within 1s")
    assert time.monotonic() - started < 20


def test_runtime_check_asks_docker_when_containerds_socket_is_absent(tmp_path: Path) -> None:
    code, out = run_runtime(tmp_path, DOCKER_PING, socket="docker", **GENEROUS)
    assert code == 0 and re.fullmatch(r"docker answered in [0-9]+ ms", out), out
    assert (tmp_path / "curl-args").read_text().split() == [
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--unix-socket",
        str(tmp_path / "docker.sock"),
        "http://localhost/_ping",
    ]


def test_docker_slow_refused_silent_and_failing_are_the_fault(tmp_path: Path) -> None:
    code, out = run_runtime(tmp_path, "sleep 1\necho 200\n", socket="docker", RUNTIME_SLOW_MS="100")
    assert code == 1 and re.fullmatch(r"docker answered in [0-9]{4,} ms \(bound 100 ms\)", out), out
    # curl(1) exit 7: the connection failed (the daemon is gone, its socket left behind).
    refused = (
        "echo 'curl: (7) Failed to connect to localhost port 80 after 0 ms: "
        "Couldn'\"'\"'t connect to server' >&2\nexit 7\n"
    )
    code, out = run_runtime(tmp_path, refused, socket="docker", **GENEROUS)
    assert (code, out) == (
        1,
        "docker not answering (7): curl: (7) Failed to connect to localhost port 80 after 0 ms: "
        "Couldn't connect to server",
    )
    code, out = run_runtime(tmp_path, "echo 500\n", socket="docker", **GENEROUS)
    assert (code, out) == (1, "docker answered /_ping with HTTP 500")
    started = time.monotonic()
    code, out = run_runtime(tmp_path, HANGS, socket="docker", RUNTIME_TIMEOUT="1", RUNTIME_KILL_AFTER="1")
    assert (code, out) == (1, "docker did not answer within 1s")
    assert time.monotonic() - started < 20


def test_runtime_check_runs_the_nodes_tools_through_host_exec(tmp_path: Path) -> None:
    """values.yaml's HOST_EXEC (nsenter into the node's mount namespace) runs the node's ctr and
    curl and looks for the sockets there; the image has neither tool."""
    host_exec = shipped_env("HOST_EXEC")
    nsenter = {"nsenter": NSENTER}
    code, out = run_runtime(tmp_path, CTR_VERSION, tools=nsenter, HOST_EXEC=host_exec, **GENEROUS)
    assert code == 0 and out.startswith("containerd answered in "), out
    code, out = run_runtime(
        tmp_path, DOCKER_PING, socket="docker", tools=nsenter, HOST_EXEC=host_exec, **GENEROUS
    )
    assert code == 0 and out.startswith("docker answered in "), out
    # nsenter itself failing is not "no socket", and not the runtime's fault.
    code, out = run_runtime(tmp_path, CTR_VERSION, tools={"nsenter": NSENTER_DENIED}, HOST_EXEC=host_exec)
    assert code == 2 and out.startswith(
        f"monitor failed: cannot look for {tmp_path}/containerd.sock (1): nsenter: cannot open"
    ), out
    # The node without ctr: nsenter exits 127 ("failed to execute").
    code, out = run_runtime(tmp_path, None, tools=nsenter, HOST_EXEC=host_exec, CTR="ctr-missing")
    assert (code, out) == (2, "monitor failed: ctr-missing not found or not executable (127)")


@pytest.mark.parametrize(
    ("tool", "socket", "env", "expected"),
    [
        (None, "containerd", {"CTR": "ctr-missing"}, "monitor failed: ctr-missing not found"),
        (None, "docker", {"CURL": "curl-missing"}, "monitor failed: curl-missing not found"),
        # Neither socket here: not mounted, not visible, or no runtime to check.
        (CTR_VERSION, None, {}, "monitor failed: no runtime socket: "),
        (
            "echo 'ctr: failed to dial: connect: permission denied' >&2\nexit 1\n",
            "containerd",
            {},
            "monitor failed: no permission on ",
        ),
        (
            "echo 'curl: (7) Failed to connect to localhost port 80 after 0 ms: Permission denied' >&2\n"
            "exit 7\n",
            "docker",
            {},
            "monitor failed: no permission on ",
        ),
        (
            CTR_VERSION,
            "containerd",
            {"RUNTIME_SLOW_MS": "fast"},
            "monitor misconfigured: RUNTIME_SLOW_MS=fast",
        ),
        (
            CTR_VERSION,
            "containerd",
            {"RUNTIME_KILL_AFTER": "0"},
            "monitor misconfigured: RUNTIME_SLOW_MS=2000 RUNTIME_TIMEOUT=15 RUNTIME_KILL_AFTER=0",
        ),
    ],
    ids=[
        "ctr-missing",
        "curl-missing",
        "no-socket",
        "permission",
        "docker-permission",
        "bad-bound",
        "zero-kill-after",
    ],
)
def test_runtime_check_failing_for_its_own_reasons_is_unknown(
    tmp_path: Path, tool: str | None, socket: str | None, env: dict[str, str], expected: str
) -> None:
    code, out = run_runtime(tmp_path, tool, socket, **env)
    assert code == 2
    assert out.startswith(expected)


# --- The docs list every detector with its default ---------------------------------------------


def test_every_npd_condition_is_in_the_detector_table_and_the_readme_with_its_default() -> None:
    operations = (ROOT / "docs" / "operations.md").read_text()
    table = operations[operations.index("#### The detectors, their cost and their decision") :]
    table = table[: table.index("\n\n", table.index("| condition (reason)"))]
    readme = (ROOT / "README.md").read_text()
    npd = (Detector.NPD_LOG_MONITOR, Detector.NPD_CUSTOM_PLUGIN)
    for condition_type, owner in CONDITIONS.items():
        if owner.detector not in npd:
            continue
        rule = DEFAULT_CONDITION_RULES[condition_type]
        rows = [line for line in table.splitlines() if f"`{condition_type}`" in line]
        assert rows, f"{condition_type} is not in operations.md's detector table"
        assert any(rule.action.value in row for row in rows), (condition_type, rule.action.value)
        readme_rows = [
            line for line in readme.splitlines() if line.startswith("|") and f"`{condition_type}`" in line
        ]
        assert any(f"| {rule.action.value}" in row for row in readme_rows), condition_type
