"""Many runs: a study's arms and seeds, Table 2's plan and report (arXiv:1611.04231,
Table 2), the paper's claims, the loop that trains them one after another, the thinned record
kept of each, and the 2016 code's evaluation statistic."""
