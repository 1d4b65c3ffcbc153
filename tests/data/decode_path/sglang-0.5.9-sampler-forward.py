def forward(
    self,
    logits_output: LogitsProcessorOutput,
    sampling_info: SamplingBatchInfo,
    return_logprob: bool,
    top_logprobs_nums: List[int],
    token_ids_logprobs: List[List[int]],
    positions: torch.Tensor,
):
    """Run a sampler & compute logprobs and update logits_output accordingly.

    Args:
        logits_output: The logits from the model forward
        sampling_info: Metadata for sampling
        return_logprob: If set, store the output logprob information to
            logits_output
        top_logprobs_nums: Number of top lobprobs per sequence in a batch
        token_ids_logprobs: Per-sequence list of specific token IDs to retrieve
            logprobs for. Each element is a list of token IDs (or None) for one
            sequence in the batch. This is used in speculative decoding.
        positions: The positions of the tokens in the sequence. Used for deterministic sampling
            to get the unique seed for each position.
    """
    logits = logits_output.next_token_logits

    # Preprocess logits (custom processors and NaN handling)
    logits = self._preprocess_logits(logits, sampling_info)

    if sampling_info.is_all_greedy:
        # Use torch.argmax if all requests use greedy sampling
        batch_next_token_ids = torch.argmax(logits, -1)
        if return_logprob:
            original_logprobs = logprobs = torch.nn.functional.log_softmax(
                logits, dim=-1
            )
    else:
        simple_sampling_case = (
            not sampling_info.need_top_p_sampling
            and not sampling_info.need_top_k_sampling
            and not sampling_info.need_min_p_sampling
        )

        # If requested, cache original logprobs before temperature scaling.
        if return_logprob and SGLANG_RETURN_ORIGINAL_LOGPROB:
            original_logprobs = torch.log_softmax(logits, dim=-1)

        # In RL on-policy mode, we use log_softmax to compute logprobs to match the trainer.
        logprobs_via_logsoftmax_kernel = None
        if self.rl_on_policy_target is not None:
            # TODO: use more inplace ops to save memory
            logits_div_temperature = (
                logits.bfloat16().div(sampling_info.temperatures).bfloat16()
            )
            logprobs_via_logsoftmax_kernel = torch.log_softmax(
                logits_div_temperature, dim=-1
            )
            del logits_div_temperature

        if self.use_ascend_backend:
            # Ascend backend: sample from logits directly.
            batch_next_token_ids, logprobs = self._forward_ascend_backend(
                logits, sampling_info, simple_sampling_case, return_logprob
            )
        elif (
            self.use_log_softmax_logprob
            and self.enable_deterministic
            and simple_sampling_case
        ):
            # RL on-policy path: sample from logprobs to match the trainer.
            batch_next_token_ids = self._sample_from_logprobs(
                logprobs_via_logsoftmax_kernel,
                sampling_info,
                positions,
            )
            if return_logprob and not SGLANG_RETURN_ORIGINAL_LOGPROB:
                logprobs = logprobs_via_logsoftmax_kernel
        else:
            # Standard path: do softmax and sample from probs.
            logits.div_(sampling_info.temperatures)

            # In-place op to save memory
            logits[:] = torch.softmax(logits, dim=-1)
            probs = logits

            batch_next_token_ids = self._sample_from_probs(
                probs, sampling_info, positions, simple_sampling_case
            )
            if return_logprob and not SGLANG_RETURN_ORIGINAL_LOGPROB:
                logprobs = (
                    logprobs_via_logsoftmax_kernel
                    if logprobs_via_logsoftmax_kernel is not None
                    else torch.log(probs)
                )
            del probs

    # Attach logprobs to logits_output (in-place modification)
    if return_logprob:
        if SGLANG_RETURN_ORIGINAL_LOGPROB:
            logprobs = original_logprobs
        self._attach_logprobs_to_output(
            logits_output,
            logprobs,
            top_logprobs_nums,
            token_ids_logprobs,
            sampling_info,
            batch_next_token_ids,
        )

    self._sync_token_ids_across_tp(batch_next_token_ids, sampling_info)

    return batch_next_token_ids
