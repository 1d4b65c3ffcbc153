"""Runs inside a prepared SGLang environment: the choices of one option of SGLang's own parser.

    python _sglang_choices.py '{"flag": "--attention-backend", "stubs": [...], "visible": [...], "absent": [...]}'

A prepared environment (no GPU wheels) cannot import every module ``sglang.srt.server_args`` imports: those are stubbed
the way the what-if does (``_runner._install_stubs``), then ``ServerArgs.add_cli_args`` builds the real parser and
the option's ``choices`` are printed as one JSON list (empty when the option has none).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _runner.py, next to this file

import _runner  # noqa: E402


def choices(flag: str) -> list[str]:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return sorted(next((a.choices or [] for a in parser._actions if flag in a.option_strings), []))


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    _runner._install_stubs(request["stubs"], request["absent"], request["visible"])
    print(json.dumps(choices(request["flag"])))
