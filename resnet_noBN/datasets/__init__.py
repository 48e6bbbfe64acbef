"""The data: CIFAR-10/100 as numpy (``cifar_data``, ``image_folder``: no TensorFlow), the
training stream of both backends (``stream``: order, crops, flips, standardisation in
``keras.ops``), the CIFAR data flags (``data_config.DataConfig``), and the TensorFlow input
pipelines (``cifar_input``, ``imagenet_input``, their shared ``input_common``). They may import
``configs`` (and Keras, numpy, TensorFlow where a pipeline is tf.data); no model, trainer or
backend."""
