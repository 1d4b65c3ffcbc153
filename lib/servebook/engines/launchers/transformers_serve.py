"""Launch ``transformers serve`` and report what the loaded model really uses.

Run as a script under the engine's interpreter (it needs only transformers):

    python transformers_serve.py MODEL --host 127.0.0.1 --port 8000 --attn-implementation sdpa

It wraps the server's model loader to print one line per loaded model,
``[servebook] loaded model=... attn_implementation=... dtype=... device=...``,
the engine's own account of the attention implementation in use. If this
transformers version has no loader to wrap, it says so and serves anyway.
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


def main() -> None:
    _hook()
    from transformers.cli.transformers import main as cli_main

    sys.argv = ["transformers", "serve", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
