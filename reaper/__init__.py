"""queue-reaper: a declarative reaper and broker-policy reconciler for job queues kept in
PostgreSQL and dispatched through RabbitMQ."""

__version__ = "0.1.0"
