"""``reaper demo`` and the scenario it seeds, which the tests start from too.

``reaper demo`` and the scenario it seeds (which the tests start from too): never part of a
pass. :mod:`~reaper.demo.scenario` says what is seeded, :mod:`~reaper.demo.seed` seeds it,
:mod:`~reaper.demo.run` runs the demo, :mod:`~reaper.demo.admin` makes and removes the
databases and vhosts they use."""
