"""What the tests share and are not tests themselves: the real services and their waits
(``services``, ``cluster``), seeding (``store``, ``dead_letters``, ``sightings``, ``host_schema``,
``outbox_world``), the CLI and real reaper processes (``cli``, ``invariants``), real AMQP
consumers (``holders``) and the brokers' recorded profiles (``brokers``, ``fake_broker``,
``lavinmq_recorded``). Imported as ``tests.support.<module>``; pytest puts the checkout's root
on ``sys.path`` (``pythonpath`` in pyproject.toml)."""
