"""Sections 2 and 3 of Hardt & Ma, "Identity Matters in Deep Learning" (arXiv:1611.04231),
executable.

Modules:
  linear        Section 2: linear residual networks. The population risk (Claim 2.3), its
                gradient (Lemma 2.4), small-norm global optima built constructively
                (Theorem 2.1, polar form and the proof's U·K·Vᵀ split), the gradient lower
                bound (Theorem 2.2, eq. 2.3) with an adversarial search for its minimum and
                the τ = 1 counterexample, and gradient descent in the residual against the
                standard parameterisation.
  expressivity  Section 3 / Appendix B: the residual ReLU network that maps n points to any
                labelling (Theorem 3.2 via Lemmas B.1 and B.2), loaded into a Keras model;
                per-row thresholds (practical) or Lemma B.1's single bias −(1 − 2ρ) with its
                hypotheses checked after the projection.
  linear_checks, expressivity_checks
                Each result of the section checked on numbers, one function per result, from
                the settings they are given (a frozen dataclass).
  linear_report, expressivity_report
                The checks run in order, said as they go; their plots, and the figures of the
                launcher's last line of JSON.

Run them as ``python launch/linear.py`` and ``python launch/expressivity.py``, which parse
the flags into the settings and write the JSON.

They may import ``configs``, ``plotting``, ``models`` and ``datasets`` (the CIFAR points of
Section 3), never the trainers, the backends or the runs (``resnet_noBN.LAYERS``).
"""
