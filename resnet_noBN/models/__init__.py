"""The networks: ``model`` (the paper's CIFAR network, arXiv:1611.04231 Table 1, its block
variants and their switches, ``BlockConfig`` and ``ModelConfig``) and ``imagenet_model`` (the
ResNet-34 of Section 4 built from the same blocks). They may import ``configs`` (and Keras);
nothing of the data, the trainers or the backends."""
