"""resnet_noBN: Hardt & Ma, "Identity Matters in Deep Learning" (arXiv:1611.04231), TF2/Keras 3."""

from setuptools import find_packages, setup

setup(
    name="resnet_noBN",
    version="0.1.0",
    description="All-convolutional residual networks without batch norm (Hardt & Ma, 2016)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["resnet_noBN", "resnet_noBN.*"]),
    install_requires=[
        "tensorflow==2.21.0",  # pulls Keras 3
        "keras>=3.10",
        # TF 2.21 no longer installs TensorBoard, and tf.summary.* needs it.
        "tensorboard>=2.20",
        "tensorflow-datasets>=4.9.9",
        # tfds 4.9.10 on Python 3.11 fails to prepare cifar10 without it
        # (tensorflow/datasets#11212).
        "importlib_resources",
        "numpy",
        "absl-py",
        # PNG plots of training curves and of the theory experiments.
        "matplotlib",
        # Decodes image-folder data sets (resnet_noBN/datasets/image_folder.py), without TensorFlow.
        "pillow",
        # Holds numpy's BLAS to one thread in resnet_noBN/theory/near_identity.py's power
        # iteration: numpy has no call of its own to size its BLAS pool at run time.
        "threadpoolctl",
    ],
    # pyyaml: the tests parse the compose file and Kubernetes manifests.
    # coverage: ops/ci/quick_tier.py measures which modules each test executes, in every Python
    # process it starts too (COVERAGE_PROCESS_START, whose start-up hook 7.10 installs), to
    # choose the quick tier (docs/testing.md). The suite itself does not import it.
    # ruff: the one formatter and linter (pyproject.toml), pinned: its output changes by version.
    # jax: the JAX backend (KERAS_BACKEND=jax; the CPU build on a machine without a GPU). The
    # tests run it on the CPU: cross-backend equivalence and a TensorFlow-free training run.
    # torch: the PyTorch backend (KERAS_BACKEND=torch), never needed by the tests, whose torch
    # cases skip without it. PyPI's Linux wheel pulls several GB of CUDA packages; on a machine
    # without a GPU install the CPU wheel first:
    #   pip install torch --index-url https://download.pytorch.org/whl/cpu
    extras_require={
        "jax": ["jax>=0.6"],
        # JAX with its own CUDA wheels, for a GPU (the one path measured on GPUs here: JAX 0.11.2
        # on CUDA 13); cuda12 for an NVIDIA driver too old for CUDA 13
        "cuda13": ["jax[cuda13]>=0.7"],
        "cuda12": ["jax[cuda12]>=0.6"],
        "torch": ["torch>=2.2"],
        # pytest-xdist: the suite in two worker processes, a file to a worker (``-n 2 --dist
        # loadfile``): one waits on processes, signals or containers while the other computes
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.6",
            "pyyaml",
            "ruff==0.17.6",
            "jax>=0.6",
            "coverage>=7.10",
        ],
        # mutmut: mutation testing of the modules the README's figures come from, by hand
        # (ops/mutation/run.py, docs/testing.md); pinned: its mutants and their names change
        # by version. Not in .ci/run.
        "mutation": ["mutmut==3.8.1"],
    },
)
