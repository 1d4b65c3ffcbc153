"""Launch ``transformers serve`` and report what the loaded model really uses.

Run as a script under the engine's interpreter (it needs only transformers):

    python transformers_serve.py MODEL --host 127.0.0.1 --port 8000 --attn-implementation sdpa

It wraps the server's model loader to print one line per loaded model,
``[servebook] loaded model=... attn_implementation=... dtype=... device=...``,
the engine's own account of the attention implementation in use. If this
transformers version has no loader to wrap, it says so and serves anyway.

It runs only the transformers versions it was written against (``SUPPORTED``): 5.25 moved the served model into a
process of its own (``cli/serving/model_manager.py``), where neither the loader it wraps nor the model the decode route
reaches exists. Any other version is refused before anything starts, in one line naming the supported versions, and
the process exits with code 2 (no traceback); ``SERVEBOOK_TRANSFORMERS_ANY=1`` starts it anyway.

It also adds one route to the server, ``POST /servebook/decode`` {model, input_ids, max_tokens, top_logprobs}:
``transformers serve`` takes only text prompts and returns no log-probabilities (its completions handler lists
``logprobs`` and ``echo`` as unused fields), and chapter 03 compares backends' decode by token ids. The route runs
the served model's own ``generate`` on the server's inference thread, with the server's own generation config
(``_build_generation_config``: greedy, its cache settings), from the given ids, and answers the generated ids with
the log-probabilities of each step's logits: ``{"token_ids", "token_logprobs", "top_logprobs": [[[id, lp], ...]]}``.
"""


import sys

# This file runs as a script: keep its own folder off the import path.
if sys.path and sys.path[0].rstrip("/").endswith("launchers"):
    sys.path.pop(0)


# The transformers versions this launcher serves: pyproject.toml's range ("transformers[serving]>=5.17,<5.25").
SUPPORTED = ((5, 17), (5, 25))  # [low, high)
SUPPORTED_TEXT = "transformers >=5.17,<5.25"


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string; a pre-release of 5.25 counts as 5.25."""
    import re

    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m[1]), int(m[2])) if m else (0, 0)


def refusal(version: str | None) -> str | None:
    """The one line refusing this transformers version, or None where it is supported."""
    if version is None:
        return "[servebook] refused: transformers is not installed in this interpreter; install " + SUPPORTED_TEXT
    low, high = SUPPORTED
    if low <= _release(version) < high:
        return None
    return (f"[servebook] refused: transformers {version} is not supported by servebook's transformers launcher; "
            f"it supports {SUPPORTED_TEXT} (make book installs the locked version; 5.25 moved the served model into "
            f"a process of its own)")


def _check_version() -> None:
    import os
    from importlib import metadata

    try:
        version = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        version = None
    line = refusal(version)
    if line and os.environ.get("SERVEBOOK_TRANSFORMERS_ANY") != "1":
        print(line, flush=True)
        raise SystemExit(2)
    if line:
        print(f"{line} - started anyway (SERVEBOOK_TRANSFORMERS_ANY=1)", flush=True)


def _hook() -> None:
    try:
        from transformers.cli.serving import model_manager as mm
    except Exception as exc:  # noqa: BLE001
        print(f"[servebook] cannot observe model loading in this transformers version: {exc}", flush=True)
        return
    original = getattr(getattr(mm, "ModelManager", None), "_load_model", None)
    if original is None:
        print("[servebook] cannot observe model loading in this transformers version: "
              "no ModelManager._load_model to wrap; serving without the loaded-model line", flush=True)
        return

    def _load_model(self, model_id_and_revision, *args, **kwargs):
        model = original(self, model_id_and_revision, *args, **kwargs)
        config = getattr(model, "config", None)
        impl = getattr(config, "_attn_implementation", None)
        print(
            f"[servebook] loaded model={model_id_and_revision} attn_implementation={impl} "
            f"dtype={getattr(model, 'dtype', '?')} device={getattr(model, 'device', '?')}",
            flush=True,
        )
        return model

    mm.ModelManager._load_model = _load_model


def _decode_route() -> None:
    try:
        from transformers.cli.serving import server as server_module
    except Exception as exc:  # noqa: BLE001
        print(f"[servebook] no /servebook/decode route in this transformers version: {exc}", flush=True)
        return
    build = getattr(server_module, "build_server", None)
    if build is None:
        print("[servebook] no /servebook/decode route in this transformers version: its server module has no build_server",
              flush=True)
        return

    def build_server(*args, **kwargs):
        app = build(*args, **kwargs)
        handler = kwargs.get("completion_handler") or (args[2] if len(args) > 2 else None)
        if handler is None:
            print("[servebook] no /servebook/decode route: build_server was called without a completion handler", flush=True)
            return app

        missing = [n for n in ("_resolve_model", "_build_generation_config", "generation_state") if not hasattr(handler, n)]
        if missing:
            print(f"[servebook] no /servebook/decode route: this transformers version's completion handler has no "
                  f"{', '.join(missing)}", flush=True)
            return app

        @app.post("/servebook/decode")
        async def servebook_decode(body: dict):
            import torch

            model_id, model, _processor = handler._resolve_model(dict(body))
            n, k = int(body.get("max_tokens", 16)), int(body.get("top_logprobs", 5))
            config = handler._build_generation_config({"temperature": 0.0, "max_tokens": n}, model.generation_config, use_cb=False)
            config.max_new_tokens, config.min_new_tokens = n, n  # every step is decoded, as with ignore_eos
            config.do_sample, config.output_logits, config.return_dict_in_generate = False, True, True
            ids = torch.tensor([list(body["input_ids"])], device=model.device)
            manager = handler.generation_state.get_manager(model_id, use_cb=False)
            out = await manager.async_submit(model.generate, input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
            new = out.sequences[0, ids.shape[-1]:].tolist()
            chosen, tops = [], []
            for t, logits in zip(new, out.logits):
                lp = torch.log_softmax(logits[0].float(), dim=-1)
                v, i = torch.topk(lp, min(k, lp.shape[-1]))
                chosen.append(float(lp[t]))
                tops.append([[int(a), float(b)] for a, b in zip(i.tolist(), v.tolist())])
            return {"token_ids": new, "token_logprobs": chosen, "top_logprobs": tops,
                    "path": "model.generate on the server's inference thread, its generation config"}

        return app

    server_module.build_server = build_server


def main() -> None:
    _check_version()
    _hook()
    _decode_route()
    from transformers.cli.transformers import main as cli_main

    sys.argv = ["transformers", "serve", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
