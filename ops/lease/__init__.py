"""A lent GPU machine, driven call by call: the lease of the full-width runs of arXiv:1611.04231
(Table 1's network, Section 4's recipe) on a machine with JAX, no TensorFlow, no Keras and no
network, held for ``LEASE_S`` seconds of GPU time (900 by default: 15 minutes, its start
included), in calls of at most 10 minutes that each carry at most 64 MiB and bring back at most
8 files of 16 MiB.

    plan        the runs (named experiments, each with its own flags), their order and
                projected costs, the speed tries and the probe's parts, the knobs, and what
                the caller has had back (``LEASE_BACK``)
    carry       the exact data in parts under each call's budget, their SHA-256, the official
                files restored and checked on the machine; what each call carries
    supervisor  the detached process that keeps the GPU busy with the plan
    collect     what comes back in each call's $OUT (the weights in parts, the logs trimmed),
                and, here afterwards, the parts joined and checked
    call        one call of the lease

Run on the GPU machine from the source tree, nothing installed: ``PYTHONPATH=. python3 -m
ops.lease call`` (``launch/gpu_lease.sh``). Standard library only, and of the project
only ``configs.experiments``: the plan starts before anything is unpacked.
"""
