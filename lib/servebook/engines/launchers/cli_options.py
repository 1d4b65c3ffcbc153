"""Runs inside an engine's own interpreter: the engine's real server CLI, as its argparse parser defines it.

    python cli_options.py sglang|vllm RUNNER_PATH STUB_MODULES_JSON
    # prints one line: SERVEBOOK_CLI {"method": "parser", "options": {"--port": {"dest": ..., "choices": ...}}}

Standalone on purpose (the engine's environment does not have servebook installed). GPU-only
kernel libraries that this machine lacks get empty import stubs (chapter 02's runner, loaded
from RUNNER_PATH) only so that modules the parser's definition imports can be imported; the
parser itself is the engine's own: SGLang's ``ServerArgs.add_cli_args``, vLLM's
``make_arg_parser(FlexibleArgumentParser())``.
"""

import argparse
import importlib.util
import json
import sys

MARK = "SERVEBOOK_CLI "


def _stubs(runner_path, modules):
    spec = importlib.util.spec_from_file_location("_servebook_runner", runner_path)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    runner._install_stubs(modules, ())


def _sglang_parser():
    from sglang.srt.server_args import ServerArgs

    p = argparse.ArgumentParser()
    ServerArgs.add_cli_args(p)
    return p


def _vllm_parser():
    # The parser fills defaults from config dataclasses whose __post_init__ asks the platform for
    # its device type (vllm/config DeviceConfig: "Failed to infer device type" on a machine with
    # neither a GPU nor a CPU build of vLLM). Option strings and choices do not depend on it.
    import vllm.platforms as platforms

    plat = platforms.current_platform
    if not getattr(plat, "device_type", ""):
        type(plat).device_type = "cpu"
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # newer layouts
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    from vllm.entrypoints.openai.cli_args import make_arg_parser

    return make_arg_parser(FlexibleArgumentParser())


def main():
    engine, runner_path, stub_json = sys.argv[1], sys.argv[2], sys.argv[3]
    _stubs(runner_path, json.loads(stub_json))
    parser = {"sglang": _sglang_parser, "vllm": _vllm_parser}[engine]()
    options = {}
    for action in parser._actions:
        for opt in action.option_strings:
            choices = None
            if action.choices is not None:
                choices = sorted({getattr(c, "name", None) or str(c) for c in action.choices})
            options[opt] = {"dest": action.dest, "choices": choices, "takes_value": action.nargs != 0}
    sys.stdout.write("\n" + MARK + json.dumps({"method": "parser", "options": options}) + "\n")


if __name__ == "__main__":
    main()
