"""Launch ``transformers serve`` and report what the loaded model really uses.

Run as a script under the engine's interpreter (it needs only transformers):

    python transformers_serve.py MODEL --host 127.0.0.1 --port 8000 --attn-implementation sdpa

It wraps the server's model loader to print one line per loaded model,
``[servebook] loaded model=... attn_implementation=... dtype=... device=...``,
the engine's own account of the attention implementation in use. If this
transformers version has no loader to wrap, it says so and serves anyway.

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


def _hook() -> None:
    try:
        from transformers.cli.serving import model_manager as mm
    except Exception as exc:  # noqa: BLE001
        print(f"[servebook] cannot observe model loading in this transformers version: {exc}", flush=True)
        return
    original = mm.ModelManager._load_model

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
    build = server_module.build_server

    def build_server(*args, **kwargs):
        app = build(*args, **kwargs)
        handler = kwargs.get("completion_handler") or (args[2] if len(args) > 2 else None)
        if handler is None:
            print("[servebook] no /servebook/decode route: build_server was called without a completion handler", flush=True)
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
    _hook()
    _decode_route()
    from transformers.cli.transformers import main as cli_main

    sys.argv = ["transformers", "serve", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
