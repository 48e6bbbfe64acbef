"""The plots of a comparison of arms (a study): curves, health and final errors,
read from the runs' records (``train.jsonl``, ``metrics.jsonl``) and a study's summary."""
