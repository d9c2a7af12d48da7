"""The pure core: the vocabulary and every rule that needs no clock, no log and no I/O.

The pure core: the vocabulary, the judge, the rules for which bound is in force and how a
broker's values are read, sightings, dead letters and the ledger's canonical form. Nothing here
reads a clock, logs, or does I/O; the adapters build its values and the pass passes ``now`` in.
"""
