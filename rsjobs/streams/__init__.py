"""Redis Streams plumbing: consumer groups and batched reads of work entries."""

from .consumer import Delivery, ensure_group, read_batch

__all__ = ["Delivery", "ensure_group", "read_batch"]
