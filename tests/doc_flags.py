"""Check command lines against the absl flags of the repository's launchers, in one process.

    python tests/doc_flags.py < cases.json

stdin: ``[{"script": "launch/cifar.py", "args": [[...], ...]}, ...]``; each script's module is
executed (its flags defined, its ``main`` not run), each argument list parsed by absl as the
launcher would parse it (an unknown flag or a bad value is an error; the words after ``--`` and
positional words are left over); then the script's flags are deleted for the next one. An
argument ``--NAME=\0`` stands for a value the reader fills in: NAME must be a flag, and its
default stands in for the value. stdout: one JSON list, per script ``{"errors": [message or null
for each argument list]}``.
Run by tests/test_docs.py: the documentation's commands checked without running them.
"""

import json
import os
import runpy
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from absl import flags  # noqa: E402

FLAGS = flags.FLAGS


def check(script: str, arg_lists: list[list[str]]) -> dict:
    before = set(FLAGS)
    runpy.run_path(str(REPO / script), run_name="doc_flags")
    errors = []
    for args in arg_lists:
        FLAGS.unparse_flags()
        try:
            FLAGS([script, *map(placeholder_to_default, args)])
            errors.append(None)
        except flags.Error as e:
            errors.append(str(e))
    FLAGS.unparse_flags()
    for name in set(FLAGS) - before:
        delattr(FLAGS, name)
    return {"errors": errors}


def placeholder_to_default(arg: str) -> str:
    """``--NAME=\\0`` -> the flag's default as an argument (an unknown NAME is left to fail)."""
    if not (arg.startswith("--") and arg.endswith("=\0")):
        return arg
    name = arg[2:-2]
    if name not in FLAGS:
        return f"--{name}=x"  # fails: no such flag
    flag = FLAGS[name]
    if flag.boolean:
        return flag.serialize()
    if flag.default is not None and flag.serialize():
        return flag.serialize()
    # no default to stand in (a required flag, an empty list): a value of the flag's type
    values = getattr(flag.parser, "enum_values", None)
    if values:
        return f"--{name}={values[0]}"
    return f"--{name}=1" if flag.flag_type() in ("int", "float") else f"--{name}=x"


def main() -> None:
    cases = json.load(sys.stdin)
    results = [check(c["script"], c["args"]) for c in cases]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
