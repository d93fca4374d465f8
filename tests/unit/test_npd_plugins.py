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


#: Kill-after seconds written into a script rather than read from a variable.
KILL_AFTER = {
    "check_gpu_zombies.sh": 2,
    "check_gpu_thermal.sh": 10,
    "check_dns.sh": 2,
    # timeout -k 2 10 around ping.
    "check_gateway.sh": 12,
    "check_runtime.sh": 2,
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
        # Two queries at most (new field names, then the old ones), each TERM + 5 s KILL.
        ("gpu-thermal-monitor.json", "check_gpu_thermal.sh", ("SMI_TIMEOUT", "SMI_TIMEOUT")),
        ("dns-monitor.json", "check_dns.sh", ("DNS_TIMEOUT",)),
        ("gateway-monitor.json", "check_gateway.sh", ()),
        ("runtime-monitor.json", "check_runtime.sh", ("RUNTIME_TIMEOUT",)),
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
    worst = sum(script_default(script, variable) for variable in bounds) + KILL_AFTER.get(script, 0)
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


@pytest.mark.slow  # waits on a real timeout
@pytest.mark.parametrize(
    ("tools", "env", "expected"),
    [
        ({}, {"NVIDIA_SMI": "nvidia-smi-missing"}, "monitor failed: nvidia-smi not found"),
        (
            {"nvidia-smi": smi_printing(COOL)},
            {"GPU_TEMP_MAX": "hot"},
            "monitor misconfigured: SMI_TIMEOUT=10 GPU_TEMP_MAX=hot",
        ),
        # nvidia-smi answering with an error is GPUUnavailable's to decide, not a thermal fault.
        (
            {"nvidia-smi": "echo 'No devices were found'\nexit 6\n"},
            {},
            "nvidia-smi could not report temperatures (6): No devices were found",
        ),
        # So is one that does not answer: the plugin ends it and says so.
        (
            {"nvidia-smi": "trap '' TERM\nsleep 20 &\nwait\nwait\n"},
            {"SMI_TIMEOUT": "1"},
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


# --- check_gateway.sh: the default gateway answers ping --------------------------------------

#: /proc/net/route of an EKS node: the default route via 172.31.64.1 (little-endian hex), then
#: the subnet's own route.
ROUTES = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "ens5\t00000000\t01401FAC\t0003\t0\t0\t512\t00000000\t0\t0\t0\n"
    "ens5\t00401FAC\t00000000\t0001\t0\t0\t512\t00F0FFFF\t0\t0\t0\n"
)
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


def run_gateway(tmp_path: Path, ping: str | None, routes: str = ROUTES, **env: str) -> tuple[int, str]:
    route_file = tmp_path / "route"
    route_file.write_text(routes)
    tools = {"ping": ping} if ping is not None else {}
    env.setdefault("PING", "ping")
    return run_plugin("check_gateway.sh", tmp_path, tools, ROUTE_FILE=str(route_file), **env)


def test_gateway_check_healthy_pings_the_default_route(tmp_path: Path) -> None:
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


def test_gateway_check_no_reply_is_the_fault(tmp_path: Path) -> None:
    assert run_gateway(tmp_path, PING_LOST) == (1, "gateway 172.31.64.1 unreachable: no reply to 3 pings")


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
    ],
    ids=["missing", "no-net-raw", "no-default-route"],
)
def test_gateway_check_failing_for_its_own_reasons_is_unknown(
    tmp_path: Path, ping: str | None, routes: str, env: dict[str, str], expected: str
) -> None:
    code, out = run_gateway(tmp_path, ping, routes, **env)
    assert code == 2
    assert out.startswith(expected)


@pytest.mark.slow  # waits on a real timeout
def test_gateway_check_decides_when_ping_hangs(tmp_path: Path) -> None:
    started = time.monotonic()
    code, out = run_gateway(tmp_path, "trap '' TERM\nsleep 30 &\nwait\nwait\n")
    assert (code, out) == (2, "monitor failed: ping 172.31.64.1 hung past its 6s deadline")
    assert time.monotonic() - started < 20


# --- check_dns.sh: the configured name resolves ------------------------------------------------


def run_dns(tmp_path: Path, getent: str | None, **env: str) -> tuple[int, str]:
    tools = {"getent": getent} if getent is not None else {}
    env.setdefault("DNS_CHECK_NAME", "sts.amazonaws.com")
    env.setdefault("GETENT", "getent")
    return run_plugin("check_dns.sh", tmp_path, tools, **env)


def test_dns_check_healthy(tmp_path: Path) -> None:
    answer = "echo '52.94.241.129   STREAM sts.amazonaws.com'\n"
    assert run_dns(tmp_path, answer) == (0, "sts.amazonaws.com resolves")


@pytest.mark.slow  # waits on a real timeout
def test_dns_check_tells_a_failed_lookup_from_a_silent_resolver(tmp_path: Path) -> None:
    # getent(1): exit 2, "One or more supplied key could not be found in the database".
    assert run_dns(tmp_path, "exit 2\n") == (1, "DNS: sts.amazonaws.com does not resolve")
    assert run_dns(tmp_path, "trap '' TERM\nsleep 30 &\nwait\nwait\n", DNS_TIMEOUT="1") == (
        1,
        "DNS: no answer for sts.amazonaws.com within 1s",
    )


@pytest.mark.parametrize(
    ("getent", "env", "expected"),
    [
        (None, {"GETENT": "getent-missing"}, "monitor failed: getent not found"),
        ("exit 0\n", {"DNS_CHECK_NAME": ""}, "monitor misconfigured: DNS_CHECK_NAME is not set"),
        ("exit 0\n", {"DNS_TIMEOUT": "ten"}, "monitor misconfigured: DNS_TIMEOUT=ten"),
        (
            "echo 'Unknown database: ahosts' >&2\nexit 1\n",
            {},
            "monitor failed: getent could not run (1): Unknown database",
        ),
    ],
    ids=["missing", "no-name", "bad-timeout", "getent-error"],
)
def test_dns_check_failing_for_its_own_reasons_is_unknown(
    tmp_path: Path, getent: str | None, env: dict[str, str], expected: str
) -> None:
    code, out = run_dns(tmp_path, getent, **env)
    assert code == 2
    assert out.startswith(expected)


# --- check_runtime.sh: containerd answers on its socket within a bound ------------------------


def run_runtime(tmp_path: Path, ctr: str | None, socket: bool = True, **env: str) -> tuple[int, str]:
    path = tmp_path / "containerd.sock"
    listener = None
    if socket and not path.exists():
        listener = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
        listener.bind(str(path))
    tools = {"ctr": ctr} if ctr is not None else {}
    env.setdefault("CTR", "ctr")
    try:
        return run_plugin("check_runtime.sh", tmp_path, tools, RUNTIME_SOCKET=str(path), **env)
    finally:
        if listener is not None:
            listener.close()
            path.unlink()


CTR_VERSION = "echo 'Client:'\necho '  Version:  1.7.27'\necho 'Server:'\necho '  Version:  1.7.27'\n"


def test_runtime_check_healthy(tmp_path: Path) -> None:
    code, out = run_runtime(tmp_path, CTR_VERSION)
    assert code == 0 and re.fullmatch(r"containerd answered in [0-9]+ ms", out), out


@pytest.mark.slow  # waits on a real timeout
def test_runtime_check_slow_refused_and_silent_are_the_fault(tmp_path: Path) -> None:
    code, out = run_runtime(tmp_path, "sleep 1.3\n" + CTR_VERSION, RUNTIME_SLOW_MS="1000")
    assert code == 1 and re.fullmatch(r"containerd answered in 1[0-9]{3} ms \(bound 1000 ms\)", out), out
    refused = (
        'echo \'ctr: failed to dial "/run/containerd/containerd.sock": connection error: desc = '
        '"transport: error while dialing: dial unix /run/containerd/containerd.sock: connect: '
        "connection refused\"' >&2\nexit 1\n"
    )
    code, out = run_runtime(tmp_path, refused)
    assert code == 1 and out.startswith(
        'containerd not answering (1): ctr: failed to dial "/run/containerd'
    ), out
    code, out = run_runtime(tmp_path, "trap '' TERM\nsleep 30 &\nwait\nwait\n", RUNTIME_TIMEOUT="1")
    assert (code, out) == (1, "containerd did not answer within 1s")


@pytest.mark.parametrize(
    ("ctr", "socket", "env", "expected"),
    [
        (None, True, {"CTR": "ctr-missing"}, "monitor failed: ctr not found"),
        (CTR_VERSION, False, {}, "monitor failed: "),
        (
            "echo 'ctr: failed to dial: connect: permission denied' >&2\nexit 1\n",
            True,
            {},
            "monitor failed: no permission on ",
        ),
        (CTR_VERSION, True, {"RUNTIME_SLOW_MS": "fast"}, "monitor misconfigured: RUNTIME_SLOW_MS=fast"),
    ],
    ids=["missing", "socket-not-mounted", "permission", "bad-bound"],
)
def test_runtime_check_failing_for_its_own_reasons_is_unknown(
    tmp_path: Path, ctr: str | None, socket: bool, env: dict[str, str], expected: str
) -> None:
    code, out = run_runtime(tmp_path, ctr, socket, **env)
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
