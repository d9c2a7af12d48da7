"""The table of the three brokers and what each enforces (``docs/brokers.md``) is rendered
from the pinned capability profiles (``capabilities_for``, itself pinned live by
``tests/integration/test_consumer_timeout_enforcement.py``): the documentation cannot drift
from what the code believes. Run this file's ``__main__`` to print the table after a change."""

from __future__ import annotations

from pathlib import Path

from reaper.broker.capabilities import capabilities_for
from reaper.core.enforcement import TimeoutSetting

ROOT = Path(__file__).resolve().parents[2]
#: The brokers the tests run against, as measured; LavinMQ 2.9.1 measured by hand on a broker
#: built from its source (its responses are kept in tests/data/lavinmq-2.9.1).
BROKERS = (
    ("RabbitMQ", "3.10.8"),
    ("RabbitMQ", "4.0.5"),
    ("RabbitMQ", "4.3.6"),
    ("LavinMQ", "2.9.1"),
)
_ORDER = (TimeoutSetting.POLICY, TimeoutSetting.ARGUMENT, TimeoutSetting.BROKER_WIDE)
_NAMES = {
    TimeoutSetting.POLICY: "policy `consumer-timeout`",
    TimeoutSetting.ARGUMENT: "argument `x-consumer-timeout`",
    TimeoutSetting.BROKER_WIDE: "broker-wide `consumer_timeout`",
}


def _settings(settings: set[TimeoutSetting]) -> str:
    return ", ".join(_NAMES[s] for s in _ORDER if s in settings) or "none"


def enforcement_table() -> str:
    header = (
        "| broker | queue type | consumer timeout enforced from | a consumer holding a "
        "delivery past it | accepted, ignored | refused | a held `basic.get` counted in "
        "`consumers` |"
    )
    lines = [header, "|---|---|---|---|---|---|---|"]
    for product, version in BROKERS:
        facts = capabilities_for(product, version)
        for e in facts.consumer_timeout_enforcement:
            refused = set(e.refused)
            if not facts.policy_consumer_timeout:
                refused.add(TimeoutSetting.POLICY)
            ignored = set(TimeoutSetting) - set(e.enforced) - refused
            happens = f"{e.action}; {e.when}" if e.enforced else "nothing: it keeps the delivery"
            counted = e.queue_type in (facts.get_holder_counted_as_consumer or ())
            lines.append(
                f"| {facts.name} | {e.queue_type} | {_settings(set(e.enforced))} | {happens} | "
                f"{_settings(ignored)} | {_settings(refused)} | {'yes' if counted else 'no'} |"
            )
    return "\n".join(lines)


def test_the_broker_doc_carries_the_table_rendered_from_the_capabilities() -> None:
    readme = (ROOT / "docs" / "brokers.md").read_text(encoding="utf-8")
    table = enforcement_table()
    assert table in readme, f"docs/brokers.md must carry, exactly:\n\n{table}"
    assert readme.count("| broker | queue type |") == 1  # one table, not two to keep in step


def test_the_table_says_what_was_pinned() -> None:
    rows = enforcement_table().splitlines()[2:]
    assert len(rows) == 7  # three RabbitMQ versions, two queue types each; LavinMQ's one type
    [classic_43] = [r for r in rows if r.startswith("| RabbitMQ 4.3.6 | classic |")]
    assert "| none | nothing: it keeps the delivery |" in classic_43
    assert "| argument `x-consumer-timeout` |" in classic_43  # refused (4.3.2+)
    [argument_310] = [r for r in rows if r.startswith("| RabbitMQ 3.10.8 | classic |")]
    assert "| broker-wide `consumer_timeout` |" in argument_310
    [lavinmq] = [r for r in rows if r.startswith("| LavinMQ 2.9.1 |")]
    assert lavinmq.startswith("| LavinMQ 2.9.1 | classic | argument `x-consumer-timeout` |")
    assert lavinmq.endswith("| broker-wide `consumer_timeout` | policy `consumer-timeout` | no |")


def test_the_other_docs_point_at_the_table() -> None:
    for doc in ("metrics/README.md", "policies/README.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert "NotEnforced" in text, doc
        assert "docs/brokers.md#what-each-broker-enforces" in text, doc


if __name__ == "__main__":
    print(enforcement_table())
