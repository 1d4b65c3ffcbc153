"""SGLang: launch command and version detection (chapters 02/03 go deeper)."""

from __future__ import annotations

from ._base import EngineAdapter


class SGLangEngine(EngineAdapter):
    name = "sglang"
    package = "sglang"
    module = "sglang"
    attention_flag = "--attention-backend"
    ready_path = "/health"

    def _command(self, model, *, port, host, attention, tp):
        cmd = [self.python, "-m", "sglang.launch_server", "--model-path", str(model), "--host", host, "--port", str(port), "--tp", str(tp)]
        if attention:
            cmd += [self.attention_flag, attention]
        return cmd, {}

    def attention_choices(self) -> list[str]:
        """The ``choices`` of ``--attention-backend`` as this SGLang version's own parser defines them."""
        code = r"""
import json, argparse
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser()
ServerArgs.add_cli_args(p)
for a in p._actions:
    if "--attention-backend" in a.option_strings:
        print(json.dumps(sorted(a.choices or [])))
        break
else:
    print("[]")
"""
        return self._py_json(code, "could not read SGLang's --attention-backend choices", timeout=300)
