"""What runs the project rather than the paper (arXiv:1611.04231): the lease of a lent GPU
machine (``ops.lease``, ``launch/gpu_lease.sh``) and the CI harnesses (``ops/ci``: the test
suite under load, a race made near certain). Outside the research package ``resnet_noBN``, never
installed with it; run from the source tree (``python3 -m ops.lease ...``). Of the package the
lease imports only ``resnet_noBN.configs`` (tests/test_layers.py checks it)."""
