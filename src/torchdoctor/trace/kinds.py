"""Event kinds: Kineto's categories, across its 2021 and current spellings, as small integers."""

from __future__ import annotations

from enum import IntEnum


class Kind(IntEnum):
    """What an event is. Stored as uint8 in the trace table's ``kind`` column."""

    OTHER = 0
    CPU_OP = 1
    USER_ANNOTATION = 2
    PYTHON_FUNCTION = 3
    RUNTIME = 4
    DRIVER = 5
    KERNEL = 6
    MEMCPY = 7
    MEMSET = 8
    GPU_USER_ANNOTATION = 9
    GPU_SYNC = 10
    TRACE = 11


CATEGORY_KIND: dict[str, Kind] = {
    # current Kineto categories
    "cpu_op": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "python_function": Kind.PYTHON_FUNCTION,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "gpu_user_annotation": Kind.GPU_USER_ANNOTATION,
    "cuda_sync": Kind.GPU_SYNC,
    "Trace": Kind.TRACE,
    # the 2021 format (torch 1.8-1.9 era)
    "Operator": Kind.CPU_OP,
    "Runtime": Kind.RUNTIME,
    "Kernel": Kind.KERNEL,
    "Memcpy": Kind.MEMCPY,
    "Memset": Kind.MEMSET,
    # other spellings seen in the wild (lower-case variants, XPU/privateuse runtimes)
    "operator": Kind.CPU_OP,
    "runtime": Kind.RUNTIME,
    "xpu_runtime": Kind.RUNTIME,
    "xpu_driver": Kind.DRIVER,
    "privateuse1_runtime": Kind.RUNTIME,
    "privateuse1_driver": Kind.DRIVER,
    "gpu_memory": Kind.OTHER,
}

GPU_ACTIVITY_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
"""Kinds that occupy the GPU: the busy time is the union of these intervals."""
