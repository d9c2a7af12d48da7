"""The edges, where people and programs meet the pass; they print, they never decide.

The edges, where people and programs meet the pass: the command line
(:mod:`~reaper.edges.cli`, :mod:`~reaper.edges.commands`), the report
(:mod:`~reaper.edges.report`), Prometheus metrics (:mod:`~reaper.edges.metrics`,
:mod:`~reaper.edges.serve`) and the worker hook (:mod:`~reaper.edges.hook`). What waits for
a person is :mod:`reaper.gates`'s; the edges print it."""
