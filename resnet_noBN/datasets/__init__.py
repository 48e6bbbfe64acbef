"""The data: CIFAR-10/100 as numpy (``cifar_data``, ``image_folder``: no TensorFlow; what a run's
data config names, read by ``cifar_data.read_split``), the training stream of both backends
(``stream``: order, crops, flips, standardisation in ``keras.ops``), and the TensorFlow input
pipelines (``cifar_input``, ``imagenet_input``, their shared ``input_common``). They may import
``configs`` (and Keras, numpy, TensorFlow where a pipeline is tf.data); no model, trainer or
backend."""
