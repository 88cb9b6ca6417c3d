"""The cost model: how long each way of running a product takes, on a GPU (:mod:`.gpu`)
and on the CPU (:mod:`.cpu`), with constants fitted per device and kept as data
(:mod:`.constants`)."""
