"""A trained run and its model: the folder a run keeps (its weights, checkpoints and
records), the run evaluated again, the ``.keras`` file made from it, and how near the identity
each trained block is (arXiv:1611.04231, Section 2)."""
