"""The checks of every move: leases moved once with their events, parks with their gates, and
every dead letter still on the broker."""

from __future__ import annotations

import base64
import uuid
from collections import Counter, defaultdict
from typing import Any

from reaper.core.domain import (
    DEAD_LETTER_JOB_KIND,
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    GATE_DELIVERY_EXHAUSTED,
)
from tests.support.invariants.expectation import DEAD_LETTER_PREFIX, Seeded, Summary
from tests.support.invariants.seed_broker import listed, read_bodies, read_is_safe, wait_for_depths
from tests.support.services import BrokerUnderTest


def check_leases(
    events: list[dict[str, Any]],
    jobs: dict[uuid.UUID, dict[str, Any]],
    gates: list[dict[str, Any]],
    seeded: Seeded,
    converged: bool,
    summary: Summary,
    problems: list[str],
) -> None:
    moves: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        payload = event["payload"]
        if payload.get("source") == "job_queue" and payload.get("action") in ("requeue", "park"):
            moves[payload["object"]].append(event)
            summary.lease_events[payload["action"]] += 1
            if event["trusted"] is not True:
                problems.append(f"lease event {payload['object']}: not trusted")
    gates_by_job: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
    for gate in gates:
        if gate["kind"] == GATE_DELIVERY_EXHAUSTED:
            gates_by_job[gate["job_id"]].append(gate)
            summary.delivery_exhausted_gates += 1

    seeded_ids = {str(job_id) for job_id in seeded.episodes}
    for obj in sorted(set(moves) - seeded_ids):
        problems.append(
            f"move event(s) {[e['payload']['action'] for e in moves[obj]]} for "
            f"job {obj}, which was never seeded as an expired lease"
        )
    for job_id in set(gates_by_job) - set(seeded.episodes):
        problems.append(f"delivery_exhausted gate(s) on job {job_id}, never seeded as expired")

    for job_id, episodes in seeded.episodes.items():
        recorded = moves.get(str(job_id), [])
        job = jobs.get(job_id)
        where = f"job {job_id}"
        if job is None:
            problems.append(f"{where}: gone from the job table")
            continue
        if len(recorded) > len(episodes):
            problems.append(
                f"{where}: {len(recorded)} move events for {len(episodes)} episode(s): moved "
                f"twice ({[e['payload']['action'] for e in recorded]})"
            )
            continue
        if converged and len(recorded) < len(episodes):
            problems.append(
                f"{where}: {len(recorded)} move event(s) for {len(episodes)} episode(s): "
                f"not moved (state {job['state']}, lease {job['lease_expires_at']})"
            )
        summary.episodes_moved += len(recorded)
        summary.episodes_pending += len(episodes) - len(recorded)
        for episode, event in zip(episodes, recorded, strict=False):
            payload = event["payload"]
            if payload["action"] != episode.action or payload["condition"] != episode.condition:
                problems.append(
                    f"{where}: event {payload['action']}/{payload['condition']}, expected "
                    f"{episode.action}/{episode.condition} (attempts {episode.attempts} of "
                    f"{episode.max_attempts})"
                )
            if event["project_id"] != episode.project_id:
                problems.append(f"{where}: event on stream {event['project_id']}, not its project")
        # the job as its last event (or its pending episode) says
        if len(recorded) < len(episodes):
            pending = episodes[len(recorded)]
            if (
                job["state"] != "leased"
                or job["lease_expires_at"] != pending.lease_expires_at
                or job["lease_owner"] != pending.lease_owner
                or job["attempts"] != pending.attempts
            ):
                problems.append(
                    f"{where}: moved without its event: {len(recorded)} event(s) but the job is "
                    f"{job['state']} (lease {job['lease_expires_at']}, owner {job['lease_owner']}"
                    f", attempts {job['attempts']}), not the pending lease as seeded"
                )
        elif recorded:
            last, event = episodes[-1], recorded[-1]
            expected_state = "awaiting_human" if last.action == "park" else "ready"
            expected_attempts = (
                max(last.attempts - 1, 0) if last.action == "park" else last.attempts
            )
            if (
                job["state"] != expected_state
                or job["lease_owner"] is not None
                or job["lease_expires_at"] is not None
                or job["attempts"] != expected_attempts
            ):
                problems.append(
                    f"{where}: after its {last.action} the job is {job['state']} with attempts "
                    f"{job['attempts']}, lease {job['lease_expires_at']} (expected "
                    f"{expected_state}, attempts {expected_attempts}, no lease)"
                )
            if job["updated_at"] != event["created_at"]:
                problems.append(
                    f"{where}: moved at {job['updated_at']} but its event says "
                    f"{event['created_at']}: not one transaction"
                )
            if last.action == "requeue" and job["run_after"] != event["created_at"]:
                problems.append(f"{where}: requeued with run_after {job['run_after']}, not now")
        # park events <-> delivery_exhausted gates, one per parked episode
        parked = [ep for ep, _ in zip(episodes, recorded, strict=False) if ep.action == "park"]
        job_gates = gates_by_job.get(job_id, [])
        wanted = sorted(ep.gate_identity for ep in parked)
        found = sorted(g["identity"] or "" for g in job_gates)
        if found != wanted:
            problems.append(
                f"{where}: delivery_exhausted gates {found}, expected one per park {wanted}"
            )


def check_dead_letter_parks(
    events: list[dict[str, Any]],
    jobs: dict[uuid.UUID, dict[str, Any]],
    gates: list[dict[str, Any]],
    letters: list[dict[str, Any]],
    seeded: Seeded,
    converged: bool,
    summary: Summary,
    problems: list[str],
) -> None:
    identities = Counter(g["identity"] for g in gates)
    for identity, n in identities.items():
        if identity is None:
            problems.append(f"{n} gate(s) without an identity")
        elif n > 1:
            problems.append(f"gate identity {identity!r} raised {n} times")
    parks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        payload = event["payload"]
        if (
            payload.get("source") == "broker"
            and payload.get("condition") == "dead_letter"
            and payload.get("action") == "park"
        ):
            parks[payload["object"]].append(event)
            summary.dead_letter_parks += 1
            if event["project_id"] != FLEET_PROJECT_ID or event["trusted"] is not False:
                problems.append(
                    f"dead-letter park event {payload['object']}: on stream "
                    f"{event['project_id']} with trusted {event['trusted']} (expected the fleet "
                    "stream, untrusted)"
                )
    dl_jobs = {job_id: job for job_id, job in jobs.items() if job["kind"] == DEAD_LETTER_JOB_KIND}
    dl_gates = {g["job_id"]: g for g in gates if g["kind"] == GATE_BUS_DEAD_LETTERED}
    summary.dead_letter_gates = sum(1 for g in gates if g["kind"] == GATE_BUS_DEAD_LETTERED)
    by_job = {letter["job_id"]: letter for letter in letters}
    for job_id, job in dl_jobs.items():
        letter = by_job.get(job_id)
        gate = dl_gates.get(job_id)
        n_events = len(parks.get(str(job_id), []))
        if letter is None or gate is None or n_events != 1:
            problems.append(
                f"parked dead-letter job {job_id}: dead_letter row {letter is not None}, gate "
                f"{gate is not None}, {n_events} park event(s) (expected all, and one event)"
            )
            continue
        key = DEAD_LETTER_PREFIX + letter["identity"]
        if job["idempotency_key"] != key or gate["identity"] != key:
            problems.append(
                f"parked dead letter {letter['identity']!r}: job key {job['idempotency_key']!r}"
                f", gate identity {gate['identity']!r}"
            )
        if job["project_id"] != FLEET_PROJECT_ID or job["state"] != "awaiting_human":
            problems.append(
                f"parked dead-letter job {job_id}: project {job['project_id']}, state "
                f"{job['state']}"
            )
    for obj in set(parks) - {str(j) for j in dl_jobs}:
        problems.append(f"dead-letter park event for {obj}: no bus.dead_letter job of that id")
    if summary.dead_letter_gates != len(dl_jobs):
        problems.append(
            f"{summary.dead_letter_gates} bus_dead_lettered gate(s) for {len(dl_jobs)} parked "
            "dead-letter job(s)"
        )
    # every parked letter is one the broker held, once; converged: every one is parked
    parked_by_queue: dict[str, list[str]] = defaultdict(list)
    for letter in letters:
        body = letter["body"]
        if letter["body_encoding"] == "base64":
            body = base64.b64decode(body).decode("utf-8", "replace")
        parked_by_queue[letter["queue"]].append(body)
    for queue in set(parked_by_queue) | set(seeded.dead_letters) | set(seeded.untouched):
        bodies = parked_by_queue.get(queue, [])
        if queue in seeded.untouched:
            if bodies:
                problems.append(f"queue {queue}: {len(bodies)} letter(s) parked from it")
            continue
        expected = Counter(seeded.dead_letters.get(queue, []))
        extra = Counter(bodies) - expected
        if extra:
            problems.append(f"{queue}: parked letters never seeded: {list(extra)[:5]}")
        duplicated = [b for b, n in Counter(bodies).items() if n > 1]
        if duplicated:
            problems.append(f"{queue}: letters parked more than once: {duplicated[:5]}")
        if converged and Counter(bodies) != expected:
            missing = expected - Counter(bodies)
            problems.append(
                f"{queue}: {sum(missing.values())} of {sum(expected.values())} dead letter(s) "
                f"not parked, e.g. {list(missing)[:3]}"
            )


async def check_broker(
    broker: BrokerUnderTest,
    seeded: Seeded,
    letters: list[dict[str, Any]],
    read_broker: bool,
    summary: Summary,
    problems: list[str],
) -> None:
    expected: dict[str, int] = {q: len(b) for q, b in seeded.dead_letters.items()}
    expected.update(seeded.untouched)
    try:
        await wait_for_depths(broker, expected)
    except AssertionError as exc:
        problems.append(f"messages lost or held: {exc}")
        return
    for queue, count in expected.items():
        info = listed(broker, queue)
        assert info is not None
        foreign = queue in seeded.untouched
        (summary.untouched_on_broker if foreign else summary.dead_letters_on_broker)[queue] = int(
            info["messages"]
        )
        if not read_broker:
            continue
        unsafe = read_is_safe(broker, info)
        if unsafe is not None:
            problems.append(
                f"{queue}: the final requeueing read is not safe ({unsafe}): with this limit the "
                "reaper's own reads could have dropped dead letters"
            )
            continue
        messages = read_bodies(broker, queue, count + 10)
        if foreign:
            if len(messages) != count or any(m.get("redelivered") for m in messages):
                problems.append(
                    f"queue {queue}: {len(messages)} of {count} message(s), redelivered "
                    f"{[m.get('redelivered') for m in messages]}: it was read or touched"
                )
            continue
        got = sorted(str(m.get("payload")) for m in messages)
        bodies = seeded.dead_letters[queue]
        if got != sorted(bodies):
            missing = Counter(bodies) - Counter(got)
            problems.append(
                f"{queue}: holds {len(got)} message(s), expected the {len(bodies)} seeded; "
                f"missing {list(missing)[:3]}"
            )
