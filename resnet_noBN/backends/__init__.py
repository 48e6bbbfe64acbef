"""One object per Keras backend, chosen once from ``KERAS_BACKEND`` (``registry.current()``):
it starts the runtime (devices or ``tf.distribute`` strategy, threads, precision, the global
seed), refuses the flags it cannot take, builds the trainer and the data sources, reports the
devices. ``registry`` chooses it and says which launchers each serves. ``base`` holds the
interface and the ``Runtime``; ``tensorflow_backend`` (with ``distribute``, ``speed``),
``jax_backend`` (with ``jax_job``) and ``torch_backend`` (with ``splits_in_memory``) implement
it; the host's own facts are ``resnet_noBN.host``'s. They may import every layer below
(``configs`` .. ``trainers``)."""
