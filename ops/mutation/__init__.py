"""Mutation testing of the modules whose numbers the README and the tables report (mutmut, in a
copy of the tree): ``python -m ops.mutation.run`` (docs/testing.md, "Mutation testing")."""
