"""Runs inside transformers' interpreter: the attention implementations ``transformers serve`` accepts.

    python transformers_attention.py     # prints one line: a JSON list, e.g. ["eager", "flash_attention_2", ...]

Read from the server's own code: the ``VALID_ATTN_IMPLEMENTATIONS`` set literal in its model manager (5.x), plus
the hub kernel its own error message gives as the example of the other accepted form (``is_kernel``); older
layouts, without that file, fall back to the attention registry (``ALL_ATTENTION_FUNCTIONS``).
"""

import ast
import importlib.util
import json
import re
import sys

# This file runs as a script: keep its own folder off the import path.
if sys.path and sys.path[0].rstrip("/").endswith("launchers"):
    sys.path.pop(0)


def from_model_manager() -> list:
    spec = importlib.util.find_spec("transformers.cli.serving.model_manager")
    if not (spec and spec.origin):
        return []
    with open(spec.origin) as fh:
        source = fh.read()
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "VALID_ATTN_IMPLEMENTATIONS" for t in node.targets):
            names = sorted(ast.literal_eval(node.value))
    # hub kernels are accepted too (is_kernel); the server's own error message names its example one
    m = re.search(r"hub kernel \(e\.g\. '([\w.-]+/[\w.-]+)'\)", source)
    if names and m:
        names.append(m.group(1))
    return names


def from_registry() -> list:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return sorted(set(["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()]))


if __name__ == "__main__":
    print(json.dumps(from_model_manager() or from_registry()))
