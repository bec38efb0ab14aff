"""Redis Streams plumbing: consumer groups and batched reads of work entries."""

from .consumer import Delivery, ensure_group, read_batch, read_own_pending

__all__ = ["Delivery", "ensure_group", "read_batch", "read_own_pending"]
