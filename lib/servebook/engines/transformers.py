"""`transformers serve`: the engine that runs anywhere (CPU included)."""

from __future__ import annotations

import re
from pathlib import Path

from ._base import EngineAdapter

_LOADED = re.compile(r"\[servebook\] loaded model=(?P<model>\S+) attn_implementation=(?P<attn>\S+) dtype=(?P<dtype>\S+) device=(?P<device>\S+)")


def _hub_cache_env() -> dict[str, str]:
    """An existing hub cache for the server.

    Some ``transformers serve`` releases (5.17 seen on an H200 host) answer ``/v1/models`` with
    HTTP 500 when the Hugging Face cache directory does not exist; on a fresh host it often
    does not. When the user has not chosen a cache, point the server at an empty one of ours.
    """
    import os

    from ..paths import cache_dir

    if os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME"):
        return {}
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface" / "hub"
    if default.is_dir():
        return {}
    ours = cache_dir() / "hf-hub"
    ours.mkdir(parents=True, exist_ok=True)
    return {"HF_HUB_CACHE": str(ours)}


class TransformersEngine(EngineAdapter):
    name = "transformers"
    package = "transformers"
    module = "transformers"
    attention_flag = "--attn-implementation"
    ready_path = "/health"

    def __init__(self, python=None, wanted_version=None, device: str = "auto"):
        super().__init__(python, wanted_version)
        self.device = device

    # the launcher wraps `transformers serve` (it only adds a log line): a user types the command itself
    public_command = ("transformers", "serve")
    _args_start = 2  # [python, launchers/transformers_serve.py, model, ...]
    # --device: where servebook ran it ("auto" is the server's own default); --log-level info: so that servebook
    # can read what the server loaded
    servebook_options = ("--device", "--log-level")
    # the launcher's refusal of a transformers version it does not serve (launchers/transformers_serve.py)
    fatal_log = r"\[servebook\] refused: [^\n]*"

    def _command(self, model, *, port, host, attention, tp):
        script = str(Path(__file__).parent / "launchers" / "transformers_serve.py")
        cmd = [self.python, script, str(model), *self._where_args(host, port, None), "--device", self.device, "--log-level", "info"]
        forced, env = self._attention_args(attention) if attention else ([], {})
        return cmd + forced, env

    def _server_env(self):
        return {"TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", **_hub_cache_env()}

    def attention_choices(self) -> list[str]:
        """The server's own list of valid implementations, read from its source in its interpreter
        (``launchers/transformers_attention.py``)."""
        script = str(Path(__file__).parent / "launchers" / "transformers_attention.py")
        return self._script_json([script], "could not read transformers' attention implementations", timeout=120)

    @staticmethod
    def loaded_from_log(log_text: str) -> list[dict]:
        """What the server reported for each loaded model (see ``launchers/transformers_serve.py``)."""
        return [m.groupdict() for m in _LOADED.finditer(log_text)]

    def reported_backend(self, server_info, log_text):
        """The launcher wrapper's own log line (``[servebook] loaded model=... attn_implementation=...``)."""
        loaded = self.loaded_from_log(log_text)
        return {"attention": loaded[-1]["attn"] if loaded else None, "device": loaded[-1]["device"] if loaded else None,
                "source": "launcher log ([servebook] loaded)" if loaded else None}
