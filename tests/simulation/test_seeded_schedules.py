"""The seeded simulation in the test suite: 500 schedules with every fault kind, and the seeds that
found defects during development, kept as regressions. tests/simulation/test_finds_defects.py
(``make soak``) shows the simulation finds each of those defects again when its fix is taken out."""

from __future__ import annotations

import pytest

from nodeheal.sim.seeded.fault_effects import ARMED
from nodeheal.sim.seeded.faults import DROPPED_FAULTS, FAULT_KINDS, IDENTITY_FAULTS, PlannedFault
from nodeheal.sim.seeded.runner import ScheduleResult, run_campaign, run_schedule, shrink
from nodeheal.sim.seeded.template import SimTemplate

#: D16: `make test` runs at least this many schedules (the soak runs 20,000), in chunks the test
#: workers share: one chunk is about 10 s on this machine's two cores.
SCHEDULES = 500
CHUNK = 100


def _explain(failure: ScheduleResult, template: SimTemplate) -> str:
    shrunk = shrink(template, failure)
    plan = ",".join(f.describe() for f in shrunk.plan)
    headline = shrunk.violation.render() if shrunk.violation else shrunk.crash
    return (
        f"seed {failure.seed}: {headline}\nfaults: {plan}\n"
        f"replay: make simulate SEED={failure.seed} PLAN='{plan}'\n" + "\n".join(shrunk.trace[-80:])
    )


@pytest.mark.parametrize("first", range(0, SCHEDULES, CHUNK))
def test_every_invariant_holds_over_500_schedules_with_every_fault_kind(
    template: SimTemplate, first: int
) -> None:
    campaign = run_campaign(template, range(first, first + CHUNK))
    assert not campaign.failures, _explain(campaign.failures[0], template)
    assert campaign.schedules == CHUNK
    never = [kind for kind in FAULT_KINDS if campaign.coverage[kind] == 0]
    assert not never, f"fault kinds never drawn in seeds {first}..{first + CHUNK - 1}: {never}"
    # The dropped-fault class and the identity changes aim at one call (a step about to read the
    # node, a Record step):
    # drawn is not enough, each must have found its call. contender-ends needs a reboot-class
    # holder mid-drain in full mode, a few times in 500 schedules: test_before_the_fixes.py replays
    # one where it fires and finds its defect.
    aimed = [kind for kind in DROPPED_FAULTS + IDENTITY_FAULTS if kind in ARMED and kind != "contender-ends"]
    idle = [kind for kind in aimed if campaign.fired[kind] == 0]
    assert not idle, f"armed faults that never found their call in seeds {first}..{first + CHUNK - 1}: {idle}"
    # The schedules do real work: executions run (a GPU fault starts at least one per schedule).
    assert campaign.executions > CHUNK
    print(
        f"\nseeds {first}..{first + CHUNK - 1}: {campaign.rate:.1f} schedules/s; faults drawn: "
        + ", ".join(f"{kind} {count}" for kind, count in sorted(campaign.coverage.items()))
        + "; fired: "
        + ", ".join(f"{kind} {count}" for kind, count in sorted(campaign.fired.items()))
    )


def plan(*faults: str) -> list[PlannedFault]:
    return [PlannedFault.parse(f) for f in faults]


#: Seeds (and their shrunk plans) that broke an invariant while the simulation was built; each now
#: passes. A change to the simulation itself may change what a seed does: the soak's search
#: (test_finds_defects.py) is what shows each defect is still found.
REGRESSIONS: dict[str, tuple[int, list[PlannedFault] | None]] = {
    # A future-dated copy of an event got an execution name of its own (ingest now drops it).
    "I6 future-dated event": (1, None),
    # A reboot-level Xid whose message worsened to Xid 79 between drain and reboot was rebooted.
    "I8 message worsened before the reboot": (
        6,
        plan("gpu-fault@138#531741997", "message-more-severe@187#487799414"),
    ),
    # A new Node took the name between the drain's proof and its pod list: its pods were evicted.
    "I1 node replaced between proof and pod list": (
        76,
        plan("gpu-fault@76#665435019", "node-replaced-same-name@113#87344541"),
    ),
    # Both nodes of a managed node group were cordoned: each counted as a pool of one.
    "I3 managed node group pool share": (106, None),
    # A replace-level fault on a second condition, confirmed before the reboot step, was ignored.
    "I8 second condition before the reboot": (
        139,
        plan("gpu-fault@101#453097561", "second-condition@154#1052762993"),
    ),
    # A KernelDeadlock holder still confirming, preempted by a reboot-level fault that acts sooner.
    "I8 preempted while confirming": (108, plan("gpu-fault@104#336349788", "second-condition@216#435501836")),
    # An event delivered after an outage longer than the stale bound: the exporter's resync re-sends it.
    "I2 stale after an outage": (
        25,
        plan(
            "gpu-fault@187#228992513",
            "gpu-fault@187#287221320",
            "gpu-fault@189#154000961",
            "lock-ttl-expiry@213#1031652887",
        ),
    ),
    # Xid 79 refused by the budget, then re-reported as Xid 48: a later execution rebooted it.
    "I8 refused fault forgotten by the next execution": (
        376,
        plan("gpu-fault@43#262340426", "gpu-fault@141#640549820", "message-less-severe@286#792744643"),
    ),
    # The event saw Xid 79; the detector overwrote it with Xid 48 before admit read the node.
    "I8 the event's own sighting": (1000405, plan("gpu-fault@104#311237729", "gpu-fault@107#718304498")),
    # A more severe newcomer found the holder's step running; the holder went on to reboot.
    "I8 a busy holder stands aside for a waiting replacement": (
        1000475,
        plan(
            "gpu-fault@101#176803252", "second-condition@101#776577069", "message-less-severe@141#925872210"
        ),
    ),
    # An unconfirmed KernelDeadlock pushed a GPU remediation aside, then cleared: the GPU was dropped.
    "I2 only a confirmed fault preempts": (
        1004266,
        plan("gpu-fault@51#509706285", "gpu-fault@84#590120098", "condition-clears@140#170883409"),
    ),
    # Xid 79 read in a drain round, Xid 48 again at the reboot: the drain's result keeps it.
    "I8 a worse fault read during the drain": (
        1006862,
        plan("gpu-fault@156#305901925", "message-more-severe@175#56148001", "gpu-fault@191#982339957"),
    ),
    # An aborted execution whose status-change event was lost: the sweeper accounts for it.
    "I4 aborted, event lost": (32, None),
    # Xid 79's holder lost its lock in an outage; the next execution, for the Xid 48 that overwrote
    # it, admitted before the holder's record existed and rebooted: the episode memory decides now.
    "I8 a sighting outlives its execution's lock": (
        1007907,
        plan("gpu-fault@13#235150033", "gpu-fault@33#922729562", "lock-ttl-expiry@47#796019903"),
    ),
    # A reboot's execution, taken over by a replacement of the same instance, waited for a
    # recovery that would not come: it could not mutate again, yet I3 counted it in flight.
    "I3 an execution that lost its lock is not in flight": (
        1001132,
        plan(
            "gpu-fault@23#191448189",
            "second-condition@168#670486241",
            "gpu-fault@187#819748415",
            "gpu-fault@199#901283435",
        ),
    ),
    # KernelDeadlock went bad with an Xid 48 message (reboot, no confirmation), then read as a
    # hung task (replace after 600 s): the reboot 30 s later was right, but I8 took the replace as
    # confirmed by the first message's confirmation time.
    "I8 a changed message needs its own confirmation": (
        1008913,
        plan(
            "gpu-fault@2#1071214289",
            "second-condition@26#778747872",
            "gpu-fault@32#925756564",
            "gpu-fault@81#985245793",
        ),
    ),
    # A replace-level fault on a second condition was seen by its own execution only, then a lesser
    # message overwrote it; another condition's execution rebooted the instance.
    "I8 one memory per instance, across conditions": (
        1007283,
        plan(
            "gpu-fault@57#27281413",
            "gpu-fault@122#945231543",
            "second-condition@137#237984863",
            "message-less-severe@231#447203215",
        ),
    ),
    # A replacement contended a busy reboot holder and was aborted a second later: the holder
    # stopped for a successor that never came, and its Xid 48 was left to nobody.
    "I2 a contender that ends before taking over": (
        4001474,
        plan(
            "contender-ends@138#452705413",
            "gpu-fault@170#314363645",
            "lesser-reason-before-instance-action@383#91924305",
        ),
    ),
    # A KernelDeadlock was remembered when first seen, inside its 600 s confirmation, then admitted
    # with replace; it flapped healthy, and the memory's first sighting read as a flap: a GPU fault
    # of the same node was rebooted.
    "I8 a fault confirmed after it was first remembered": (
        5000836,
        plan("gpu-fault@26#868258070", "gpu-fault@43#579300896", "condition-flaps@62#106848733"),
    ),
    # A GPU dead on arrival, reported before the node named its instance (providerID empty): the
    # execution admitted an instance-less node, and stopped as "replaced" once the cloud
    # controller set the providerID; the fault was left to nobody. Admit now waits for it.
    "I2 a GPU dead before the node names its instance": (
        5,
        plan("gpu-fault@5#5", "provider-id-late@20#35"),
    ),
    # A GPU holder's lock ran out in an outage; a KernelDeadlock execution took the node, and its
    # own fault cleared mid-drain: it stopped, and the GPU fault it had taken over was left to
    # nobody. The guard now lets an execution finish the fault of the holder it displaced.
    "I2 the fault of a holder whose lock ran out": (
        8000534,
        plan(
            "gpu-fault@15#578945433",
            "message-more-severe@19#455558920",
            "gpu-fault@48#895288359",
            "gpu-fault@99#153940869",
            "gpu-fault@192#676645113",
            "lock-ttl-expiry@202#934927825",
            "condition-clears@371#338037224",
        ),
    ),
    # The simulated kubelet registered its node again on an instance NodeHeal had terminated.
    "I2 only a live kubelet registers again": (
        8000330,
        plan("contender-ends@56#317730411", "gpu-fault@177#545771941", "kubelet-re-registers@211#462144694"),
    ),
    "I2 a node that joins late and registers again": (
        8001108,
        plan(
            "provider-id-late@62#195993916",
            "gpu-fault@118#914540295",
            "fatal-xid-last@132#198066115",
            "kubelet-re-registers@155#323167129",
            "gpu-fault@173#357165569",
        ),
    ),
    # A KernelDeadlock execution held the lock while confirming; its node was replaced meanwhile,
    # which joined before its providerID was set, so its event named no instance. Admit's "node no
    # longer exists" stop left the lock to Record outcome, which looked under the event's key.
    "I4 a stop gives back the lock it took to confirm": (9002126, None),
    # The oracle's own defect: a waiting contender admitted afresh right after a person took the
    # node back, at the same instant (the clock moves only on a wait); I16 compared clocks and read
    # the fresh admit as one from before. I16 now orders them by their place in the schedule.
    "I16 an admit at the instant a person took the node back decides anew": (
        10012539,
        plan(
            "gpu-fault@15#368819880",
            "message-less-severe@34#52423740",
            "gpu-fault@82#995174564",
            "gpu-fault@145#416896612",
            "condition-clears@281#339514037",
            "second-condition@313#1066708745",
            "lock-ttl-expiry@372#1068592628",
            "person-takes-node-back@372#989772908",
        ),
    ),
    # A detector restart cleared GPUProblem's Xid 79 two seconds after the exporter shipped it,
    # while AcceleratedHardwareReady's Xid 48 was being drained: the Xid 79's execution stopped
    # ("no longer bad") and forgot it, and the holder rebooted. The stop now remembers it.
    "I8 a fault gone before its admit counts while the episode goes on": (
        12001501,
        plan("gpu-fault@70#418264867", "contender-ends@91#458881786", "condition-flaps@101#332602589"),
    ),
    # The oracle's own defect: it counted an event as known from the moment the exporter shipped
    # it, and held a holder rebooting at that instant to a Xid 79 no step of NodeHeal could have
    # read yet. I8 now counts an event once admit of its execution read it (I13 still from the
    # moment it was shipped).
    "I8 an event on its way is not yet known to a holder": (
        12003957,
        plan(
            "lesser-reason-before-instance-action@0#21393663",
            "gpu-fault@1#752292752",
            "gpu-fault@84#290129455",
            "api-slow@91#907958833",
            "message-more-severe@113#985306429",
        ),
    ),
    # A KernelDeadlock execution took the node when the GPU holder's lock ran out, the holder's
    # cordon still on it; a person then took the node back, and the cordon step put it all back.
    # Admit now remembers NodeHeal's taint was there, and cordon requires it still is.
    "I16 a node taken back after admit under another's cordon is left alone": (
        13001950,
        plan(
            "gpu-fault@46#429195744",
            "gpu-fault@54#1072998780",
            "condition-flaps@82#3784625",
            "gpu-fault@92#61720276",
            "gpu-fault@182#860033865",
            "second-condition@197#1031544061",
            "api-timeout@231#419882820",
            "person-takes-node-back@286#42455064",
            "api-5xx@313#93849095",
            "lock-ttl-expiry@318#1037598883",
        ),
    ),
    # The oracle's own defect: a reboot timed out on a slow API read and went, as designed, to
    # Record failure (a reboot is not retried after a Lambda timeout); Record failure's own retry
    # then changed the state R1 read the error from, and R1 judged the retry instead of the reboot.
    # The oracle's own defect: a fault's bad period ended (NPD rewrote its transition time) while
    # its execution went on; two outages of 9 h followed, and I2 counted only the outage inside
    # the bad period, so the decision fell due while NodeHeal was down.
    "I2 an outage after a bad period delays its decision too": (
        14109881,
        plan(
            "gpu-fault@30#149262187",
            "gpu-fault@38#770378187",
            "lesser-reason-mid-drain@189#405531628",
            "lock-ttl-expiry@214#1032632095",
            "lock-ttl-expiry@261#759942199",
        ),
    ),
    "R1 judges the state whose error was caught": (
        14004046,
        plan(
            "gpu-fault@38#427985976",
            "api-timeout@119#661429666",
            "lambda-killed-after-side-effect@122#700570781",
        ),
    ),
    "I16 a contender behind a holder a person stopped decides anew": (
        10016117,
        plan(
            "gpu-fault@7#771313988",
            "gpu-fault@48#290796979",
            "kubelet-dead@94#272718788",
            "api-timeout@98#531042242",
            "person-takes-node-back@104#709474421",
        ),
    ),
    # A replace-level KernelDeadlock cleared 91 s into its 600 s confirmation while the node's
    # AcceleratedHardwareReady stayed bad; I8 took the flap for a confirmed fault and failed the
    # reboot a later Xid 48 called for. A message that clears before its confirmation counts nowhere.
    # The oracle's own crash once every message it had seen of a node's conditions was a flap.
    "I13 a node whose every seen message was a flap": (16004133, None),
    # An Event the old Node's NPD wrote in the second a new Node took the name was counted on the
    # new instance: "not before" the new Node's whole-second creation let it through (D10).
    "I19 an Event of the old Node in the new one's first second": (723, None),
    "I8 a fault that cleared before its confirmation was a flap": (
        15013547,
        plan(
            "gpu-fault@4#310342563",
            "gpu-fault@7#124849815",
            "gpu-fault@8#492138534",
            "condition-clears@156#322665667",
            "message-less-severe@352#307526042",
        ),
    ),
    # A reboot in a Capacity Block that did not recover was replaced with the block reclaiming the
    # instance within launchMinutes + minBlockRemainingMinutes (terminate now checks the block).
    **{
        f"I17 escalation into an ending Capacity Block (seed {seed})": (seed, None)
        for seed in (414, 613, 654, 812, 852, 983)
    },
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_a_seed_that_found_a_defect_passes(template: SimTemplate, name: str) -> None:
    seed, faults = REGRESSIONS[name]
    result = run_schedule(template, seed, faults, trace=True)
    assert result.ok, _explain(result, template)
    assert result.executions > 0


def test_a_replay_is_exact(template: SimTemplate) -> None:
    first = run_schedule(template, 4242, trace=True)
    again = run_schedule(template, 4242, trace=True)
    assert first.trace == again.trace and first.steps == again.steps > 0


def test_a_planned_fault_reads_back_and_bad_ones_are_refused() -> None:
    fault = PlannedFault("api-5xx", 12, 99)
    assert PlannedFault.parse(fault.describe()) == fault
    for bad in ("api-5xx", "no-such-fault@1#2", "api-5xx@x#2"):
        with pytest.raises(ValueError, match="not a planned fault"):
            PlannedFault.parse(bad)


def test_schedules_run_over_the_dynamodb_ledger_in_moto_too(template: SimTemplate) -> None:
    """The soak's moto-backed sample, in small: the same schedule through the deployed table's
    conditional writes keeps every invariant."""
    result = run_schedule(template, 7, ledger="dynamodb")
    assert result.ok, _explain(result, template)
    assert result.executions > 0


def test_an_unknown_ledger_is_refused(template: SimTemplate) -> None:
    with pytest.raises(ValueError, match="memory or dynamodb"):
        run_schedule(template, 7, ledger="postgres")


def test_the_cli_replays_a_seed_and_reports_a_campaign_as_json(
    template: SimTemplate, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from nodeheal.cli import main

    assert main(["simulate", "--seed", "3"]) == 0
    replay = capsys.readouterr().out
    assert "seed 3:" in replay and "0 violations" in replay and "| Admit" in replay
    assert main(["simulate", "--schedules", "2", "--first-seed", "40", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schedules"] == 2 and report["failures"] == []
    assert set(report["coverage"]) == set(FAULT_KINDS)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--plan", "api-5xx@1#2"], "--plan needs --seed"),
        (["simulate", "--seed", "1", "--plan", "no-such-fault@1#2"], "not a planned fault"),
    ],
)
def test_the_cli_refuses_a_bad_plan_with_a_reason(
    template: SimTemplate, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    from nodeheal.cli import main

    assert main(argv) == 2
    assert message in capsys.readouterr().err
