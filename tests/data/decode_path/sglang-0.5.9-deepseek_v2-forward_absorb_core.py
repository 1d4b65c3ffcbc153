def forward_absorb_core(
    self,
    q_pe,
    k_pe,
    q_nope_out,
    k_nope,
    forward_batch,
    zero_allocator,
    positions,
    topk_indices,
    llama_4_scaling,
):
    save_kv_cache = True

    if self.current_attention_backend in FORWARD_ABSORB_CORE_ATTENTION_BACKENDS:
        extra_args = {}
        if self._fuse_rope_for_trtllm_mla(forward_batch):
            extra_args = {
                "cos_sin_cache": self.rotary_emb.cos_sin_cache,
                "is_neox": self.rotary_emb.is_neox_style,
                "llama_4_scaling": llama_4_scaling,
            }

        attn_output = self.attn_mqa(
            q_nope_out,
            k_nope,
            k_nope,
            forward_batch,
            q_rope=q_pe,
            k_rope=k_pe,
            **extra_args,
            **(dict(topk_indices=topk_indices) if topk_indices is not None else {}),
        )
    else:
        if _use_aiter_gfx95:
            cos = self.rotary_emb.cos_cache
            sin = self.rotary_emb.sin_cache

            kv_cache_dtype = (
                fp8_dtype if self.kv_cache_dtype == "fp8_e4m3" else q_nope_out.dtype
            )

            q, _, _, k = fused_qk_rope_cat_and_cache_mla(
                q_nope_out,
                q_pe,
                k_nope,
                k_pe,
                forward_batch.token_to_kv_pool.get_key_buffer(
                    self.attn_mqa.layer_id
                ),
                forward_batch.out_cache_loc,
                positions,
                cos,
                sin,
                self.attn_mqa.k_scale,
                self.rotary_emb.is_neox_style,
                q_out_dtype=kv_cache_dtype,
            )

            save_kv_cache = False
        else:
            q = torch.cat([q_nope_out, q_pe], dim=-1)
            k = torch.cat([k_nope, k_pe], dim=-1)

        # Apply llama 4 scaling if provided
        if llama_4_scaling is not None:
            q *= llama_4_scaling

        attn_output = self.attn_mqa(
            q,
            k,
            k_nope,
            forward_batch,
            save_kv_cache=save_kv_cache,
            **(dict(topk_indices=topk_indices) if topk_indices is not None else {}),
        )
    attn_output = attn_output.view(-1, self.num_local_heads, self.kv_lora_rank)

    if self.use_deep_gemm_bmm:
        attn_output_val, attn_output_scale, masked_m, expected_m, aligned_m = (
            per_token_group_quant_mla_deep_gemm_masked_fp8(
                attn_output.transpose(0, 1)
            )
        )
        attn_bmm_output = attn_output.new_empty(
            (self.num_local_heads, aligned_m, self.v_head_dim)
        )
        deep_gemm_wrapper.grouped_gemm_nt_f8f8bf16_masked(
            (attn_output_val, attn_output_scale),
            (self.w_vc, self.w_scale_v),
            attn_bmm_output,
            masked_m,
            expected_m,
        )
        attn_bmm_output = (
            attn_bmm_output[:, :expected_m, :].transpose(0, 1).flatten(1, 2)
        )
    elif _is_hip:
        # TODO(haishaw): add bmm_fp8 to ROCm
        if _use_aiter_gfx95 and self.w_vc.dtype == torch.uint8:
            x = attn_output.transpose(0, 1)
            attn_bmm_output = torch.empty(
                x.shape[0],
                x.shape[1],
                self.w_vc.shape[2],
                device=x.device,
                dtype=torch.bfloat16,
            )
            batched_gemm_afp4wfp4_pre_quant(
                x,
                self.w_vc.transpose(-2, -1),
                self.w_scale_v.transpose(-2, -1),
                torch.bfloat16,
                attn_bmm_output,
            )
        else:
            if _use_aiter_gfx95 and self.w_kc.dtype == torch.float8_e4m3fn:
                attn_bmm_output = batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant(
                    X=attn_output,
                    WQ=self.w_vc.transpose(-1, -2),
                    w_scale=self.w_scale,
                    group_size=128,
                    YQ=None,
                    transpose_bm=False,
                    transpose_bm_in=True,
                    dtype=torch.bfloat16,
                )
            else:
                attn_bmm_output = torch.bmm(
                    attn_output.to(torch.bfloat16).transpose(0, 1),
                    self.w_vc.to(torch.bfloat16) * self.w_scale,
                )

        if self.o_proj.weight.dtype == torch.uint8:
            attn_bmm_output = attn_bmm_output.transpose(0, 1)
            attn_bmm_output = fused_flatten_mxfp4_quant(attn_bmm_output)
        elif self.o_proj.weight.dtype == torch.float8_e4m3fn:
            attn_bmm_output = attn_bmm_output.transpose(0, 1)
            attn_bmm_output = fused_flatten_fp8_group_quant(
                attn_bmm_output, group_size=128, dtype_quant=torch.float8_e4m3fn
            )
        else:
            attn_bmm_output = attn_bmm_output.transpose(0, 1).flatten(1, 2)

    elif self.w_vc.dtype == torch.float8_e4m3fn:
        attn_output_val, attn_output_scale = per_tensor_quant_mla_fp8(
            attn_output.transpose(0, 1),
            (
                torch.zeros((1,), dtype=torch.float32, device=attn_output.device)
                if _is_cublas_ge_129
                else zero_allocator.allocate(1)
            ),
        )
        attn_bmm_output = bmm_fp8(
            attn_output_val,
            self.w_vc,
            attn_output_scale,
            self.w_scale,
            torch.bfloat16,
        )
        attn_bmm_output = attn_bmm_output.transpose(0, 1).flatten(1, 2)
    else:
        if is_in_piecewise_cuda_graph():
            # torch dynamo requires out= op was called where output tensor was non-contiguous
            attn_bmm_output = (
                torch.bmm(attn_output.transpose(0, 1), self.w_vc)
                .transpose(0, 1)
                .flatten(1, 2)
            )
        else:
            attn_bmm_output = torch.empty(
                (attn_output.shape[0], self.num_local_heads * self.v_head_dim),
                dtype=attn_output.dtype,
                device=attn_output.device,
            )
            torch.bmm(
                attn_output.transpose(0, 1),
                self.w_vc,
                out=attn_bmm_output.view(
                    -1, self.num_local_heads, self.v_head_dim
                ).transpose(0, 1),
            )
    output, _ = self.o_proj(attn_bmm_output)

    return output

