"""SGLang: launch command checked against its own CLI, and what the running server reports."""

from __future__ import annotations

import re

from ._base import EngineAdapter

# The startup log carries the server arguments after resolution:
#   0.5.2  sglang/srt/entrypoints/engine.py:124   logger.info(f"{server_args=}")  -> server_args=ServerArgs(... attention_backend='triton', ...)
#   0.5.9  sglang/srt/entrypoints/engine.py:156   the same
#   0.5.23 sglang/srt/entrypoints/engine.py:311   logger.info(f"server_args={_server_args_for_logging(server_args)}")
#          -> server_args={... 'attention_backend': 'triton', ...}  (engine.py:173: resolved_dict())
# The look-behind keeps prefill_/decode_attention_backend apart.
_FIELD = r"(?<![\w]){name}'?\s*[=:]\s*'(?P<v>[^']*)'"


def _from_log(text: str, name: str) -> str | None:
    lines = [l for l in text.splitlines() if "server_args=" in l]
    for line in reversed(lines):
        m = re.search(_FIELD.format(name=name), line)
        if m:
            return m.group("v")
    return None


class SGLangEngine(EngineAdapter):
    name = "sglang"
    package = "sglang"
    module = "sglang"
    attention_flag = "--attention-backend"
    ready_path = "/health"
    checks_cli = True
    # /server_info: 0.5.9 http_server.py:593 (dataclasses.asdict(server_args)), 0.5.23 http_server.py:863
    # (build_server_info -> server_args.resolved_dict(), utils/common.py:3584); /get_server_info is the only
    # one in 0.5.2 (http_server.py:437) and a deprecated alias later (0.5.9 http_server.py:583).
    info_paths = ("/server_info", "/get_server_info")
    eager_args = ("--disable-cuda-graph",)
    # 0.5.16 managers/scheduler.py:4643 "Scheduler hit an exception" then entrypoints/engine.py:1329 "Received sigquit from a
    # child process. It usually means the child failed." (after which the server waits for CUDA core dumps)
    fatal_log = r"[^\n]*(?:(?:Scheduler|TokenizerManager|DetokenizerManager|DataParallelController) hit an exception|Received sigquit from a child process)[^\n]*"

    def preflight(self, model, launches):
        return self._run_preflight({"argv": {label: argv for label, argv in launches.items()}})

    public_command = ("python", "-m", "sglang.launch_server")
    # --tensor-parallel-size: spelled so in 0.5.2 (server_args.py:1125), 0.5.9 (server_args.py:3302, with
    # --tp-size) and 0.5.23 (arg_groups/fields/parallel.py:49, an alias); "--tp" only works as an argparse
    # abbreviation, so it is not used.
    tp_flag = "--tensor-parallel-size"

    def _command(self, model, *, port, host, attention, tp):
        cmd = [self.python, "-m", "sglang.launch_server", "--model-path", str(model), *self._where_args(host, port, tp)]
        forced, env = self._attention_args(attention) if attention else ([], {})
        return cmd + forced, env

    def reported_backend(self, server_info, log_text):
        """The backend the server resolved: from /server_info when it answered, else its startup log.

        Decode speed follows the decode backend: ``decode_attention_backend`` when set, else ``attention_backend``.
        """
        fields = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
        if server_info and any(k in server_info for k in fields):
            got = {k: server_info.get(k) for k in fields}
            source = server_info.get("_path", "server info")
        else:
            got = {k: _from_log(log_text, k) for k in fields}
            source = "startup log (server_args=)" if any(got.values()) else None
        return {"attention": got["decode_attention_backend"] or got["attention_backend"], "source": source,
                "prefill": got["prefill_attention_backend"] or got["attention_backend"], **got}

    def attention_choices(self) -> list[str]:
        """The ``choices`` of ``--attention-backend`` as this SGLang version's own parser defines them."""
        spec = self.cli_options()["options"].get(self.attention_flag) or {}
        return sorted(spec.get("choices") or [])
