"""Sections 2 and 3 of Hardt & Ma (2016), executable (see PAPER.md sections 2 and 3).

Modules:
  linear        Section 2: linear residual networks. The population risk (Claim 2.3), its
                gradient (Lemma 2.4), small-norm global optima built constructively
                (Theorem 2.1), the gradient lower bound (Theorem 2.2, eq. 2.3), and gradient
                descent in the residual against the standard parameterisation.
  expressivity  Section 3 / Appendix B: the residual ReLU network that maps n points to any
                labelling (Theorem 3.2 via Lemmas B.1 and B.2), loaded into a Keras model.
  plotting      the matplotlib set-up the two launchers share.

Run them as ``python launch/linear.py`` and ``python launch/expressivity.py``.
"""
