"""A stand-in for ``nvidia-smi`` while an engine's selection code runs under a faked GPU (``_runner.py``).

    SERVEBOOK_FAKE_NVIDIA_SMI='{"count": 8, "values": {"name": "...", "memory.total": "97887", ...}}' \
        python _fake_nvidia_smi.py --query-gpu=name,memory.total --format=csv,noheader

Answers ``--query-gpu=`` with one comma-separated line per GPU (``{i}`` in a value is the GPU's index, unknown fields
``N/A``) and anything else with ``nvidia-smi -L``'s form. SGLang reads total memory this way.
"""

import json
import os
import sys


def main(argv: list[str]) -> None:
    spec = json.loads(os.environ["SERVEBOOK_FAKE_NVIDIA_SMI"])
    values, count = spec["values"], int(spec["count"])
    query = [a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")]
    for i in range(count):
        if query:
            print(", ".join(values.get(f.strip(), "N/A").format(i=i) for f in query[0].split(",")))
        else:
            print(f"GPU {i}: {values['name']} (UUID: GPU-servebook-{i})")


if __name__ == "__main__":
    main(sys.argv[1:])
