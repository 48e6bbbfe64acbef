"""Whole jobs and the command-line surface they share: ``cli`` (the launchers' flags, the run's
start and record, its report and exit codes), ``study`` and ``claims`` (seeded comparisons of
arms: a study's plan and report, the verdicts on the paper's claims) and ``evaluation`` (a
finished run's checkpoint evaluated again). They may import every layer below; only ``launch/``
and ``bench/`` import them."""
