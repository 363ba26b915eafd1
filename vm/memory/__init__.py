"""The VM's memory: storages, tensor views, allocators and their statistics."""

from .allocator import Allocator, NaiveAllocator, PooledAllocator, size_class
from .stats import MemoryStats
from .storage import MIN_ALIGNMENT, Storage, tensor_view

__all__ = [
    "MIN_ALIGNMENT",
    "Allocator",
    "MemoryStats",
    "NaiveAllocator",
    "PooledAllocator",
    "Storage",
    "size_class",
    "tensor_view",
]
