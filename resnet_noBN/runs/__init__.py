"""Whole jobs and the command-line surface they share: ``cli`` (the launchers' flags, the run's
start and record, its report and exit codes), ``claims`` (the paper's claims as a seeded sweep)
and ``evaluation`` (a finished run's checkpoint evaluated again). They may import every layer
below; only ``launch/`` and ``bench/`` import them."""
