def __init__(
    self,
    group: ProcessGroup,
    device: Union[int, str, torch.device],
    max_size=_MAX_CAR_SIZE,
) -> None:
    """
    Args:
        group: the process group to work on. If None, it will use the
            default process group.
        device: the device to bind the CustomAllreduce to. If None,
            it will be bind to f"cuda:{local_rank}".
    It is the caller's responsibility to make sure each communicator
    is bind to a unique device, and all communicators in this group
    are in the same node.
    """
    self._IS_CAPTURING = False
    self.disabled = True  # This can be modified in-place by context manager in piecewise cuda graph runner
    self.original_disabled = True  # To store the original state

    if not ops.IS_CUSTOM_AR_AVAILABLE:
        # disable because of missing custom allreduce library
        # e.g. in a non-cuda environment
        return

    self.group = group

    assert (
        dist.get_backend(group) != dist.Backend.NCCL
    ), "CustomAllreduce should be attached to a non-NCCL group."

    if not all(in_the_same_node_as(group, source_rank=0)):
        # No need to initialize custom allreduce for multi-node case.
        logger.warning(
            "Custom allreduce is disabled because this process group"
            " spans across nodes."
        )
        return

    rank = dist.get_rank(group=self.group)
    world_size = dist.get_world_size(group=self.group)
    if world_size == 1:
        # No need to initialize custom allreduce for single GPU case.
        return

    if world_size not in CustomAllreduce._SUPPORTED_WORLD_SIZES:
        logger.warning(
            "Custom allreduce is disabled due to an unsupported world"
            " size: %d. Supported world sizes: %s. To silence this "
            "warning, specify disable_custom_all_reduce=True explicitly.",
            world_size,
            str(CustomAllreduce._SUPPORTED_WORLD_SIZES),
        )
        return

    if isinstance(device, int):
        device = torch.device(f"cuda:{device}")
    elif isinstance(device, str):
        device = torch.device(device)
    # now `device` is a `torch.device` object
    assert isinstance(device, torch.device)
    self.device = device

    cuda_visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES", None)
    if cuda_visible_devices:
        device_ids = list(map(int, cuda_visible_devices.split(",")))
    else:
        device_ids = list(range(torch.cuda.device_count()))

    physical_device_id = device_ids[device.index]
    tensor = torch.tensor([physical_device_id], dtype=torch.int, device="cpu")
    gather_list = [
        torch.tensor([0], dtype=torch.int, device="cpu") for _ in range(world_size)
    ]
    dist.all_gather(gather_list, tensor, group=self.group)
    physical_device_ids = [t.item() for t in gather_list]

    # test nvlink first, this will filter out most of the cases
    # where custom allreduce is not supported
    # this checks hardware and driver support for NVLink
    if _is_cuda or _is_hip or _is_musa:
        full_nvlink = is_full_nvlink(physical_device_ids, world_size)

    if world_size > 2 and not full_nvlink:
        logger.warning(
            "Custom allreduce is disabled because it's not supported on"
            " more than two PCIe-only GPUs. To silence this warning, "
            "specify disable_custom_all_reduce=True explicitly."
        )
        return
    # test P2P capability, this checks software/cudaruntime support
    # this is expensive to compute at the first time
    # then we cache the result
    # On AMD GPU, p2p is always enabled between XGMI connected GPUs
    if not _is_hip and not _can_p2p(rank, world_size):
        logger.warning(
            "Custom allreduce is disabled because your platform lacks "
            "GPU P2P capability or P2P test failed. To silence this "
            "warning, specify disable_custom_all_reduce=True explicitly."
        )
        return

    self.max_size = max_size
    self.rank = rank
    self.world_size = world_size
    self.full_nvlink = full_nvlink

    if not _is_hip:
        # Buffers memory are owned by this Python class and passed to C++.
        # Meta data composes of two parts: meta data for synchronization and a
        # temporary buffer for storing intermediate allreduce results.
        self.meta_ptrs = self.create_shared_buffer(
            ops.meta_size() + max_size, group=group
        )
        # This is a pre-registered IPC buffer. In eager mode, input tensors
        # are first copied into this buffer before allreduce is performed
        self.buffer_ptrs = self.create_shared_buffer(max_size, group=group)
        # This is a buffer for storing the tuples of pointers pointing to
        # IPC buffers from all ranks. Each registered tuple has size of
        # 8*world_size bytes where world_size is at most 8. Allocating 8MB
        # is enough for 131072 such tuples. The largest model I've seen only
        # needs less than 10000 of registered tuples.
        self.rank_data = torch.empty(
            max_size, dtype=torch.uint8, device=self.device
        )
        self._ptr = ops.init_custom_ar(
            self.meta_ptrs, self.rank_data, rank, self.full_nvlink
        )
        ops.register_buffer(self._ptr, self.buffer_ptrs)
    else:
        # meta data buffers need to be "uncached" for signal on MI200
        self.meta = ops.allocate_meta_buffer(ops.meta_size() + max_size)
        self.buffer = torch.empty(max_size, dtype=torch.uint8, device=self.device)
        handle = ops.get_meta_buffer_ipc_handle(self.meta)
        shard_data = (
            bytes(handle),  # ipc handle to base ptr
            0,  # offset of base ptr
        )
        handles, offsets = self._gather_ipc_meta(shard_data)
        self.rank_data = torch.empty(
            max_size, dtype=torch.uint8, device=self.device
        )
        self._ptr = ops.init_custom_ar(
            self.meta, self.rank_data, handles, offsets, rank, self.full_nvlink
        )
        self.register_buffer(self.buffer)

    self.disabled = False
    self.original_disabled = False  # Ensure original_disabled == disabled
    self.tms_cudagraph = envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH.get()
