"""The store: the one part of rsjobs that speaks Redis about tasks, workflows, workers and
their streams (keys, script loading, packing, typed replies, error mapping, transport)."""
