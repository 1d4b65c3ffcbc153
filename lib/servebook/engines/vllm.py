"""vLLM: launch command and version detection (chapters 02/03 go deeper)."""

from __future__ import annotations

from ._base import EngineAdapter


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


class VLLMEngine(EngineAdapter):
    name = "vllm"
    package = "vllm"
    module = "vllm"
    attention_flag = "--attention-backend"
    ready_path = "/health"

    def _command(self, model, *, port, host, attention, tp):
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", host, "--port", str(port),
               "--tensor-parallel-size", str(tp)]
        env: dict[str, str] = {}
        if attention:
            version = self.wanted_version or (self.version() or "0")
            # Older releases read the backend from the environment only; newer ones have a flag.
            if _version_tuple(version) >= (0, 11, 0):
                cmd += [self.attention_flag, attention]
            else:
                env["VLLM_ATTENTION_BACKEND"] = attention
        return cmd, env

    def attention_choices(self) -> list[str]:
        """The members of vLLM's own backend enum."""
        code = r"""
import json
try:
    from vllm.attention.backends.registry import AttentionBackendEnum as E
except Exception:
    try:
        from vllm.attention.backends.registry import _Backend as E
    except Exception:
        from vllm.platforms.interface import _Backend as E
print(json.dumps(sorted(m.name for m in E)))
"""
        return self._py_json(code, "could not read vLLM's attention backends", timeout=300)
