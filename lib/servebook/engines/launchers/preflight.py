"""Runs inside an engine's own interpreter, on the host with the GPU: the engine's own argument and backend
validation for each candidate attention backend, without starting a server.

    python preflight.py sglang '{"argv": {"auto": [...server args...], "triton": [...]}}'
    python preflight.py vllm   '{"model": "/models/x", "backends": ["FLASHMLA", ...]}'
    # prints one line: SERVEBOOK_PREFLIGHT {"results": {"triton": {"ok": true, "resolved": {...}}, ...}, "method": ...}

SGLang: ``sglang.srt.server_args.prepare_server_args(argv)``, the function ``sglang.launch_server`` itself calls,
whose ``ServerArgs.__post_init__`` resolves "auto" and refuses backends this GPU cannot run (for example
0.5.16 arg_groups/overrides.py:1759, "TRTLLM MLA backend is only supported on Blackwell GPUs").
vLLM (0.26.0 layout): each backend class's own ``validate_configuration`` for this GPU's capability and the
model's attention shape, and ``current_platform.get_attn_backend_cls(None, ...)`` for the automatic choice
(vllm/platforms/cuda.py:359-491) -- what the workers call when the model's attention layers are built.
Standalone on purpose: the engine's environment does not have servebook installed. A candidate it cannot judge
is reported with ``ok: null``: it is then started like any other.
"""

import json
import sys
import traceback

MARK = "SERVEBOOK_PREFLIGHT "


def _last_error(exc: BaseException) -> str:
    line = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (line[0] if line else type(exc).__name__)[:400]


def _sglang(req: dict) -> dict:
    import logging

    logging.disable(logging.WARNING)
    from sglang.srt.server_args import prepare_server_args

    out = {}
    for label, argv in req["argv"].items():
        try:
            sa = prepare_server_args(list(argv))
            out[label] = {"ok": True, "resolved": {k: getattr(sa, k, None) for k in
                                                   ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
                                                    "page_size", "disable_cuda_graph", "cuda_graph_max_bs", "sampling_backend",
                                                    "moe_runner_backend")}}
        except SystemExit as exc:  # argparse refusals
            out[label] = {"ok": False, "error": f"SystemExit: {exc.code}"}
        except BaseException as exc:  # noqa: BLE001 - the engine's own refusal, whatever its type
            out[label] = {"ok": False, "error": _last_error(exc)}
    return {"method": "sglang.srt.server_args.prepare_server_args (ServerArgs.__post_init__)", "results": out}


def _vllm(req: dict) -> dict:
    import torch
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

    cfg = json.load(open(f"{req['model']}/config.json"))
    cfg = cfg.get("text_config", cfg)
    use_mla = bool(cfg.get("kv_lora_rank"))
    head_size = (cfg["kv_lora_rank"] + cfg.get("qk_rope_head_dim", 0)) if use_mla else (
        cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    sel = AttentionSelectorConfig(head_size=head_size, dtype=torch.bfloat16, kv_cache_dtype="auto", block_size=None, use_mla=use_mla)
    cap = current_platform.get_device_capability()
    with _vllm_config_context():
        out = _vllm_judge(req["backends"], AttentionBackendEnum, sel, cap)
        try:
            path = current_platform.get_attn_backend_cls(None, sel, cfg.get("num_attention_heads"))
            auto = next((m.name for m in AttentionBackendEnum if m.value == path or (m.value and path.startswith(m.value))), path)
            out["auto"] = {"ok": True, "resolved": {"attention_backend": auto, "class": path}}
        except BaseException as exc:  # noqa: BLE001
            out["auto"] = {"ok": None, "error": _last_error(exc)}
    return {"method": "vLLM backend classes' validate_configuration and CudaPlatform.get_attn_backend_cls "
                      f"(capability {cap.major}.{cap.minor}, head_size {head_size}, use_mla {use_mla}, bfloat16)", "results": out}


def _vllm_config_context():
    """The context vLLM's workers build attention layers in: some backends' checks read the current config
    (0.26.0 FlashInferMLABackend.supports_combination calls get_current_vllm_config(), mla/flashinfer_mla.py:108-110,
    and asserts when none is set). A default VllmConfig has no model config, so such checks fall back to their
    model-free answer. No context where this version has none."""
    import contextlib

    try:
        from vllm.config import VllmConfig, set_current_vllm_config

        return set_current_vllm_config(VllmConfig())
    except Exception:  # noqa: BLE001 - older layouts, or a config that cannot be built here
        return contextlib.nullcontext()


def _vllm_judge(names, backends, sel, cap) -> dict:
    """Each named backend's own verdict. Only the engine's answers count as refusals: the reasons its
    ``validate_configuration`` returns, an ImportError (what vLLM's selector itself counts as invalid,
    platforms/cuda.py:404), or an error the backend raises on purpose. A TypeError or an AssertionError says this
    harness did not set the backend up the way vLLM does: ``ok: null``, and the backend is started like any other."""
    out = {}
    for name in names:
        try:
            member = backends[name]
            cls = member.get_class()
            reasons = cls.validate_configuration(device_capability=cap, **sel._asdict())
            out[name] = {"ok": not reasons, **({"error": f"vLLM's {cls.__name__}.validate_configuration: {', '.join(reasons)}"} if reasons else {})}
        except ImportError as exc:  # what vLLM's own selector counts as invalid (platforms/cuda.py:404)
            out[name] = {"ok": False, "error": f"ImportError: {exc}"[:400]}
        except (TypeError, AssertionError) as exc:  # this harness, not the backend: start it instead
            out[name] = {"ok": None, "error": _last_error(exc)}
        except Exception as exc:  # noqa: BLE001 - the backend's own code refused (e.g. CUSTOM: "must be registered")
            out[name] = {"ok": False, "error": _last_error(exc)}
    return out


def main() -> None:
    engine, req = sys.argv[1], json.loads(sys.argv[2])
    try:
        res = {"sglang": _sglang, "vllm": _vllm}[engine](req)
    except BaseException as exc:  # noqa: BLE001 - the preflight itself could not run: say why, start everything
        res = {"method": None, "results": {}, "error": _last_error(exc), "trace": traceback.format_exc()[-1500:]}
    print(MARK + json.dumps(res, default=str), flush=True)


if __name__ == "__main__":
    main()
