"""The edges, where people and programs meet the pass: the command line
(:mod:`~reaper.edges.cli`, :mod:`~reaper.edges.commands`), the report
(:mod:`~reaper.edges.report`), Prometheus metrics (:mod:`~reaper.edges.metrics`,
:mod:`~reaper.edges.serve`), the worker hook (:mod:`~reaper.edges.hook`) and gate answers in
words (:mod:`~reaper.edges.gates`; the answer itself is :mod:`reaper.reap.gates`)."""
